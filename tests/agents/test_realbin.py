"""The installer of the pinned real binaries fails loudly, naming why, when it cannot install."""

from __future__ import annotations

import os

import pytest

from tests.agents import realbin


def test_an_unreachable_registry_fails_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv(realbin.ENV_CACHE, str(tmp_path / "binaries"))
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")  # nothing listens on the discard port
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))  # and no tarball cached to fall back on
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    with pytest.raises(realbin.AgentBinariesError) as caught:
        realbin.ensure()
    message = str(caught.value)
    assert "the npm registry could not be reached" in message and "@anthropic-ai/claude-code@2.1.332" in message
    assert "ECONNREFUSED" in message


def test_no_npm_fails_saying_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv(realbin.ENV_CACHE, str(tmp_path / "binaries"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm here
    with pytest.raises(realbin.AgentBinariesError, match="need npm"):
        realbin.ensure()


def test_the_cache_lives_outside_the_repository(monkeypatch):
    monkeypatch.delenv(realbin.ENV_CACHE, raising=False)
    repo = os.path.realpath(os.path.join(os.path.dirname(realbin.__file__), "..", ".."))
    assert not os.path.realpath(realbin.prefix()).startswith(repo + os.sep)
