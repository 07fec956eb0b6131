"""Options every operator command shares (``-o table|json``), in a module of their own so that the command
modules (``ops/cli.py``, ``ops/audit.py``, the top-level CLI) import them without importing each other."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Output(StrEnum):
    table = "table"
    json = "json"


OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (for people) or json (for scripts).")
]
# The flag from before -o existed, kept for the scripts that use it.
JsonOption = Annotated[bool, typer.Option("--json", hidden=True, help="The same as -o json.")]
