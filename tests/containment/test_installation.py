"""conclave's own installation is read-only in every box, even inside the work tree.

The very common setup -- ``python -m venv .venv && pip install conclave`` in the
repository -- puts the interpreter conclave runs from, its site-packages and
(for an editable install) its source inside the tree every agent writes.  A
``.pth`` file there runs at every interpreter start, a module shadowing a
dependency earlier on ``sys.path`` at every import of it, and an edit of
conclave's own code at the person's next ``conclave`` command.  A strict box binds each of them read-only over
itself; a landlock box leaves them out of its write grant (write is granted on
their siblings instead).  The control: an unboxed agent's plant runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import trio

from agents.harness import Run, make_repo, source_venv
from broker.entry import conclave_argv
from tests.containment.test_grants import agents_at_every_level

pytestmark = pytest.mark.uid_independent("a boxed agent writing into conclave's installation: Landlock stops it whoever owns the files")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("store", "broker", "memory", "locks", "agents", "scenarios")


@pytest.fixture(scope="module")
def venv_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A broker run from a virtual environment inside the work tree, with conclave's source vendored there too."""
    root = tmp_path_factory.mktemp("installation")
    repo = make_repo(root / "run")
    source = repo / "vendor" / "conclave"
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    # repo/venv, its site-packages naming the vendored source first, then where conclave's dependencies are.
    python = source_venv(repo, source, packages=Path(trio.__file__).resolve().parents[1])
    # The broker and its agents run conclave from the tree.
    run = Run(root / "run", agents_at_every_level(), repo=repo, python=str(python))
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    try:
        run.start()
        # The broker really runs from the tree: its agents see conclave there.
        assert run.op("whoami")["role"] == "operator"
        yield {"run": run, "python": python, "site": site, "source": source, "markers": root / "markers"}
    finally:
        run.close()


def persons_next_conclave(python: Path) -> subprocess.CompletedProcess[str]:
    """What the person runs next: conclave, from the environment in the tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return subprocess.run(conclave_argv("--version", python=str(python)), capture_output=True, text=True, env=env, timeout=60)


def plant(venv: dict[str, Any], agent: str, targets: list[list[str]] | None = None) -> list[str]:
    """``agent`` writes ``targets``; by default it plants, from its box, three things that would run as the person at their next
    ``conclave``: a ``.pth`` in site-packages, a ``typer.py`` shadowing a dependency, and a line
    appended to conclave's own ``broker/__init__.py``.  Returns what each attempt got."""
    run = venv["run"]
    marker = venv["markers"] / agent
    code = lambda tag: f"open({str(marker)!r}, 'a').write({tag + chr(10)!r})"  # noqa: E731
    script = (
        "import json, sys\n"
        "out = []\n"
        "for path, text in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write(text)\n"
        "        out.append('ok')\n"
        "    except OSError as exc:\n"
        "        out.append(type(exc).__name__ + ':' + str(exc.errno))\n"
        "print(json.dumps(out))\n"
    )
    targets = targets or [
        [str(venv["site"] / f"zz-{agent}.pth"), f"import os; {code('pth')}\n"],
        # A module of the same name as a dependency, earlier on sys.path: conclave imports it.
        [str(venv["source"] / "typer.py"), f"{code('shadow')}\n"],
        [str(venv["source"] / "broker" / "__init__.py"), f"\n{code('conclave')}\n"],  # conclave's own code, edited
    ]
    import json

    out = run.puppet(agent).sh(str(venv["python"]), "-I", "-c", script, json.dumps(targets))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_boxed_agent_cannot_plant_code_in_conclaves_installation(venv_run: dict[str, Any]) -> None:
    venv_run["markers"].mkdir(exist_ok=True)
    for agent in ("alice", "dave"):
        got = plant(venv_run, agent)
        assert not any(g == "ok" for g in got), (agent, got)
    assert persons_next_conclave(venv_run["python"]).returncode == 0
    assert not list(venv_run["markers"].iterdir()), "code a boxed agent planted ran as the person"
    # The rest of the tree is the agents' to write (the installation is a hole, not the whole tree).
    for agent in ("alice", "dave"):
        assert plant(venv_run, agent, [[str(venv_run["run"].repo / "README.md"), "edited\n"]]) == ["ok"], agent
    # Control: unboxed, every plant lands and runs at the person's next conclave command.
    assert plant(venv_run, "carol") == ["ok", "ok", "ok"]
    out = persons_next_conclave(venv_run["python"])
    ran = (venv_run["markers"] / "carol").read_text().splitlines() if (venv_run["markers"] / "carol").exists() else []
    assert set(ran) == {"pth", "shadow", "conclave"}, (ran, out.stderr)
