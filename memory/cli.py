"""Command-line commands of this package (filled in by its issue)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)
