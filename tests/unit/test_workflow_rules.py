"""The workflow's pure modules: deterministic, so free of I/O imports, and the rule the workflow applies to
every re-verification."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from ledger_deletion.contracts import Outcome, Verdict, VerifyBkMetadataResult
from workflows.rules import VERDICT_OUTCOME, Finished, finish_unless_match

ROOT = Path(__file__).resolve().parents[2]
# What a pure module of the workflow may import: the standard library, the contracts it decides on, and
# Temporal's plain data types (no client, no worker).
ALLOWED = {"ledger_deletion.contracts", "ledger_deletion.request", "ledger_deletion.errors"}
ALLOWED_TEMPORAL = {"temporalio.common", "temporalio.exceptions"}


@pytest.mark.parametrize("module", ["rules", "failures"])
def test_a_pure_workflow_module_imports_no_io(module: str) -> None:
    tree = ast.parse((ROOT / "workflows" / f"{module}.py").read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    foreign = {
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names and name not in ALLOWED | ALLOWED_TEMPORAL
    }
    assert foreign == set()


def test_a_matching_verification_goes_on() -> None:
    verified = VerifyBkMetadataResult(Verdict.MATCH, znode_version=3)
    assert finish_unless_match(verified) is verified


@pytest.mark.parametrize("verdict", sorted(VERDICT_OUTCOME, key=str))
def test_any_other_verdict_finishes_the_decision_with_its_outcome(verdict: Verdict) -> None:
    with pytest.raises(Finished) as finished:
        finish_unless_match(VerifyBkMetadataResult(verdict, reason="why"))
    assert (finished.value.outcome, finished.value.reason) == (VERDICT_OUTCOME[verdict], "why")
    assert finished.value.outcome is not Outcome.DELETED


def test_every_verdict_but_a_match_has_an_outcome() -> None:
    assert set(VERDICT_OUTCOME) == set(Verdict) - {Verdict.MATCH}
