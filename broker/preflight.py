"""Preflight: before the first agent starts, can every preset agent work at all?

For each preset agent ``conclave run`` checks, all at once and within
:data:`DEADLINE` seconds in all (``conclave team check --online`` runs the
same checks and starts nothing):

* its binary runs, and its version is one the project tested -- outside
  that range a **warning** naming both;
* the credentials it needs are in the environment it will get (the
  broker's, plus the team file's ``env`` for it), saying which variables
  were looked for and where;
* its model endpoint answers: the base URL the binary will use, from the
  environment or the binary's default.  Any HTTP answer counts (a 404 or a
  401 is a server that answers); a refused connection, a name that does not
  resolve, a TLS failure or silence does not.

A **problem** stops the run before anything starts (exit 2), one line per
problem naming the agent, the variable or the URL, and the fix.  What each
preset needs is the preset's to say (:meth:`broker.spec.Preset.probe`,
``agents.preflight``); the same binary or URL shared by several agents is
checked once.
"""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import time
from typing import Any, Callable, Final, Iterable, Mapping, final

import attrs

from broker.spec import AgentSpec, Preset, Probe

#: Seconds every check together may take.
DEADLINE: Final = 5.0
_VERSION: Final = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@final
@attrs.frozen
class Finding:
    """One thing preflight found about one agent: a ``problem`` (the run will not start) or a ``warning``."""

    agent: str
    level: str
    check: str  #: "binary", "version", "credentials" or "endpoint"
    text: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.agent}: {self.text}" + (f"; fix: {self.fix}" if self.fix else "")

    def as_dict(self) -> dict[str, str]:
        return attrs.asdict(self)


@final
@attrs.frozen
class Report:
    findings: tuple[Finding, ...]
    #: What was checked, per agent: the binary, its version, the variable found, the endpoint.
    checked: dict[str, dict[str, Any]]
    seconds: float

    @property
    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "problem")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "warning")

    def as_dict(self) -> dict[str, Any]:
        return {"ok": not self.problems, "seconds": round(self.seconds, 3), "problems": [f.as_dict() for f in self.problems],
                "warnings": [f.as_dict() for f in self.warnings], "agents": self.checked}  # fmt: skip


def check(
    agents: Iterable[AgentSpec], presets: Mapping[str, Preset], environment: Callable[[AgentSpec], dict[str, str]], *, deadline: float = DEADLINE
) -> Report:
    """Probe every preset agent in parallel; at most ``deadline`` seconds in all."""
    started = time.monotonic()
    probes: dict[str, tuple[Probe, dict[str, str]]] = {}
    for spec in agents:
        preset = presets.get(spec.preset or "")
        if preset is None:
            continue
        environ = environment(spec)
        found = preset.probe(spec, environ)
        if found is not None:
            probes[spec.name] = (found, environ)
    if not probes:
        return Report((), {}, time.monotonic() - started)
    versions = {p.version_argv for p, _ in probes.values() if p.version_argv}
    endpoints = {(p.endpoint, _proxies(env)) for p, env in probes.values() if p.endpoint}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(versions) + len(endpoints)), thread_name_prefix="preflight")
    timeout = max(0.5, deadline - 0.3)
    version_jobs = {argv: pool.submit(_version, argv, timeout) for argv in versions}
    endpoint_jobs = {key: pool.submit(_answers, key[0], dict(key[1]), timeout) for key in endpoints}
    concurrent.futures.wait([*version_jobs.values(), *endpoint_jobs.values()], timeout=max(0.1, deadline - (time.monotonic() - started)))
    pool.shutdown(wait=False, cancel_futures=True)
    findings: list[Finding] = []
    checked: dict[str, dict[str, Any]] = {}
    for name, (p, environ) in probes.items():
        seen: dict[str, Any] = {"binary": p.binary}
        checked[name] = seen
        if p.version_argv:
            findings += _judge_version(name, p, version_jobs[p.version_argv], seen, deadline)
        findings += _judge_credentials(name, p, environ, seen)
        if p.endpoint:
            findings += _judge_endpoint(name, p, endpoint_jobs[(p.endpoint, _proxies(environ))], seen, deadline)
        elif p.endpoint_from:
            seen["endpoint"] = p.endpoint_from
    return Report(tuple(findings), checked, time.monotonic() - started)


# -- the checks (each in a thread of its own) ---------------------------------------------


def _version(argv: tuple[str, ...], timeout: float) -> tuple[str | None, str]:
    """(the version it printed, or None; what it printed or why it did not run)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None, "not found"
    except PermissionError:
        return None, "not executable"
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(argv)}` did not answer within {timeout:.0f} s"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    said = (done.stdout or done.stderr).strip().splitlines()
    first = said[0] if said else ""
    m = _VERSION.search(first)
    return (m.group(0) if m else None), first[:200] or f"exit {done.returncode}, nothing printed"


def _answers(url: str, proxies: dict[str, str], timeout: float) -> str | None:
    """None when ``url`` answers over HTTP (any status); else why not."""
    # Imported here: urllib.request (http.client, email) costs every broker's start, and only an online check asks.
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # a redirect is an answer; never follow it anywhere

    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies), NoRedirect())
    request = urllib.request.Request(url, method="GET", headers={"User-Agent": "conclave-preflight"})
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(1)
        return None
    except urllib.error.HTTPError:
        return None  # a status is an answer: the server is there
    except urllib.error.URLError as exc:
        reason = exc.reason
        return str(getattr(reason, "strerror", None) or reason)
    except (TimeoutError, OSError) as exc:
        return f"no answer within {timeout:.0f} s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
    except ValueError as exc:  # not a URL at all
        return str(exc)


def _proxies(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The proxies the agent's own environment names (the binary would go through them too)."""
    out = {}
    for name, value in environ.items():
        lower = name.lower()
        if lower.endswith("_proxy") and value:
            out[lower[: -len("_proxy")]] = value
    return tuple(sorted(out.items()))


# -- judging what came back --------------------------------------------------------------


def _judge_version(name: str, p: Probe, job: concurrent.futures.Future[tuple[str | None, str]], seen: dict[str, Any], deadline: float) -> list[Finding]:
    if not job.done():
        return [Finding(name, "problem", "binary", f"{p.binary} --version did not answer within {deadline:g} s", "check that the binary runs: " + " ".join(p.version_argv))]
    version, said = job.result()
    seen["version"] = version
    if version is None and said in ("not found", "not executable"):
        return [Finding(name, "problem", "binary", f"{p.binary} is {said}", f'install it, or point at it with command = ["/path/to/{p.binary.rsplit("/", 1)[-1]}"]')]
    if version is None:
        return [Finding(name, "warning", "version", f"could not tell the version of {p.binary} ({said})")]
    if p.tested is None:
        return [Finding(name, "warning", "version", f"{p.binary} {version}: conclave has not been tested with this binary")]
    low, below = p.tested
    if not _number(low) <= _number(version) < _number(below):
        return [Finding(
            name, "warning", "version",
            f"{p.binary} is version {version}, outside the versions conclave was tested with ({low} up to, not including, {below}); "
            "it may work, but the flags conclave passes (docs/AGENTS.md) were checked only there",
        )]  # fmt: skip
    return []


def _judge_credentials(name: str, p: Probe, environ: Mapping[str, str], seen: dict[str, Any]) -> list[Finding]:
    if not p.credentials:
        return []
    for alternative in p.credentials:
        if all(environ.get(var, "").strip() for var in alternative):
            seen["credentials"] = " + ".join(alternative)
            return []
    wanted = " or ".join(" + ".join(a) for a in p.credentials)
    return [Finding(
        name, "problem", "credentials",
        f"{wanted} is not set (looked in the environment of `conclave run` and in {name}'s env in the team file)",
        p.credentials_fix,
    )]  # fmt: skip


def _judge_endpoint(name: str, p: Probe, job: concurrent.futures.Future[str | None], seen: dict[str, Any], deadline: float) -> list[Finding]:
    seen["endpoint"] = f"{p.endpoint} ({p.endpoint_from})"
    why = job.result() if job.done() else f"no answer within {deadline:g} s"
    if why is None:
        return []
    variable = p.endpoint_from if p.endpoint_from.isupper() else None
    fix = (f"check the network and {variable}, or unset it for the default" if variable
           else "check the network (and any proxy), or point the agent at the endpoint it should use")  # fmt: skip
    return [Finding(name, "problem", "endpoint", f"the model endpoint {p.endpoint} ({p.endpoint_from}) does not answer: {why}", fix)]


def _number(version: str) -> tuple[int, ...]:
    m = _VERSION.search(version)
    return tuple(int(x) for x in m.groups()) if m else (0,)
