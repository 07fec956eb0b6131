"""The CLI's version, and ``-o json|table`` on every command that prints data."""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

from ledger_deletion.cli import app

# Commands that print data (rows, a report, counts), by their path under ``ledger-deletion``.
DATA_COMMANDS = (
    ("list",),
    ("show",),
    ("inflight",),
    ("dlq", "list"),
    ("dlq", "replay"),
    ("submit",),
    ("setup",),
    ("tripwire",),
)


def test_version_is_the_installed_distributions() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"ledger-deletion {version('ledger-deletion')}\n"


def test_every_command_that_prints_data_takes_output_json_or_table() -> None:
    for path in DATA_COMMANDS:
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, path
        assert re.search(r"--output\s+-o\s+<table\|json>", shown.stdout), (path, shown.stdout)
        assert "[default: table]" in shown.stdout, path
        wrong = CliRunner().invoke(app, [*path, "-o", "xml"])
        assert wrong.exit_code == 2 and "xml" in wrong.output, path


def test_submit_reports_in_json(tmp_path: Path) -> None:
    lines = tmp_path / "requests.jsonl"
    lines.write_text('{"not": "a request"}\n')
    result = CliRunner().invoke(app, ["submit", "--jsonl", str(lines), "--dry-run", "-o", "json"])
    assert result.exit_code == 1  # a bad line
    assert json.loads(result.stdout.splitlines()[-1]) == {"valid": 0, "rejected": 1}


def test_the_json_flag_of_before_is_kept_hidden() -> None:
    shown = CliRunner().invoke(app, ["list", "--help"], env={"COLUMNS": "200"})
    assert "--json" not in shown.stdout
    refused = CliRunner().invoke(app, ["list", "--json", "-o", "nope"])
    assert refused.exit_code == 2  # --json is still an option: only -o's value is wrong
