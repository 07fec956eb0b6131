"""The service runs workflows outside the SDK's sandbox (``workflow_sandbox`` turns it back on).

Without the sandbox every run shares the workflow module's globals, so that module must hold no mutable state.
The sandbox's other guard, against restricted calls, stays in the tests: the workflow tests run sandboxed and
the recorded histories replay both ways (tests/workflow).
"""

from __future__ import annotations

import types

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import workflows.ledger_deletion as workflow_module
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import Settings
from workers.pools import workflow_runner


def test_the_service_runs_workflows_unsandboxed_unless_asked() -> None:
    assert isinstance(workflow_runner(Settings()), UnsandboxedWorkflowRunner)
    assert isinstance(workflow_runner(Settings(workflow_sandbox=True)), SandboxedWorkflowRunner)


def test_the_sandbox_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_WORKFLOW_SANDBOX", "true")
    assert isinstance(workflow_runner(load_settings()), SandboxedWorkflowRunner)


def test_the_workflow_module_holds_no_mutable_state() -> None:
    mutable = {
        name: type(value).__name__
        for name, value in vars(workflow_module).items()
        if isinstance(value, list | dict | set | bytearray) and not name.startswith("__")
    }
    assert mutable == {}
    # The one table the module keeps is a read-only view.
    assert isinstance(workflow_module._VERDICT_OUTCOME, types.MappingProxyType)
