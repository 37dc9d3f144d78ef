"""Prove each scenario guards something: switch its defence off and watch it fail.

``scenarios/_defences.toml`` pairs a scenario with a one-line change to the
source that disables the defence the scenario exercises.  For each pair this
copies the working tree to a scratch directory, applies the change there (the
real tree is never touched), runs the scenario against the weakened copy, and
expects it to **fail**; it also runs the scenario against the copy before the
change and expects it to pass.  The copy before any change is the same for
every defence, so the scenarios' runs with their defences happen once, together,
on one unpatched copy (one batch: its brokers share a warm interpreter, see
``scenarios/zygote.py``); each defence then gets a copy of its own to patch.

    python -m scenarios.defences [--only NAME] [--json]

Exit status 0 only when every scenario passed with its defence and failed
without it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents.harness import source_venv

ROOT = Path(__file__).resolve().parents[1]


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_scenarios(tree: Path, python: Path, scenarios: list[str], jobs: int = 1) -> dict[str, str]:
    """Each scenario's verdict (``passed``, or ``failed at ...``) on ``tree``, run by ``python``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    # The copy's own interpreter: everything the broker starts (-I) imports the patched tree too.
    out = subprocess.run(
        [str(python), "-I", "-m", "broker.cli", "scenario", "run", *(str(tree / "scenarios" / s) for s in scenarios), "--json", "-j", str(jobs)],
        capture_output=True, text=True, cwd=tree, env=env, timeout=600 * len(scenarios),
    )
    try:
        outcomes = json.loads(out.stdout)
        assert len(outcomes) == len(scenarios)
    except (json.JSONDecodeError, ValueError, AssertionError):
        return dict.fromkeys(scenarios, f"error: {out.stderr.strip()[-300:]}")
    return {s: o["verdict"] + (f" at {o['detail']}" if o.get("detail") else "") for s, o in zip(scenarios, outcomes)}


def run_scenario(tree: Path, python: Path, scenario: str) -> str:
    return run_scenarios(tree, python, [scenario])[scenario]


def with_defences(scenarios: list[str], jobs: int) -> dict[str, str]:
    """The scenarios' verdicts on one unpatched copy of the tree (what every defence's copy is before its change)."""
    with tempfile.TemporaryDirectory(prefix="cvd-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        return run_scenarios(tree, source_venv(Path(tmp), tree), scenarios, jobs)


def check(defence: dict[str, Any], with_defence: str) -> dict[str, Any]:
    """Switch ``defence`` off in a copy of its own and run its scenario there; ``with_defence`` is the verdict before."""
    with tempfile.TemporaryDirectory(prefix="cvd-") as tmp:
        tree = Path(tmp) / "tree"
        copy_tree(tree)
        try:
            switch_off_in(defence, tree)
        except PatchError as exc:
            return {**defence, "with": with_defence, "without": str(exc), "ok": False}
        without = run_scenario(tree, source_venv(Path(tmp), tree), defence["scenario"])
    ok = with_defence == "passed" and without.startswith("failed")
    return {**defence, "with": with_defence, "without": without, "ok": ok}


class PatchError(ValueError):
    """A defence's patch no longer matches its file (the code moved on; update ``_defences.toml``)."""


def files_of(defence: dict[str, Any]) -> list[str]:
    """The file each ``find`` applies to: ``file`` is one for all, or a list beside ``find`` (a defence
    held in two places -- the launcher and the supervisor -- is switched off in both)."""
    finds = _as_list(defence["find"])
    files = _as_list(defence["file"])
    return files * len(finds) if len(files) == 1 else files


def switch_off(defence: dict[str, Any], text: str, file: str | None = None) -> str:
    """``text`` (the defence's ``file``, or one of its files) with the defence taken out: each ``find``
    for that file must match exactly once."""
    changes = zip(files_of(defence), _as_list(defence["find"]), _as_list(defence["replace"]), strict=True)
    for name, find, replace in changes:
        if file is not None and name != file:
            continue
        count = text.count(find)
        if count != 1:
            raise PatchError(f"patch does not apply ({count} matches of {find!r})")
        text = text.replace(find, replace)
    return text


def switch_off_in(defence: dict[str, Any], tree: Path) -> None:
    """Take the defence out of every file it names under ``tree``."""
    for name in dict.fromkeys(files_of(defence)):
        target = tree / name
        target.write_text(switch_off(defence, target.read_text(), name))


def catalogue() -> list[dict[str, Any]]:
    """Every defence in ``scenarios/_defences.toml``."""
    return tomllib.loads((ROOT / "scenarios" / "_defences.toml").read_text())["defence"]


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.defences", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only the named defence(s)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    defences = catalogue()
    if args.only:
        defences = [d for d in defences if d["name"] in args.only]
    before = with_defences(sorted({d["scenario"] for d in defences}), args.jobs)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda d: check(d, before[d["scenario"]]), defences))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            mark = "ok  " if r["ok"] else "FAIL"
            print(f"{mark} {r['name']:<42} {r['scenario']:<48} with: {r['with']:<8} without: {r['without']}")
        print(f"{sum(r['ok'] for r in results)} of {len(results)} defences proven (scenario passes with it, fails without)")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
