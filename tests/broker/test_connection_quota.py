"""An agent cannot use up the broker's descriptors (issue 22: the broker survives its agents).

The attack: an agent opens connection after connection to the broker's socket and keeps
them all, until the broker has no descriptor left for anyone -- the operator, the other
agents, its own store and spawns.  Each agent's process tree may hold at most
``MAX_CONNECTIONS_PER_AGENT`` at once (counted from accept, before ``hello``); the next is
refused with a ``quota`` error saying so, and everyone else still connects.
"""

from __future__ import annotations

import json
import sys
import textwrap

from broker.server import MAX_CONNECTIONS_PER_AGENT

FLOOD = textwrap.dedent(
    """
    import json, os, socket, sys, time
    count, out, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    held, refused = [], []
    hello = json.dumps({"id": 1, "op": "hello", "args": {"ticket": os.environ["CONCLAVE_TICKET"]}}).encode() + b"\\n"
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.environ["CONCLAVE_SOCKET"])
        try:
            s.sendall(hello)
        except BrokenPipeError:  # a refused connection may be hung up before its hello: the refusal is still there to read
            pass
        reply = json.loads(s.makefile("rb").readline())
        if reply["ok"]:
            held.append(s)
        else:
            refused.append(reply["error"])
            s.close()
    with open(out + ".tmp", "w") as f:
        json.dump({"held": len(held), "refused": refused}, f)
    os.replace(out + ".tmp", out)
    while not os.path.exists(stop):
        time.sleep(0.05)
    """
)


def test_a_connection_flood_from_one_agent_leaves_room_for_everyone_else(start_run) -> None:
    run = start_run([{"name": "alice"}, {"name": "bob"}])
    script, out, stop = run.repo / "flood.py", run.repo / "flood.json", run.repo / "stop"
    script.write_text(FLOOD)
    alice, bob = run.puppet("alice"), run.puppet("bob")
    assert alice.call("whoami")["agent"] == "alice"  # its puppet holds one connection already
    flood = MAX_CONNECTIONS_PER_AGENT + 72
    alice.sh("sh", "-c", f"{sys.executable} -I {script} {flood} {out} {stop} >{out}.log 2>&1 &")
    try:
        try:
            result = run.wait_for_json(out, timeout=60, what="the flood")
        except TimeoutError as exc:
            log = out.with_name(out.name + ".log")
            raise AssertionError(f"the flood wrote no result; its output: {log.read_text() if log.exists() else '(none)'}") from exc
        # Control: alice's connections were taken up to her cap; past it, each one was refused, saying why.
        assert result["held"] == MAX_CONNECTIONS_PER_AGENT - 1
        assert len(result["refused"]) == flood - result["held"]
        assert {e["code"] for e in result["refused"]} == {"quota"}
        assert f"already holds {MAX_CONNECTIONS_PER_AGENT} connections" in result["refused"][0]["message"]
        # While she holds them all: another agent and the operator connect and are answered.
        assert bob.call("whoami", fresh=True)["agent"] == "bob"
        assert {a["agent"] for a in run.op("agents")} == {"alice", "bob"}
        stats = run.op("broker.stats")
        assert stats["live_agents"] == 2
        # And alice herself gets nothing more until she lets some go -- told why, every time (the broker
        # refuses and hangs up before the client's hello: the client still reads the refusal).
        assert alice.try_call("whoami")["ok"]  # (the connection she already had still works)
        for _ in range(3):
            refused = alice.sh(sys.executable, "-I", "-m", "broker.cli", "whoami", "--json")
            assert refused.returncode != 0, refused.stderr
            error = json.loads(refused.stderr)["error"]  # --json: the refusal is a JSON object naming its code
            assert error["code"] == "quota" and f"already holds {MAX_CONNECTIONS_PER_AGENT} connections" in error["message"], error
    finally:
        stop.write_text("")
    run.wait_until(lambda: alice.sh(sys.executable, "-I", "-m", "broker.cli", "whoami", "--json").returncode == 0, timeout=30, what="alice's flood to close")
    assert json.loads(alice.conclave("whoami", "--json").stdout)["agent"] == "alice"
