"""The one process that reads agents' objects: ``git pack-objects``, boxed, kept for the run.

An agent's object directory is the agent's to write: any file in it may be a
link, and its ``info/alternates`` may name any object store the broker can
read (another project's private history).  So the objects are read by git
only inside a Landlock domain that may read the system's programs and
libraries, the person's object store (and the stores it borrows from), and
the agents' git directories -- nothing else: a link pointing anywhere else
fails to open.  Its ``GIT_DIR`` is an empty git directory of the broker's,
so it reads no one's configuration either.

Starting the sandbox launcher costs an interpreter start, so one reader is
started (lazily) per run and kept: :class:`Reader` sends it one request per
copy -- the agent's object directory and the revisions -- and it answers
with the pack ``git pack-objects`` made.  Run as a script (``python -I -S
gitreader.py GIT``) it is that server: standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

#: Most bytes of one pack (a larger commit is refused, naming the limit).
MAX_PACK = 1 << 30


def serve(git: str) -> None:
    """Answer requests on stdin: ``{"objects": DIR, "revs": TEXT}`` -> a header line, then the pack."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        env = dict(os.environ, GIT_ALTERNATE_OBJECT_DIRECTORIES=request["objects"])
        done = subprocess.run(
            [git, "-c", "core.hooksPath=/dev/null", "pack-objects", "--revs", "--stdout", "-q"],
            input=request["revs"].encode(), capture_output=True, env=env, cwd="/",
        )  # fmt: skip
        ok = done.returncode == 0 and len(done.stdout) <= MAX_PACK
        error = done.stderr.decode(errors="replace")[-2000:] if done.returncode else f"a pack of {len(done.stdout)} bytes is over {MAX_PACK}"
        out.write((json.dumps({"ok": ok, "size": len(done.stdout) if ok else 0, "error": None if ok else error}) + "\n").encode())
        if ok:
            out.write(done.stdout)
        out.flush()


class ReaderFailed(OSError):
    """The reader could not make the pack; the message has git's words."""


class Reader:
    """The client: starts the boxed reader on first use, restarts it if it died.  One request at a time
    (the caller holds the git views' lock); safe to call from a worker thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv, self.env = argv, env
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def pack(self, objects: str, revs: str) -> bytes:
        """The pack of what ``revs`` name, read with ``objects`` as an alternate.

        Raises:
            ReaderFailed: git could not read them (a link out of the allowed stores, a missing object).
        """
        with self._lock:
            for attempt in (1, 2):
                process = self._start()
                assert process.stdin is not None and process.stdout is not None
                try:
                    process.stdin.write(json.dumps({"objects": objects, "revs": revs}).encode() + b"\n")
                    process.stdin.flush()
                    header = process.stdout.readline()
                    if not header:
                        raise BrokenPipeError("the reader exited")
                    answer = json.loads(header)
                    data = process.stdout.read(answer["size"]) if answer["ok"] else b""
                except (BrokenPipeError, ValueError, OSError):
                    self.close()
                    if attempt == 2:
                        raise ReaderFailed(5, "the boxed object reader died twice") from None
                    continue
                if not answer["ok"]:
                    raise ReaderFailed(22, answer["error"] or "no message")
                return data
        raise AssertionError("unreachable")

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, cwd="/")
        return self._process

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream is not None:
                    stream.close()
            self._process = None


if __name__ == "__main__":
    serve(sys.argv[1])
