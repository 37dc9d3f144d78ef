"""The sandbox launcher: builds an agent's box, runs the agent in it, and ends what it leaves.

    python -I -S launcher.py [OPTIONS] -- COMMAND [ARGS...]

The supervisor spawns this instead of the agent's command (with the agent's
environment, directory and output, in a new session).  The launcher -- ``L``,
the pid the broker registers -- never becomes the agent: it stays, as the
agent's keeper (``keeper.py``), a child subreaper that waits for it::

    L   forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT; SIGUSR1 ends the agent now
    └─ A   the agent: its own process group, its box applied on itself, then exec COMMAND

and with ``--pidns``::

    L
    └─ C   pid 1 of a new PID namespace: mounts its own /proc, reaps, forwards
       └─ A   (pid 2 there)

``L`` ends with ``A``'s exact status (the same exit code, or death by the
same signal).  Nothing the agent starts outlives it: with a PID namespace,
``C`` exits when ``A`` does and the kernel kills everything left in the
namespace; without one, everything ``A`` orphans is re-parented to ``L``,
which kills it all (and the agent's cgroup, where one is delegated).  When
the broker dies -- end of file on ``--watch``, a pipe only the broker holds
open for writing -- ``L`` does the same at once.  The broker sees every
process of the agent as ``L``'s descendant (``SO_PEERCRED`` pids and
``/proc/<pid>/stat`` are translated to its own namespace), so tickets keep
working.  Nothing of this runs in the broker's own (threaded) process.  Any
setup step that fails ends the launch with exit code 126 and a line on
stderr (the agent's log): an agent never runs with less than it was promised.

OPTIONS (repeatable where it makes sense):
  --ns                a user + mount namespace with a private /tmp, /dev/shm
                      and /run/user/<uid>
  --pidns             (--ns) and a PID namespace, C its init
  --hide PATH         (--ns) make PATH empty: a container socket, a secret inside a grant, ...
  --pin PATH          (--ns) bind PATH over itself: a mount point cannot be renamed (.git)
  --read-only PATH    (--ns) bind PATH over itself read-only (.git/hooks)
  --keep PATH         (--ns) what a private or hidden directory must keep (bound back)
  --private-home HOME (--ns) an empty tmpfs over HOME: only the kept paths come back
                      (symbolic links on their way too); what is not kept reads as absent
  --landlock          A restricts itself with Landlock (after every mount):
  --ro PATH  --rw PATH  --dev PATH  --deny PATH  --connect PATH
  --ro-hole PATH      (--landlock) keep PATH read-only although a --rw root holds it
  --drop-caps         A empties its capability sets (an agent of a root broker)
  --cgroup DIR        the agent (C, else A) joins cgroup v2 DIR; L kills it at the end
  --max-processes N   (--ns) RLIMIT_NPROC N inside the agent's user namespace: its
                      share of the uid's processes (counted per user namespace since
                      Linux 5.14; uid 0 is exempt)
  --nofile N          A's soft RLIMIT_NOFILE (the broker raised its own; agents get the usual one)
  --watch FD          the broker's lifeline: end of file means the broker is gone
  --report FD         JSON lines to the broker: {"share": {...}} when the agent
                      reaches its share, {"leftovers": N} once it has ended

Standard library only and few imports: this runs on every agent spawn
(docs/BENCHMARKS.md has the cost).
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import launch  # compiled once and cached, unlike this script

    launch.main(sys.argv)
