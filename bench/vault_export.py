"""``memory vault export`` at 10k and 100k claims through a real broker, beside ``memory export`` (JSON lines).

The cached corpus (``memory_load``) is copied into a fresh run with meaning
off.  Timed end to end from the operator's side of the socket:

* the baseline: the existing ``memory.export``, every page (each claim's whole
  biography as JSON), in the same run;
* the first vault export into a new folder, a second over it (the
  replace-our-own path: render, write a sibling, swap, remove the old), and
  a check that the two trees are byte-identical;
* the import dry run of the unedited vault (read it, render fresh, diff).

Figures are printed as ratios to the baseline.  The issue's target: the
export at 100k claims in at most 30 s.

    python bench/vault_export.py --sizes 10000 100000 --workdir /tmp/conclave-bench
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_load import fresh_run, size_args  # noqa: E402

from broker.client import BlockingClient  # noqa: E402


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def measure(size: int, workdir: Path) -> dict[str, object]:
    run = fresh_run(workdir, size, "vault", '\n[memory]\nembedder = "none"\ngroom_after_seconds = 1000000000\n')
    root = run.root
    out = root / "vault"
    try:
        run.start(timeout=180)
        with BlockingClient.for_operator(run.socket_path(), operator_key=run.operator_key(), timeout=None) as client:
            t0 = time.perf_counter()
            after, exported = 0, 0
            while True:
                page = client.call("memory.export", {"after": after})
                exported += len(page["claims"])
                if page["next"] is None:
                    break
                after = page["next"]
            baseline = time.perf_counter() - t0
            t0 = time.perf_counter()
            first = client.call("memory.vault_export", {"out": str(out)})
            first_s = time.perf_counter() - t0
            digest = tree_digest(out)
            t0 = time.perf_counter()
            second = client.call("memory.vault_export", {"out": str(out)})
            second_s = time.perf_counter() - t0
            identical = tree_digest(out) == digest and first["snapshot"] == second["snapshot"]
            t0 = time.perf_counter()
            plan = client.call("memory.vault_import", {"dir": str(out)})
            import_s = time.perf_counter() - t0
    finally:
        run.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "claims": size,
        "live": first["claims"],
        "files": first["files"],
        "jsonl_export_seconds": baseline,
        "jsonl_claims": exported,
        "vault_export_seconds": first_s,
        "vault_reexport_seconds": second_s,
        "import_dry_run_seconds": import_s,
        "identical": identical,
        "dry_run_changes": len(plan["edits"]) + len(plan["retire"]) + len(plan["new"]),
    }


def main() -> None:
    args = size_args(__doc__.splitlines()[0])
    rows = []
    print(f"{'claims':>8} {'live':>8} {'jsonl export':>13} {'vault export':>13} {'ratio':>6} {'re-export':>10} {'ratio':>6} {'import dry run':>15} {'ratio':>6}  identical")
    for size in args.sizes:
        r = measure(size, args.workdir)
        rows.append(r)
        base = r["jsonl_export_seconds"]
        print(
            f"{size:>8,} {r['live']:>8,} {base:>12.2f}s {r['vault_export_seconds']:>12.2f}s {r['vault_export_seconds'] / base:>5.2f}x "
            f"{r['vault_reexport_seconds']:>9.2f}s {r['vault_reexport_seconds'] / base:>5.2f}x {r['import_dry_run_seconds']:>14.2f}s "
            f"{r['import_dry_run_seconds'] / base:>5.2f}x  {r['identical']} ({r['dry_run_changes']} changes)",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
