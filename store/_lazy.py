"""Lazy re-exports for package ``__init__`` modules.

A package names its public API in its ``__init__`` (a reader learns it there)
without importing trio, apsw or cattrs until a name is used, so an agent's
``conclave whoami`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` on first use."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
