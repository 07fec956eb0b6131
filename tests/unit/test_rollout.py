"""``ledger_deletion.rollout`` and the rollout settings: which mode a request runs in, and where a shadow
deployment reads and runs (its own subscription, task queues and workflow ids)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from typer.testing import CliRunner

from ledger_deletion.cli import app
from ledger_deletion.contracts import Mode
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.rollout import LiveScope, parse_scope_entries, run_mode, workflow_id
from ledger_deletion.settings import Settings


def request(topic: str = "acme/orders/events") -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7)


def test_a_shadow_run_has_the_live_id_under_its_own_prefix() -> None:
    live = workflow_id(request(), Mode.LIVE)
    assert live == request().workflow_id and live.startswith("ledger-deletion/")
    assert workflow_id(request(), Mode.SHADOW) == "ledger-deletion-shadow/" + live.removeprefix(
        "ledger-deletion/"
    )


def test_a_shadow_process_runs_everything_in_shadow_without_replay() -> None:
    assert run_mode(Mode.SHADOW, LiveScope.of(["acme"], []), request()) == (Mode.SHADOW, "")


@pytest.mark.parametrize(
    ("allow", "deny", "topic", "live"),
    [
        ((), (), "acme/orders/t", True),  # no list: every tenant
        (("acme",), (), "acme/orders/t", True),  # the tenant
        (("acme/orders",), (), "acme/orders/t", True),  # the namespace
        (("acme/orders",), (), "acme/billing/t", False),  # another namespace of the tenant
        (("acme",), ("acme/billing",), "acme/billing/t", False),  # denied inside an allowed tenant
        ((), ("other",), "acme/orders/t", True),
    ],
)
def test_a_live_process_deletes_inside_its_scope_only(
    allow: tuple[str, ...], deny: tuple[str, ...], topic: str, live: bool
) -> None:
    mode, why = run_mode(Mode.LIVE, LiveScope.of(allow, deny), request(topic))
    assert (mode is Mode.LIVE) == live
    assert (why == "") == live
    if not live:
        assert "replay it once the list is widened" in why


@pytest.mark.parametrize("value", ["acme/*", "persistent://acme/orders", "acme//orders", "a/b/c/d", "ac me"])
def test_a_scope_entry_is_a_tenant_or_a_namespace(value: str) -> None:
    with pytest.raises(ValueError, match="not a tenant or a namespace"):
        parse_scope_entries(value)
    with pytest.raises(pydantic.ValidationError):
        Settings(live_allow=value)


def test_a_shadow_deployment_reads_and_runs_apart_and_shares_the_kill_switch() -> None:
    live = Settings(task_queue_prefix="ld", subscription="sub")
    shadow = live.with_overrides(mode=Mode.SHADOW)
    assert (live.ingest_subscription, shadow.ingest_subscription) == ("sub", "sub-shadow")
    assert (live.task_queue("offload"), shadow.task_queue("offload")) == ("ld-offload", "ld-shadow-offload")
    assert live.kill_switch_id == shadow.kill_switch_id == "ld-kill-switch"


def test_worker_mode_reaches_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("workers.main.main", lambda pools, settings: seen.append((pools, settings)))
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:7233")
    monkeypatch.setenv("LEDGER_DELETION_PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER", "127.0.0.1:2181")
    monkeypatch.setenv("LEDGER_DELETION_BOOKKEEPER_SHARED_WITH", "none")
    result = CliRunner().invoke(app, ["worker", "--pool", "workflow", "--mode", "shadow"])
    assert result.exit_code == 0, result.output
    ((pools, settings),) = seen
    assert pools == ["workflow"] and settings.mode is Mode.SHADOW
    assert settings.task_queue("workflow").endswith("-shadow-workflow")
