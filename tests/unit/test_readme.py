"""The README and the docs say only what is so: the README stays short, the two commands it promises exist,
every command it names is one the CLI has, every link resolves, and every setting a page names exists."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import typer

from ledger_deletion.cli import app
from ledger_deletion.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 260
PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_VARIABLE = re.compile(r"\bLEDGER_DELETION_[A-Z0-9_]*[A-Z0-9]\b")
PLACEHOLDERS = {"LEDGER_DELETION_X"}  # "--set LEDGER_DELETION_X=value": any setting


def _prose(path: Path) -> str:
    """A page without its fenced code blocks (sample output and commands, not links)."""
    return _FENCE.sub("", path.read_text(encoding="utf-8"))


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _subcommands(command: Any) -> dict[str, Any] | None:
    """A command group's subcommands by name; None for a plain command."""
    commands = getattr(command, "commands", None)
    return commands if isinstance(commands, dict) else None


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(path).splitlines() if line.startswith("#")}


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES


def test_the_two_commands_exist_and_ci_runs_the_test_command() -> None:
    readme = README.read_text(encoding="utf-8")
    for script in ("scripts/demo", "scripts/test"):
        assert script in readme and os.access(ROOT / script, os.X_OK)
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_every_command_the_readme_names_is_a_command_of_the_cli() -> None:
    cli = _subcommands(typer.main.get_command(app))
    assert cli is not None
    named: list[list[str]] = []
    # "ledger-deletion <command> [<subcommand>]" anywhere in the prose.
    for match in re.finditer(r"ledger-deletion ([a-z]+)(?: ([a-z]+))?", _prose(README)):
        named.append([word for word in match.groups() if word])
    # The commands table: each backquoted command, a group's subcommands separated by "|" or spaces.
    for row in _section(README.read_text(encoding="utf-8"), "Commands").splitlines():
        if not row.startswith("| `"):
            continue
        for span in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            words = span.replace("\\|", " ").replace("|", " ").split()
            named.append([w for w in words if re.fullmatch(r"[a-z]+", w)])
    assert len(named) > 10  # the table and the prose were both read

    unknown = []
    for words in named:
        command = cli.get(words[0])
        if command is None:
            unknown.append(" ".join(words))
        elif (group := _subcommands(command)) is not None:
            unknown += [f"{words[0]} {sub}" for sub in words[1:] if sub not in group]
    assert unknown == []


def test_every_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_ledger_deletion_variable_a_page_names_is_read_somewhere() -> None:
    """A setting renamed or removed leaves no page naming it: every ``LEDGER_DELETION_*`` variable is a
    setting, or one the code or a script reads itself (the dev stack's state directories, test workers)."""
    known = {env_name(name) for name in Settings.model_fields} | PLACEHOLDERS
    for info in Settings.model_fields.values():
        choices = getattr(info.validation_alias, "choices", ())
        known.update(str(choice) for choice in choices)
    code = (
        "ledger_deletion",
        "workflows",
        "activities",
        "workers",
        "reconcile",
        "devstack",
        "tests",
        "bench",
    )
    for folder in code:
        for source in (ROOT / folder).rglob("*.py"):
            known.update(_VARIABLE.findall(source.read_text(encoding="utf-8")))
    for script in (ROOT / "scripts").iterdir():  # the shell entry points (scripts/test's worker count)
        if script.is_file():
            known.update(_VARIABLE.findall(script.read_text(encoding="utf-8")))
    unknown = {
        f"{page.relative_to(ROOT)}: {variable}"
        for page in PAGES
        for variable in _VARIABLE.findall(page.read_text(encoding="utf-8"))
        if variable not in known
    }
    assert sorted(unknown) == []
