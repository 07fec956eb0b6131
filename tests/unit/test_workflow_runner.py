"""The service runs workflows outside the SDK's sandbox (``workflow_sandbox`` turns it back on).

Without the sandbox every run shares the workflow modules' globals, so they must hold no mutable state.
The sandbox's other guard, against restricted calls, stays in the tests: the workflow tests run sandboxed and
the recorded histories replay both ways (tests/workflow).
"""

from __future__ import annotations

import types

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import workflows.failures
import workflows.ledger_deletion
import workflows.rules
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import Settings
from workers.pools import workflow_runner


def test_the_service_runs_workflows_unsandboxed_unless_asked() -> None:
    assert isinstance(workflow_runner(Settings()), UnsandboxedWorkflowRunner)
    assert isinstance(workflow_runner(Settings(workflow_sandbox=True)), SandboxedWorkflowRunner)


def test_the_sandbox_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_WORKFLOW_SANDBOX", "true")
    assert isinstance(workflow_runner(load_settings()), SandboxedWorkflowRunner)


@pytest.mark.parametrize(
    "module", [workflows.ledger_deletion, workflows.rules, workflows.failures], ids=lambda m: m.__name__
)
def test_the_workflow_modules_hold_no_mutable_state(module: types.ModuleType) -> None:
    mutable = {
        name: type(value).__name__
        for name, value in vars(module).items()
        if isinstance(value, list | dict | set | bytearray) and not name.startswith("__")
    }
    assert mutable == {}


def test_the_rules_tables_are_read_only_views() -> None:
    assert isinstance(workflows.rules.VERDICT_OUTCOME, types.MappingProxyType)
    assert isinstance(workflows.rules.WEIGHT, types.MappingProxyType)
