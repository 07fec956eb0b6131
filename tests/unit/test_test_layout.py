"""The test tree's own rules: what tests share lives in support modules (one name for the role), imported
from there, never from a conftest."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_TREES = ("tests", "bench/tests")


def test_no_test_imports_from_a_conftest() -> None:
    offenders = []
    for path in [*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "conftest":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"import from a conftest (move it to a support module): {offenders}"


def test_shared_test_code_is_named_support() -> None:
    """One name for one role: a reader looking for what a tier's tests share opens its ``support`` module."""
    others = [
        str(path.relative_to(ROOT))
        for tree in TEST_TREES
        for path in ROOT.joinpath(tree).rglob("*.py")
        if "helper" in path.stem or path.stem in {"util", "utils", "common"}
    ]
    assert not others, f"name it support (or <topic>_support): {others}"
