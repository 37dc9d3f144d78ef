"""The broker's reaper pass asks the kernel first: one ``waitid(WNOWAIT)`` says whether any child
has exited, and only then is the process table read (``broker.main._reap_orphans``).  Most passes
find none, twice a second for the broker's life.  Held here in a fresh interpreter (no child of
pytest's own in the way): the question is answered right in every state a child can be in, and
asking it reaps nothing."""

from __future__ import annotations

import json
import subprocess
import sys

ASK = """
import json, os, subprocess, time
from broker.main import _has_zombie_child
seen = {"no child": _has_zombie_child()}
child = subprocess.Popen(["sleep", "30"])
seen["a running child"] = _has_zombie_child()
child.kill()
while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
seen["an exited child"] = _has_zombie_child()
seen["asked again"] = _has_zombie_child()  # WNOWAIT: asking did not reap it
seen["still waitable"] = os.waitpid(child.pid, os.WNOHANG)[0] == child.pid
seen["reaped"] = _has_zombie_child()
print(json.dumps(seen))
"""


def test_the_reaper_pass_sees_an_exited_child_without_reaping_it() -> None:
    done = subprocess.run([sys.executable, "-I", "-c", ASK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "no child": False,
        "a running child": False,
        "an exited child": True,
        "asked again": True,
        "still waitable": True,
        "reaped": False,
    }
