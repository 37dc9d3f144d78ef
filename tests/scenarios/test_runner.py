"""The scenario runner: mistakes are invalid (with the line), surprises fail (with the step), and the catalogue passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from scenarios import collect, known_ops, load, run_all, run_scenario
from scenarios.format import ScenarioInvalid

ROOT = Path(__file__).resolve().parents[2]


HEADER = 'name = "t"\ntier = "T2"\ndescription = "d"\n\n[[agents]]\nname = "alice"\n'


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(HEADER + body)
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('\n[[step]]\nactor = "alice"\nop = "no.such.op"\n', ":8: step 1: unknown op 'no.such.op'"),
        ('\n[[step]]\nactor = "alice"\nop = "whoami"\nargs = { x = "${nothing.id}" }\n', "before any step binds it"),
        ('\n[[step]]\nactor = "mallory"\nop = "whoami"\n', "actor 'mallory' is not an agent"),
        ('\n[[step]]\nactor = "alice"\naction = "teleport"\n', "unknown action 'teleport'"),
        ('\n[[step]]\nactor = "alice"\nop = "whoami"\ncolour = 1\n', "unknown key(s) colour"),
        ('\n[[check]]\nclaim = "1"\ncontext = "x"\n', "exactly one of"),
        ("\n[[step]\n", "not valid TOML"),
    ],
)
def test_a_mistake_in_a_scenario_is_invalid_and_names_the_line(tmp_path, body, message):
    with pytest.raises(ScenarioInvalid) as invalid:
        load(write(tmp_path, body), known_ops())
    assert message in str(invalid.value)


def test_a_correct_scenario_loads(tmp_path):
    scenario = load(write(tmp_path, '\n[[step]]\nactor = "alice"\nop = "whoami"\nbind = "me"\n\n[[step]]\nactor = "alice"\nop = "whoami"\nexpect_result = { agent = "${me.agent}" }\n'), known_ops())
    assert [s.line for s in scenario.steps] == [8, 13]
    assert run_scenario(scenario, workdir=tmp_path).verdict == "passed"


def test_an_unexpected_outcome_fails_with_the_step_expected_and_got(tmp_path):
    # The scenario wrongly expects bob's stolen-ticket attempt to succeed.
    path = write(tmp_path, '\n[[agents]]\nname = "bob"\n\n[[step]]\nactor = "bob"\naction = "steal-ticket"\nfrom = "alice"\nop = "whoami"\n')
    outcome = run_scenario(load(path, known_ops()), workdir=tmp_path)
    assert outcome.verdict == "failed"
    assert outcome.detail.startswith("step 1 (line 11: bob steal-ticket)")
    assert outcome.expected == "success" and "auth_failed" in outcome.got


def test_cli_reports_invalid_files_as_failures_and_writes_junit(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(HEADER + '\n[[step]]\nactor = "alice"\nop = "whoami"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text(HEADER + '\n[[step]]\nactor = "alice"\nop = "nope"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    cmd = [sys.executable, "-m", "broker.cli", "scenario", "run", str(tmp_path), "--json", "--junit", str(tmp_path / "j.xml")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1
    verdicts = {Path(o["path"]).name: o["verdict"] for o in json.loads(out.stdout)}
    assert verdicts == {"bad.toml": "invalid", "good.toml": "passed"}
    junit = (tmp_path / "j.xml").read_text()
    assert 'errors="1"' in junit and 'failures="0"' in junit
    # Control: the good file alone exits 0.
    cmd[5] = str(good)
    assert subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).returncode == 0


def test_the_whole_catalogue_passes(tmp_path):
    """Every scenario file replayed, each on a broker of its own (forked from the suite's warm interpreter:
    tests/conftest.py), up to four at a time by CPU count.  `conclave scenario run` itself is test_cli_reports_invalid_files_as_failures_and_writes_junit's."""
    from agents import harness

    files = collect([ROOT / "scenarios"])
    assert len(files) >= 55
    assert harness.LAUNCH is not None
    outcomes = run_all(files, workdir=tmp_path, launch=harness.LAUNCH)
    assert [Path(o.path) for o in outcomes] == files
    failed = [attrs.asdict(o) for o in outcomes if o.verdict != "passed"]
    assert failed == [], json.dumps(failed, indent=2)


def test_every_defence_still_switches_off_cleanly_against_the_code() -> None:
    """`python -m scenarios.defences` proves each defence by patching it out; a patch that no longer
    matches its file (the code moved on) would prove nothing.  Checked here, in a fraction of a second."""
    from scenarios.defences import ROOT, PatchError, catalogue, files_of, switch_off

    defences = catalogue()
    assert len(defences) >= 40
    for defence in defences:
        assert (ROOT / "scenarios" / defence["scenario"]).is_file(), defence["name"]
        for name in dict.fromkeys(files_of(defence)):
            text = (ROOT / name).read_text()
            assert switch_off(defence, text, name) != text, defence["name"]
    # Control: a patch whose text is not in the file is refused, naming it.
    stale = {**defences[0], "find": "this line is in no file"}
    with pytest.raises(PatchError, match="0 matches of 'this line is in no file'"):
        switch_off(stale, (ROOT / stale["file"]).read_text())


RESTART = '''
[policy]
quorum = 2

[[agents]]
name = "bob"

[[step]]
actor = "alice"
op = "memory.remember"
args = { kind = "discovery", text = "The store tests fail when the disk is nearly full (zorvatq marker)." }
bind = "c"

[[step]]
actor = "bob"
op = "memory.show"
args = { id = "${c.id}" }

[[step]]
actor = "bob"
op = "memory.corroborate"
args = { id = "${c.id}" }
expect_result = { tier = "unverified", counted = true }

[[step]]
action = "broker-restart"
kill = true
%s

[[step]]
actor = "bob"
action = "kill-during"
op = "memory.remember"
args = { kind = "discovery", text = "The nightly build skips the slow suites on Fridays (bixdovq marker)." }

[[step]]
actor = "alice"
op = "whoami"

[[check]]
claim = "${c.id}"
tier = "trusted"
'''


def test_a_broker_killed_and_started_again_keeps_what_was_acknowledged_under_the_new_policy(tmp_path):
    # SIGKILL the broker after bob's acknowledged vouch, start it again with quorum 1: the vouch is still
    # there and now makes the claim trusted; bob, killed mid-call afterwards, leaves alice able to act.
    passed = run_scenario(load(write(tmp_path, RESTART % "policy = { quorum = 1 }"), known_ops()), workdir=tmp_path)
    assert passed.verdict == "passed", passed
    # The control: the same restart without the new policy leaves the claim one domain short of quorum 2.
    (tmp_path / "control").mkdir()
    control = run_scenario(load(write(tmp_path / "control", RESTART % ""), known_ops()), workdir=tmp_path)
    assert control.verdict == "failed" and "trusted" in (control.expected or ""), control
