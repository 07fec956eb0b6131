"""The test tree's own rules: helpers are imported from helper modules, never from a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_test_imports_from_a_conftest() -> None:
    offenders = []
    for path in [*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "conftest":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"import from a conftest (move the helper to a helpers module): {offenders}"
