"""Foundation benchmarks: spawn+authenticate, op round trip vs a bare echo, memory, CLI start.

Run: ``.venv/bin/python bench/broker_bench.py`` (about a minute on 2 cores).
Prints one table; every figure that has a baseline is shown beside it, as a
ratio, measured in the same run on the same machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.client import BlockingClient  # noqa: E402
from agents.harness import Run  # noqa: E402
from bench.spawn_bench import box_overhead, pct  # noqa: E402

ROUND_TRIPS = 5000


ECHO_SERVER = textwrap.dedent(
    """
    import sys, trio

    async def handle(stream):
        buf = b""
        while True:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
            while b"\\n" in buf:
                line, buf = buf.split(b"\\n", 1)
                await stream.send_all(line + b"\\n")

    async def main():
        sock = trio.socket.socket(trio.socket.AF_UNIX)
        await sock.bind(sys.argv[1])
        sock.listen(16)
        await trio.serve_listeners(handle, [trio.SocketListener(sock)])

    trio.run(main)
    """
)


def echo_server(path: Path) -> subprocess.Popen[bytes]:
    """A bare trio Unix-socket echo in its own process, like the broker: the floor for any op."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(path)])
    while not path.exists():
        time.sleep(0.01)
    return proc


def time_round_trips(send_line, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        send_line()
        samples.append(time.perf_counter() - t0)
    return samples


def echo_round_trip(tmp: Path) -> list[float]:
    path = tmp / "echo.sock"
    server = echo_server(path)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    f = s.makefile("rb")

    # The same client work as BlockingClient.call: encode, send, read, decode.
    def once() -> None:
        s.sendall(json.dumps({"id": 1, "op": "whoami", "args": {}}, separators=(",", ":")).encode() + b"\n")
        json.loads(f.readline())

    for _ in range(200):
        once()
    try:
        return time_round_trips(once, ROUND_TRIPS)
    finally:
        s.close()
        server.kill()
        server.wait()


AGENT = textwrap.dedent(
    """
    import os, sys, time
    from broker.client import BlockingClient
    c = BlockingClient.for_agent()
    c.call("whoami")
    open(os.path.join(sys.argv[1], c.identity["agent"]), "w").write(repr(time.time()))
    time.sleep(120)
    """
)


def spawn_and_authenticate(tmp: Path, n: int, sandbox: str) -> dict[str, float]:
    marks = tmp / f"marks{n}-{sandbox}"
    marks.mkdir()
    script = tmp / "agent.py"
    script.write_text(AGENT)
    box = {"sandbox": sandbox, "allow_read": [str(script)], "allow_write": [str(marks)]}
    agents = [{"name": f"a{i}", "command": [sys.executable, str(script), str(marks)], **box} for i in range(n)]
    run = Run(tmp / f"run{n}-{sandbox}", agents)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + (os.pathsep + env_path if env_path else "")
    t0 = time.time()
    run.start(wait_for=[])
    try:
        run.wait_until(lambda: len(list(marks.iterdir())) == n, timeout=60, what=f"{n} agents")
        last = max(float(p.read_text()) for p in marks.iterdir())
        pid = int((run.state / "broker.pid").read_text())
        rss = _status_kb(pid, "VmHWM")
        ops = _op_round_trip(run)
    finally:
        run.close()
    return {"seconds": last - t0, "peak_rss_mb": rss / 1024, "op_samples": ops}


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _op_round_trip(run: Run) -> list[float]:
    with run.operator() as client:
        for _ in range(200):
            client.call("whoami")
        return time_round_trips(lambda: client.call("whoami"), ROUND_TRIPS)


def cli_whoami_wall(tmp: Path) -> list[float]:
    run = Run(tmp / "cli", [{"name": "alice"}])
    run.start()
    try:
        timer = textwrap.dedent(
            f"""
            import subprocess, time, json
            out = []
            for _ in range(15):
                t0 = time.perf_counter()
                subprocess.run([{str(Path(sys.executable).parent / 'conclave')!r}, "whoami", "--json"], check=True, capture_output=True)
                out.append(time.perf_counter() - t0)
            print(json.dumps(out))
            """
        )
        result = run.puppet("alice").sh(sys.executable, "-c", timer)
        return json.loads(result.stdout)[3:]
    finally:
        run.close()


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="cvb-"))
    try:
        echo = echo_round_trip(tmp)
        rows = []
        results: dict[str, object] = {}
        from broker.sandbox import machine

        strongest = machine.probe().strongest
        overhead, cpu = box_overhead(tmp)
        plain, plain_cpu = statistics.median(overhead.pop("plain")), statistics.median(cpu.pop("plain"))
        rows.append(("spawn `true`, no box (baseline) p50", f"{plain * 1000:.1f} ms", f"baseline; CPU {plain_cpu * 1000:.1f} ms"))
        for level, samples in overhead.items():
            added = statistics.median(samples) - plain
            added_cpu = statistics.median(cpu[level]) - plain_cpu
            rows.append((
                f"spawn `true` in a {level} box p50 / p90", f"{statistics.median(samples) * 1000:.1f} / {pct(samples, .9) * 1000:.1f} ms",
                f"+{added * 1000:.1f} ms (target <= +20 ms); CPU +{added_cpu * 1000:.1f} ms",
            ))  # fmt: skip
            results[f"box_added_ms_{level}"] = added * 1000
            results[f"box_added_cpu_ms_{level}"] = added_cpu * 1000
        for n, level in ((1, strongest), (8, strongest), (32, "off"), (32, strongest)):
            r = spawn_and_authenticate(tmp, n, level)
            results[f"spawn_auth_{n}_{level}"] = r["seconds"]
            rows.append((f"spawn + authenticate {n} agents ({level})", f"{r['seconds'] * 1000:.0f} ms", "target < 3000 ms at 32" if n == 32 else ""))
            if n == 32 and level == strongest:
                results["peak_rss_mb_32"] = r["peak_rss_mb"]
                ops = r["op_samples"]
        e50, o50 = statistics.median(echo), statistics.median(ops)
        rows.append(("bare trio echo round trip p50 / p99", f"{e50 * 1e6:.0f} / {pct(echo, .99) * 1e6:.0f} us", "baseline"))
        rows.append(("broker whoami round trip p50 / p99 (32 agents live)", f"{o50 * 1e6:.0f} / {pct(ops, .99) * 1e6:.0f} us", f"{o50 / e50:.2f}x echo (target <= 2x)"))
        rows.append(("broker peak RSS with 32 agents", f"{results['peak_rss_mb_32']:.1f} MB", "target < 100 MB"))
        cli = cli_whoami_wall(tmp)
        rows.append(("`conclave whoami` wall, as an agent, p50 / max", f"{statistics.median(cli) * 1000:.0f} / {max(cli) * 1000:.0f} ms", "target < 250 ms"))
        results.update({"echo_p50_us": e50 * 1e6, "whoami_p50_us": o50 * 1e6, "ratio": o50 / e50, "cli_whoami_ms": statistics.median(cli) * 1000})
        width = max(len(r[0]) for r in rows)
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"conclave foundation benchmark  (python {sys.version.split()[0]}, {os.cpu_count()} cores; load average {load} at the end)")
        for name, value, note in rows:
            print(f"  {name:<{width}}  {value:>18}  {note}")
        out = Path(__file__).resolve().parent / "results"
        out.mkdir(exist_ok=True)
        (out / "broker.json").write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
