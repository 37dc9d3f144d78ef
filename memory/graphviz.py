"""Turning a trust graph's DOT into SVG with Graphviz's ``dot`` program.

Graphviz is a system program, not a Python dependency: conclave does not
install it.  When it is missing the command says so and how to get it --
never an empty file or a silent fallback.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Final

INSTALL_HINT: Final = (
    "install Graphviz (Debian/Ubuntu: sudo apt-get install graphviz; Fedora: sudo dnf install graphviz; "
    "macOS: brew install graphviz), or use --format dot and render it elsewhere"
)


class GraphvizError(RuntimeError):
    """Graphviz is missing or failed; the message says which and what to do."""


def find_dot(path: str | None = None) -> str:
    """The ``dot`` executable on ``path`` (default: ``$PATH``).

    Raises:
        GraphvizError: when there is none.
    """
    found = shutil.which("dot", path=path)
    if found is None:
        raise GraphvizError(f"--format svg needs Graphviz's `dot` program, which is not on PATH; {INSTALL_HINT}")
    return found


def to_svg(dot_source: str, *, dot: str | None = None, timeout: float = 60) -> bytes:
    """Lay out ``dot_source`` and return the SVG document.

    Raises:
        GraphvizError: ``dot`` is missing, failed (its own message is quoted), or timed out.
    """
    program = dot or find_dot()
    try:
        done = subprocess.run([program, "-Tsvg"], input=dot_source.encode(), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"Graphviz's dot took more than {timeout:g} s to lay out the graph; try a smaller one (a CLAIM or --agent NAME)") from None
    except OSError as exc:
        raise GraphvizError(f"could not run Graphviz's dot ({program}): {exc}; {INSTALL_HINT}") from None
    if done.returncode != 0 or not done.stdout.lstrip().startswith((b"<?xml", b"<svg")):
        detail = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}, no SVG on stdout"
        raise GraphvizError(f"Graphviz's dot ({program}) failed: {detail}")
    return done.stdout
