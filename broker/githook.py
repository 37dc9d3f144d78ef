"""conclave's ``reference-transaction`` hook: every branch update asks the broker first.

Git (2.28+) runs the ``reference-transaction`` hook for every ref update --
commit, cherry-pick, revert, merge, rebase, am, stash, ``update-ref``,
``commit-tree`` + ``update-ref`` -- once when the update is ``prepared``
(the refs are locked; a nonzero exit aborts it) and once when it is
``committed``, with ``OLD NEW REFNAME`` lines on stdin.  Two copies run:

* ``agent``: in a boxed agent's own git directory.  In ``prepared``, each
  update of ``refs/heads/*`` is sent to the broker (``git.bring_in``), which
  brings the commit into the person's repository or refuses it -- the
  refusal aborts the agent's update too.  Tags, stash, detached heads and
  deletions stay in the agent's git directory.  After a commit the broker
  had to replay onto a branch that moved, ``committed`` asks it to settle
  the agent's branch onto the replayed commit (``git.settle``).
* ``person``: in the person's hooks directory, only while an unboxed
  (``sandbox = "off"``) agent runs.  In ``prepared`` it asks the broker
  whether the update may go ahead (``git.check``): an agent needs its locks,
  the person (proven by the operator key) always may, and an agent process
  that hid its ticket is neither.

The broker trusts nothing the hook says but the commit id and the branch.
The hook runs ``python -I -S -c "...from githook import main..." KIND
PHASE HOOKS`` with the absolute path of conclave's installation appended to
``sys.path`` (after the standard library; imported, so its bytecode is
cached, where a script would be compiled at every start), and never imports
anything from the work tree.  A commit pays one interpreter start and one round trip
(docs/BENCHMARKS.md), so it imports no module at all beyond the two C ones
it needs (``_socket``, ``_json``): ``socket`` and ``json`` pull in ``enum``
and ``re``, which cost more than the interpreter itself on a loaded machine.
"""

from __future__ import annotations

import os
import sys

import _json
import _socket

MARKER = "# conclave-guard"
HOOK = "reference-transaction"
#: Left in the hooks directory by ``prepared`` when the broker replayed the commit; ``committed`` settles.
SETTLE = "conclave-settle"
ZERO = "0" * 40
EXIT_REFUSED = 1
#: ``SO_PEERPIDFD`` (Linux 6.5); the constant, where this Python does not name it.
SO_PEERPIDFD = getattr(_socket, "SO_PEERPIDFD", 77)
#: Seconds the hook waits for the broker (a large commit is copied and checked before the answer).
TIMEOUT = 600.0


def script(
    kind: str, *, python: str, state: str, socket_path: str | None = None, key_file: str | None = None, chained: str | None = None
) -> str:
    """The hook file's text: a shell wrapper that starts this module only when there is work.

    The person's copy names the broker's socket and the operator key's file (the person's
    git has neither in its environment), and runs ``chained`` -- the person's own hook of
    that name, moved aside -- first, for every phase, with the same input.
    """
    # Imported, not run as a script: a script is compiled at every start, a module's bytecode is kept.
    code = f"import sys; sys.path.append({os.path.dirname(os.path.abspath(__file__))!r}); from githook import main; sys.exit(main(sys.argv))"
    run = " ".join(_quote(a) for a in (python, "-I", "-S", "-c", code, kind))
    where = "".join(f"{name}={_quote(value)} " for name, value in (("CONCLAVE_HOOK_SOCKET", socket_path), ("CONCLAVE_HOOK_KEY", key_file)) if value)
    feed, chain = "", ""
    if chained:
        chain = f"""input="$(cat)"
if [ -x "$(dirname "$0")/{chained}" ]; then
    printf '%s\\n' "$input" | "$(dirname "$0")/{chained}" "$@" || exit $?
fi
"""
        feed = "printf '%s\\n' \"$input\" | "
    return f"""#!/bin/sh
{MARKER} ({kind}): installed by conclave for {state}; every branch update asks the broker (docs/LOCKS.md).
{chain}case "$1" in
prepared) ;;
committed) [ -e "$(dirname "$0")/{SETTLE}" ] || exit 0 ;;
*) exit 0 ;;
esac
{feed}{where}exec {run} "$1" "$(dirname "$0")"
"""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def updates(lines: list[str]) -> list[dict[str, str]]:
    """The branch updates worth asking about: ``refs/heads/*`` moved to a commit (not deleted, not unchanged)."""
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        old, new, ref = parts
        if ref.startswith("refs/heads/") and new != old and set(new) != {"0"}:
            found.append({"ref": ref, "new": new})
    return found


class Refused(Exception):
    pass


def _ancestors() -> set[int]:
    # broker.client has the same walk; importing it (pathlib, typing) would double this hook's cost.
    found, pid = set(), os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            break
        pid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        if pid in found or pid == 0:
            break
        found.add(pid)
    return found


def _is_the_broker_outside(sock: _socket.socket) -> bool:
    """(In a PID namespace of the agent's own the broker's pid reads 0.)  Is the server the very
    process the broker named at spawn (``CONCLAVE_BROKER_PROCESS``)?  As broker.client does, by
    the pidfd the kernel gives for the peer."""
    expected = os.environ.get("CONCLAVE_BROKER_PROCESS")
    if not expected:
        return False
    try:
        pidfd = sock.getsockopt(_socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        return False
    try:
        st = os.fstat(pidfd)
    finally:
        os.close(pidfd)
    return f"{st.st_dev}:{st.st_ino}" == expected


class _Scanner:
    """What ``_json.make_scanner`` reads from its context (``json.decoder`` without ``re``)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float
    memo: dict[str, object] = {}


_scan = _json.make_scanner(_Scanner())


def _encode(value: object) -> str:
    """JSON for the little this hook sends: strings, lists and dicts of them, numbers."""
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"
    return str(int(value))  # type: ignore[call-overload]


def _say_probe_token(key: str) -> str | None:
    """The operator's probe (``broker.operator_probe``), said by this very process: the broker accepts the
    key only from a process that reached its abstract socket, which no conclave box can.  As
    ``broker.client.say_probe_token`` does; not imported from there, which would pull in what the
    hook avoids (module docstring) -- and only the person's commits, never an agent's, pay for hmac."""
    import hashlib
    import hmac

    address = "\0conclave-operator-" + hmac.new(key.encode(), b"conclave operator probe", hashlib.sha256).hexdigest()[:32]
    token = os.urandom(16).hex()
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    probe.settimeout(5)
    try:
        probe.connect(address)
        probe.sendall(token.encode() + b"\n")
    except OSError:
        return None
    finally:
        probe.close()
    return token


def _call(op: str, args: dict) -> dict:  # type: ignore[type-arg]
    """One request to the broker as this process's agent (its ticket), or as the person (the key)."""
    ticket = os.environ.get("CONCLAVE_TICKET")
    path = os.environ.get("CONCLAVE_HOOK_SOCKET") or os.environ.get("CONCLAVE_SOCKET", "")
    if ticket:
        hello = {"ticket": ticket}
    else:
        key_file = os.environ.get("CONCLAVE_HOOK_KEY", "")
        try:
            with open(key_file) as f:
                key = f.read().strip()
        except OSError:
            raise Refused(
                "no agent identity (CONCLAVE_TICKET) and the operator key cannot be read: an agent cannot update a branch "
                "without its ticket, and a process inside an agent's box cannot see the key"
            ) from None
        hello = {"operator_key": key}
        token = _say_probe_token(key)
        if token is not None:
            hello["probe"] = token
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    try:
        sock.connect(path)
        if ticket:
            server = int.from_bytes(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)[:4], sys.byteorder, signed=True)
            if not (server == 0 and _is_the_broker_outside(sock)) and (server == 0 or server not in _ancestors()):
                raise Refused(f"{path} is served by pid {server}, which is not the broker that started this agent")
        requests = (("hello", hello), (op, args))
        sock.sendall("".join(_encode({"id": n, "op": name, "args": body}) + "\n" for n, (name, body) in enumerate(requests, 1)).encode())
        buffer, answers = b"", []
        while len(answers) < len(requests):
            line, newline, rest = buffer.partition(b"\n")
            if newline:
                answers.append(_scan(line.decode(), 0)[0])
                buffer = rest
                continue
            chunk = sock.recv(65536)
            if not chunk:
                raise Refused("the broker closed the connection")
            buffer += chunk
        for answer in answers:
            if not answer.get("ok"):
                raise Refused((answer.get("error") or {}).get("message") or "the broker refused")
        return answers[1].get("result") or {}
    except OSError as exc:
        raise Refused(f"cannot reach the broker at {path or '(no socket)'}: {exc.strerror or exc}") from None
    finally:
        sock.close()


def main(argv: list[str]) -> int:
    kind, phase, hooks_dir = argv[1], argv[2], argv[3]
    settle = os.path.join(hooks_dir, SETTLE)
    try:
        if phase == "committed":
            try:
                os.unlink(settle)
            except OSError:
                pass
            _call("git.settle", {})
            return 0
        wanted = updates(sys.stdin.read().splitlines())
        if not wanted:
            return 0
        result = _call("git.bring_in" if kind == "agent" else "git.check", {"updates": wanted})
    except Refused as exc:
        sys.stderr.write(f"conclave: commit refused: {exc}\n")
        return EXIT_REFUSED
    for line in result.get("messages", []):
        sys.stderr.write(f"conclave: {line}\n")
    if result.get("settle"):
        try:
            os.close(os.open(settle, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
        except OSError:
            pass  # the broker settles the branch on its next look anyway
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
