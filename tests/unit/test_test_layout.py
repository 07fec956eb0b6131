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


# Defined once, in tests/fixtures.py; a tier overrides one only where it differs, and says so here.
SHARED_FIXTURES = {
    "stack",
    "settings",
    "zk",
    "s3",
    "new_ledger_id",
    "cluster",
    "make_cluster",
    "cluster_store",
}
OVERRIDES = {
    ("tests/workflow/conftest.py", "stack"),  # fails when asked: the tier runs without the embedded stack
    ("tests/faults/conftest.py", "cluster_store"),  # the fault tier's clusters write to its private stack
    # Not a simulated cluster under the same name: a reconcile module's chroot and bucket, a watcher snapshot.
    ("tests/reconcile/test_reconcile_job.py", "cluster"),
    ("tests/reconcile/test_reconcile_scan.py", "cluster"),
    ("tests/reconcile/test_spark_standalone.py", "cluster"),
    ("tests/watch/test_resync.py", "cluster"),
}


def _fixture_names(tree: ast.Module) -> set[str]:
    """Names of the functions decorated with ``pytest.fixture`` (bare or called)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.add(node.name)
    return names


def test_shared_fixtures_are_defined_once() -> None:
    again = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for tree in TEST_TREES
        for path in ROOT.joinpath(tree).rglob("*.py")
        if path != ROOT / "tests" / "fixtures.py"
        for name in _fixture_names(ast.parse(path.read_text(encoding="utf-8"))) & SHARED_FIXTURES
        if (str(path.relative_to(ROOT)), name) not in OVERRIDES
    )
    assert not again, f"use (or override in OVERRIDES, with the reason) tests/fixtures.py's: {again}"
