"""Bad input on the socket gets a specific error and never hurts anyone else."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Iterator

import pytest

from agents.harness import Run
from broker.client import BlockingClient
from broker.errors import ConclaveError, ErrorCode
from broker.wire import MAX_LINE_BYTES


def raw_socket(run) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(run.socket_path()))
    return s


def hello(run, rid: int = 1) -> bytes:
    """The operator's hello, with the key the operator's CLI reads from the state directory (and the
    token it says on the broker's abstract socket first, broker.operator_probe)."""
    from broker.client import say_probe_token

    key = run.operator_key()
    return json.dumps({"id": rid, "op": "hello", "args": {"operator_key": key, "probe": say_probe_token(key)}}).encode() + b"\n"


def exchange(sock: socket.socket, payload: bytes) -> dict:
    sock.sendall(payload)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return json.loads(buf) if buf else {}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One broker for the module: each test's bad input is its own, and each shows the broker and
    its connections unharmed afterwards (a test alone with ``-k`` starts it the same way)."""
    run = Run(tmp_path_factory.mktemp("wire"), [{"name": "alice"}])
    try:  # closed even when it fails to start: no broker outlives the module
        yield run.start()
    finally:
        run.close()


def test_malformed_requests_get_specific_errors_and_the_connection_goes_on(run):
    alice = run.puppet("alice")
    cases = {
        b"{not json\n": "bad_json",
        b"[1, 2]\n": "bad_request",
        b'{"id": 1, "op": "whoami", "args": {}, "extra": 1}\n': "bad_request",
        b'{"id": 2, "op": "no.such.op", "args": {}}\n': "unknown_op",
        b'{"id": 3, "op": "agents", "args": {"live_only": "yes"}}\n': "invalid_args",
        b'{"id": 4, "op": "agents", "args": {"colour": "red"}}\n': "invalid_args",
        b'{"id": 5, "op": "hello", "args": {}}\n': "unknown_op",
    }
    with run.operator() as client:
        for payload, code in cases.items():
            reply = client.send_raw(payload)
            assert reply["ok"] is False and reply["error"]["code"] == code, (payload, reply)
        # Control: the same connection still answers a good request.
        assert client.call("whoami")["role"] == "operator"
    assert alice.call("whoami")["agent"] == "alice"


def test_first_request_must_be_hello(run):
    with raw_socket(run) as s:
        reply = exchange(s, b'{"id": 1, "op": "whoami", "args": {}}\n')
        assert reply["error"]["code"] == "not_authenticated"
    # Control: hello first, then whoami.
    with raw_socket(run) as s:
        assert exchange(s, hello(run))["ok"]
        assert exchange(s, b'{"id": 2, "op": "whoami", "args": {}}\n')["result"]["agent"] == "operator"


def test_a_wrong_ticket_is_refused(run):
    with pytest.raises(ConclaveError) as refused:
        BlockingClient(run.socket_path(), ticket="not-a-ticket-the-broker-issued")
    assert refused.value.code is ErrorCode.AUTH_FAILED
    assert "not one this broker issued" in refused.value.message


def test_an_oversized_line_is_refused_and_others_are_still_served(run):
    with raw_socket(run) as s:
        exchange(s, hello(run))
        s.sendall(b'{"id": 2, "op": "whoami", "args": {"pad": "' + b"x" * (MAX_LINE_BYTES + 10))
        buf = b""
        while not buf.endswith(b"\n"):
            buf += s.recv(65536)
        assert json.loads(buf)["error"]["code"] == "line_too_long"
    assert run.op("whoami")["role"] == "operator"


def test_half_a_line_then_silence_blocks_nobody(run):
    hung = raw_socket(run)
    exchange(hung, hello(run))
    hung.sendall(b'{"id": 2, "op": "who')  # ... and never finishes the line
    started = time.monotonic()
    for _ in range(20):
        assert run.puppet("alice").call("whoami")["agent"] == "alice"
        assert run.op("whoami")["role"] == "operator"
    assert time.monotonic() - started < 10
    hung.close()


def test_a_silent_connection_without_hello_does_not_stop_the_broker(run):
    silent = [raw_socket(run) for _ in range(20)]
    assert run.op("whoami")["role"] == "operator"
    for s in silent:
        s.close()
    assert run.puppet("alice").call("ping") == {}


def count_rows(run) -> tuple[int, int]:
    from store.database import connect

    conn = connect(run.state / "conclave.db", readonly=True)
    try:
        return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("events", "principals"))
    finally:
        conn.close()


def test_bad_requests_write_nothing_to_the_database(run):
    before = count_rows(run)
    with run.operator() as client:
        for payload in (b"{bad\n", b'{"id": 1, "op": "spawn", "args": {"name": "x", "command": ["true"]}}\n', b'{"id": 2, "op": "nope"}\n'):
            assert client.send_raw(payload)["ok"] is False
    assert count_rows(run) == before
    # Control: a refusal that must be logged does write exactly one event.
    assert run.puppet("alice").raw('{"id": 3, "op": "whoami", "args": {"author": "bob"}}\n')["ok"] is False
    assert count_rows(run) == (before[0] + 1, before[1])


def test_a_client_that_pipelines_without_reading_starves_nobody_and_loses_nothing(run):
    """Replies back up in the socket (the broker falls back to waiting for room);
    meanwhile other clients are served, and every reply arrives once, in order."""
    n = 20_000
    flood = raw_socket(run)
    flood.settimeout(60)
    exchange(flood, hello(run, 0))
    requests = b"".join(b'{"id": %d, "op": "ping", "args": {}}\n' % i for i in range(1, n + 1))
    sender = threading.Thread(target=flood.sendall, args=(requests,))
    sender.start()
    time.sleep(0.5)  # let the unread replies fill the socket
    started = time.monotonic()
    for _ in range(20):
        assert run.op("whoami")["role"] == "operator"
        assert run.puppet("alice").call("ping") == {}
    assert time.monotonic() - started < 10
    replies = b""
    while replies.count(b"\n") < n:
        chunk = flood.recv(1 << 20)
        assert chunk, "the broker closed the pipelining connection"
        replies += chunk
    sender.join(timeout=30)
    decoded = [json.loads(line) for line in replies.splitlines()]
    assert [r["id"] for r in decoded] == list(range(1, n + 1))
    assert all(r["ok"] for r in decoded)
    flood.close()


def test_the_fast_path_builds_exactly_what_the_converter_builds_and_nothing_else():
    """Every op's arguments: random requests of right and wrong shapes through both ways."""
    import math
    import random

    import attrs as attrs_mod

    from broker import wire
    from broker import composition

    pool = [
        "a.txt", "", "agent", "connection", "x" * 3, 0, 1, -5, 2**40, 0.5, math.inf, math.nan, True, False, None,
        [], ["a", "b"], ["a", 1], [1, 2], [True], {}, {"k": "v"}, ["a", None],
        # what the wire refuses inside a value: unfit text, integers past 64 bits, numbers past a float
        "a\x00b", "\x1b[2J", "x\ud800", "\udfff", "tab\tand\nnewline", "\x85", ["ok", "b\x00"], ["\ud800"],
        2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**70, 10**400, [1, 2**64], -math.inf, 1e308,
    ]  # fmt: skip
    rng = random.Random(20261129)
    classes = {spec.args for feature in composition.features() for spec in feature.ops.ops.values()}
    fast_taken = 0
    for cls in sorted(classes, key=lambda c: c.__name__):
        names = [f.name for f in attrs_mod.fields(cls)]
        for _ in range(300):
            args = {n: rng.choice(pool) for n in names if rng.random() < 0.7}
            if rng.random() < 0.1:
                args["unexpected"] = rng.choice(pool)
            fast = wire._FAST.get(cls) or wire._fast_structure(cls)
            quick = fast(dict(args)) if fast is not None else None
            try:
                slow = wire.converter.structure(dict(args), cls)
            except Exception:
                assert quick is None, (cls.__name__, args)
                continue
            if quick is not None:
                fast_taken += 1
                same = attrs_mod.asdict(quick) == attrs_mod.asdict(slow) or repr(quick) == repr(slow)  # NaN != NaN
                assert same and type(quick) is type(slow), (cls.__name__, args, quick, slow)
    assert fast_taken > 200  # the fast path was really compared, not skipped
    # And on the hottest requests it is the one taken.
    from locks.ops import AcquireArgs

    assert wire._fast_structure(AcquireArgs)({"resources": ["a.txt"]}) == AcquireArgs(resources=["a.txt"])


def test_hostile_numbers_nesting_and_text_are_refused_by_name_never_internal(run):
    """Attack: inputs that used to reach the store or the decoder's limits and
    came back `internal`.  Each now gets bad_json (the line is not JSON we take)
    or invalid_args (a JSON value an argument cannot be), and the same connection
    goes on serving; the broker is unharmed."""
    deep = b'{"id": 1, "op": "ping", "args": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}\n"
    cases = [
        (deep, "bad_json", "nested too deeply"),
        (b'{"id": 2, "op": "memory.show", "args": {"id": ' + b"9" * 5000 + b"}}\n", "bad_json", "4300 digits"),
        (b'{"id": 3, "op": "memory.show", "args": {"id": %d}}\n' % 2**63, "invalid_args", "args.id"),
        (b'{"id": 4, "op": "memory.show", "args": {"id": %d}}\n' % -(2**63 + 1), "invalid_args", "args.id"),
        (b'{"id": 5, "op": "msg.ack", "args": {"ids": [1, %d]}}\n' % 2**70, "invalid_args", "args.ids[1]"),
        (b'{"id": 6, "op": "memory.recall", "args": {"query": "x", "limit": %d}}\n' % 2**64, "invalid_args", "args.limit"),
        (b'{"id": 7, "op": "msg.inbox", "args": {"wait": NaN}}\n', "bad_json", "NaN"),
        (b'{"id": 8, "op": "msg.inbox", "args": {"wait": Infinity}}\n', "bad_json", "Infinity"),
        (b'{"id": 9, "op": "msg.inbox", "args": {"wait": -Infinity}}\n', "bad_json", "Infinity"),
        (b'{"id": 10, "op": "msg.inbox", "args": {"wait": 1e400}}\n', "invalid_args", "finite"),
        (b'{"id": 11, "op": "msg.inbox", "args": {"wait": %d}}\n' % 10**400, "invalid_args", "too large"),
        (b'{"id": 12, "op": "memory.recall", "args": {"query": "a\\ud800"}}\n', "invalid_args", "U+D800"),
        (b'{"id": "r\\udc00", "op": "ping", "args": {}}\n', "bad_request", "request id"),
        (b'{"id": 13, "op": "ping", "args": {"\\ud800\\u001b": 1}}\n', "invalid_args", "unknown field"),
        (b'{"id": 14, "op": "ping", "args": {}}\xff\n', "bad_json", "not valid JSON"),
    ]
    with run.operator() as client:
        for payload, code, words in cases:
            reply = client.send_raw(payload)
            assert reply["ok"] is False and reply["error"]["code"] == code, (payload[:80], reply)
            assert words in reply["error"]["message"], (payload[:80], reply)
            # The reply is strict JSON any client can decode and print: no lone surrogate, no raw control.
            json.dumps(reply, ensure_ascii=False).encode("utf-8")
            assert client.call("ping") == {}, payload[:80]
        # Controls: the edges of the ranges are accepted (and then not found, or served).
        for claim_id in (2**63 - 1, -(2**63)):
            with pytest.raises(ConclaveError) as missing:
                client.call("memory.show", {"id": claim_id})
            assert missing.value.code is ErrorCode.NOT_FOUND
        assert client.send_raw(b'{"id": "r\\ud83d\\ude80", "op": "ping", "args": {}}\n') == {"id": "r\U0001f680", "ok": True, "result": {}}
        assert client.send_raw(b'{"id": %d, "op": "ping", "args": {}}\n' % (2**63 - 1))["ok"] is True
    assert run.puppet("alice").call("msg.inbox", wait=0.0) == []
    assert run.puppet("alice").call("ping") == {}


def test_a_request_too_large_is_refused_by_the_client_in_words_and_the_connection_goes_on(run):
    with run.operator() as client:
        with pytest.raises(ConclaveError) as refused:
            client.call("whoami", {"pad": "x" * (MAX_LINE_BYTES + 1)})
        assert refused.value.code is ErrorCode.TOO_LARGE and "at most 1,048,576" in refused.value.message
        # Nothing was sent: the same connection still answers (control).
        assert client.call("whoami")["role"] == "operator"
