"""The fetcher of the pinned real binaries: no npm needed, every tarball checked, and a loud failure
naming why when it cannot install."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
import urllib.parse
from pathlib import Path
from typing import Iterator

import pytest

from tests.agents import realbin


def test_an_unreachable_registry_fails_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv(realbin.ENV_CACHE, str(tmp_path / "binaries"))
    monkeypatch.setenv(realbin.ENV_REGISTRY, "http://127.0.0.1:9/")  # nothing listens on the discard port
    with pytest.raises(realbin.AgentBinariesError) as caught:
        realbin.ensure()
    message = str(caught.value)
    assert "the npm registry could not be reached" in message and "@anthropic-ai/claude-code-linux-" in message
    assert "Connection refused" in message and realbin.ENV_CACHE in message


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Iterator[dict[str, tuple[bytes, str]]]:
    """A stand-in npm registry on 127.0.0.1: ``served[name@version] = (tarball, integrity it publishes)``."""
    served: dict[str, tuple[bytes, str]] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = urllib.parse.unquote(self.path).lstrip("/")
            if path.endswith(".tgz"):
                body = served[path.removesuffix(".tgz")][0]
            else:
                name, version = path.rsplit("/", 1)
                if f"{name}@{version}" not in served:
                    self.send_error(404)
                    return
                integrity = served[f"{name}@{version}"][1]
                body = json.dumps({"dist": {"tarball": f"http://127.0.0.1:{port}/{name}@{version}.tgz", "integrity": integrity}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(realbin.ENV_REGISTRY, f"http://127.0.0.1:{port}")
    try:
        yield served
    finally:
        server.shutdown()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_a_tarball_that_does_not_match_its_published_hash_is_not_installed(tmp_path, registry):
    """A registry (or a proxy on the way) serving altered bytes: refused, nothing unpacked.
    Control: the same tarball with its true hash unpacks the program, executable, where bin/ expects it."""
    package = realbin.Package("@example/tool-linux-x64", "1.0.0", "vendor/bin/tool", "tool")
    good = _tarball({"vendor/bin/tool": b"#!/bin/sh\necho tool 1.0.0\n", "package.json": b"{}"})
    registry["@example/tool-linux-x64@1.0.0"] = (good, _integrity(good + b"tampered"))
    target = tmp_path / "cache" / "tool"
    with pytest.raises(realbin.AgentBinariesError, match="does not match the integrity hash"):
        realbin._fetch(package, target)
    assert not target.exists()
    registry["@example/tool-linux-x64@1.0.0"] = (good, _integrity(good))
    realbin._fetch(package, target)
    assert os.access(target / "vendor" / "bin" / "tool", os.X_OK)


def _hostile(how: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        program = tarfile.TarInfo("package/x")
        program.size = 1
        tar.addfile(program, io.BytesIO(b"x"))
        if how == "dotdot":
            info = tarfile.TarInfo("package/../../escaped")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        elif how in ("link", "absolute link"):
            link = tarfile.TarInfo("package/out")
            link.type, link.linkname = tarfile.SYMTYPE, ("../../.." if how == "link" else "/tmp")
            tar.addfile(link)
            info = tarfile.TarInfo("package/out/escaped")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        elif how == "device":
            info = tarfile.TarInfo("package/null")
            info.type = tarfile.CHRTYPE
            tar.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize("filters", [True, False], ids=["tarfile-filter", "python-before-3.11.4"])
@pytest.mark.parametrize("how", ["dotdot", "link", "absolute link", "device"])
def test_a_tarball_cannot_write_outside_its_directory(tmp_path, registry, monkeypatch, how, filters):
    """A hostile tarball -- a ../ name, a link that leads out and a name beneath it, a device node -- is
    refused, by tarfile's "data" filter or, on a Python without it (Debian 12's 3.11.2), by the same
    checks made by hand.  Control: the same package without the hostile member unpacks."""
    monkeypatch.setattr(realbin, "_HAS_FILTERS", filters and realbin._HAS_FILTERS)
    package = realbin.Package("@example/evil", "1.0.0", "x", "x")
    evil = _hostile(how)
    registry["@example/evil@1.0.0"] = (evil, _integrity(evil))
    target = tmp_path / "cache" / "deep" / "evil"
    with pytest.raises(tarfile.TarError):
        realbin._fetch(package, target)
    assert not target.exists()
    assert not (tmp_path / "cache" / "escaped").exists() and not (tmp_path / "escaped").exists()
    good = _hostile("none")
    registry["@example/evil@1.0.0"] = (good, _integrity(good))
    realbin._fetch(package, target)
    assert (target / "x").read_bytes() == b"x"


def test_the_cache_lives_outside_the_repository(monkeypatch):
    monkeypatch.delenv(realbin.ENV_CACHE, raising=False)
    repo = os.path.realpath(os.path.join(os.path.dirname(realbin.__file__), "..", ".."))
    assert not os.path.realpath(realbin.prefix()).startswith(repo + os.sep)


def test_the_platform_packages_are_the_ones_the_npm_wrappers_would_run():
    """The packages fetched are the ones `npm install @anthropic-ai/claude-code @openai/codex` picks for this
    machine (their wrappers only choose and exec them)."""
    claude, codex = realbin.packages()
    assert claude.name.startswith("@anthropic-ai/claude-code-linux-") and claude.version == realbin.CLAUDE_CODE[1]
    assert codex.name == "@openai/codex" and codex.version.startswith(realbin.CODEX[1] + "-linux-")
    assert Path(codex.program).name == "codex" and "-unknown-linux-musl" in codex.program
