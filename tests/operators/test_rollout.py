"""The rollout path on the embedded stack (docs/rollout.md): shadow mode, the kill switch, the allow-list.

Each test runs its own pools on a deletion topic and task-queue prefix of its own (so its kill switch, the
Schedule ``<prefix>-kill-switch``, pauses nobody else), with real requests from a simulated cluster in
ZooKeeper and S3, and drives them with the operator CLI as an SRE would.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from typer.testing import CliRunner

from devstack.cluster import SimulatedCluster
from ledger_deletion.cli import app
from ledger_deletion.contracts import DeletionResult, Mode, Outcome, Step
from ledger_deletion.ops.dlq import read_dead_letters
from ledger_deletion.request import LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.rollout import ALLOW_LIST_STEP, workflow_id
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.operators.support import metric_value, orphan_requests, scrape
from tests.support import eventually, running_pools, wait_for_result, wait_until_all_acked

pytestmark = pytest.mark.stack


@pytest.fixture
def own(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """A deployment of its own (topic, task queues, kill switch), and the CLI's environment pointing at it."""
    run = uuid.uuid4().hex[:8]
    own = settings.with_overrides(
        topic=f"persistent://pulsar/system/__ledger_deletion_rollout_{run}",
        task_queue_prefix=f"ld-rollout-{run}",
        kill_switch_seconds=0.5,
    )
    env = {
        "TEMPORAL_ADDRESS": own.temporal_address,
        "LEDGER_DELETION_PULSAR_URL": own.pulsar_url,
        "LEDGER_DELETION_PULSAR_ADMIN_URL": own.pulsar_admin_url,
        "LEDGER_DELETION_TOPIC": own.topic,
        "LEDGER_DELETION_TASK_QUEUE_PREFIX": own.task_queue_prefix,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield own


async def cli(*args: str) -> str:
    """Run a command in a thread (it calls asyncio.run) while this loop keeps the pools running."""
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env={"COLUMNS": "250"})
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


async def cli_json(*args: str) -> Any:
    return json.loads(await cli(*args, "-o", "json"))


def publish(settings: Settings, requests: list[PendingDeleteLedgerInfo]) -> None:
    with RequestPublisher(settings) as publisher:
        for request in requests:
            publisher.publish(request)


async def results(
    client: Client, requests: list[PendingDeleteLedgerInfo], mode: Mode
) -> dict[str, DeletionResult]:
    ids = sorted({workflow_id(r, mode) for r in requests})
    found = await asyncio.gather(*(wait_for_result(client, i) for i in ids))
    return dict(zip(ids, found, strict=True))


def still_there(cluster: SimulatedCluster, request: PendingDeleteLedgerInfo) -> bool:
    """The ledger's znode (a BookKeeper ledger) or all its offloaded objects are there."""
    if request.ledger_type is LedgerType.LEDGER:
        return cluster.ledger_exists(request.ledger_id)
    assert request.context is not None
    keys = cluster.offload_keys(request.context, request.ledger_id)
    return bool(keys) and all(cluster.object_exists(key, bucket) for bucket, key in keys)


async def test_shadow_decides_deletes_nothing_and_leaves_every_request_to_live_mode(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster
) -> None:
    tenant = f"shadow-{uuid.uuid4().hex[:6]}"
    topic, requests = orphan_requests(cluster, tenant)
    assert {r.ledger_type for r in requests} == {LedgerType.LEDGER, LedgerType.OFFLOAD_LEDGER}
    shadow = own.with_overrides(mode=Mode.SHADOW)

    garbage = b"\x00\xffnot avro " + uuid.uuid4().hex.encode()
    async with running_pools(shadow, temporal_client) as running:
        # The shadow process made the live subscription too (keep_live_subscription) before this publish.
        publish(own, requests)
        with RequestPublisher(own) as publisher:
            publisher.publish_raw(garbage)
        decided = await results(temporal_client, requests, Mode.SHADOW)
        await wait_until_all_acked(running)
    # Undecodable, but left for live mode to dead-letter: a shadow process publishes no dead letter.
    assert read_dead_letters(own) == []
    assert all(i.startswith("ledger-deletion-shadow/") for i in decided)
    assert {r.outcome for r in decided.values()} == {Outcome.WOULD_DELETE}, decided
    for result in decided.values():
        assert result.mode is Mode.SHADOW and result.would_delete_keys and result.deleted_keys == []
        if result.ledger_type == LedgerType.OFFLOAD_LEDGER.value:
            assert all(k.startswith("s3://") for k in result.would_delete_keys) and result.bytes > 0
        else:
            assert result.would_delete_keys[0].startswith(own.bk_ledgers_root + "/")
    # Nothing deleted in ZooKeeper or S3.
    assert all(still_there(cluster, r) for r in requests)

    # The CLI tells shadow runs apart, and reports what live mode would delete, by namespace, with bytes.
    namespace = topic.rsplit("/", 1)[0]

    async def reported() -> None:
        rows = (await cli_json("list", "--mode", "shadow", "--tenant", tenant))["deletions"]
        assert sorted(r["workflow_id"] for r in rows) == sorted(decided)
        assert (await cli_json("list", "--mode", "live", "--tenant", tenant))["deletions"] == []
        report = await cli_json("report", "--mode", "shadow", "--tenant", tenant)
        (entry,) = report["namespaces"]
        assert (entry["tenant"], entry["namespace"]) == (tenant, namespace)
        bk = sorted(r.ledger_id for r in requests if r.ledger_type is LedgerType.LEDGER)
        offloaded = sorted(r.ledger_id for r in requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER)
        assert entry["ledgers"] == bk and entry["offloaded_ledgers"] == offloaded
        assert entry["bytes"] == sum(r.bytes for r in decided.values()) > 0
        assert entry["outcomes"] == {"WOULD_DELETE": len(decided)}

    await eventually(reported)
    table = await cli("report", "--tenant", tenant)
    assert "would delete" in table and namespace in table

    # Switched to live: every request is still on the live subscription, and exactly these are deleted.
    async with running_pools(own, temporal_client) as running:
        deleted = await results(temporal_client, requests, Mode.LIVE)
        await wait_until_all_acked(running)
    (letter,) = read_dead_letters(own)
    assert letter.failed_step == "decode"  # the garbage, dead-lettered once, by live mode
    assert {r.outcome for r in deleted.values()} == {Outcome.DELETED}, deleted
    assert not any(still_there(cluster, r) for r in requests)
    by_ledger = {(r.ledger_type, r.ledger_id): r for r in deleted.values()}
    for result in decided.values():
        live = by_ledger[(result.ledger_type, result.ledger_id)]
        if result.ledger_type == LedgerType.OFFLOAD_LEDGER.value:
            assert sorted(live.deleted_keys) == sorted(result.would_delete_keys)
        assert live.bytes == result.bytes


async def _waiting(client: Client, requests: list[PendingDeleteLedgerInfo]) -> None:
    """Every request's live run waits on the kill switch (its live status and its search attribute)."""
    for request in requests:
        status = (await cli_json("show", request.workflow_id))[0]
        assert status["live_status"]["step"] == Step.PAUSED.value, status["live_status"]


async def test_pause_holds_every_delete_across_a_restart_and_resume_finishes_them(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster, metrics_url: str
) -> None:
    tenant = f"paused-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant)
    # Long backstop looks: what resumes the runs here is the resume command's signal.
    deployment = own.with_overrides(pause_recheck_seconds=300)
    # No deleting process runs yet, so nothing to wait for: --no-wait, which says the wait was skipped.
    paused = await cli_json("pause", "--reason", "rollout test", "--no-wait")
    assert paused["paused"] is True and paused["waited_seconds"] is None and paused["deletes_held"] is False

    async with running_pools(deployment, temporal_client) as running:
        assert running.kill_switch is not None and running.kill_switch.paused is True
        publish(own, requests)
        await eventually(lambda: _waiting(temporal_client, requests), timeout=60)
        listed = (await cli_json("list", "--step", "paused", "--running", "--tenant", tenant))["deletions"]
        assert len(listed) == len({r.workflow_id for r in requests})
        text = scrape(metrics_url)
        assert metric_value(text, "ledger_deletion_deletions_paused", pool="bookkeeper+offload") == 1
    assert all(still_there(cluster, r) for r in requests)

    # A new process reads the same switch: still paused, and the runs keep waiting.
    async with running_pools(deployment, temporal_client) as running:
        assert running.kill_switch is not None and running.kill_switch.paused is True
        await asyncio.sleep(2 * own.kill_switch_seconds)
        await _waiting(temporal_client, requests)
        assert all(still_there(cluster, r) for r in requests)

        resumed = await cli_json("resume")
        assert resumed["paused"] is False
        assert resumed["runs_signalled"] == len({r.workflow_id for r in requests})
        done = await results(temporal_client, requests, Mode.LIVE)
        await eventually(
            lambda: _metric_is(metrics_url, "ledger_deletion_deletions_paused", 0, "bookkeeper+offload")
        )
        # The messages the first process held came back to this one (Pulsar redelivers what a closed
        # consumer did not ack) and are acked here: nothing lost.
        await wait_until_all_acked(running, timeout=60)
    assert {r.outcome for r in done.values()} == {Outcome.DELETED}, done
    assert not any(still_there(cluster, r) for r in requests)
    for wid, result in done.items():
        assert result.failed_step == ""
        events = (await temporal_client.get_workflow_handle(wid).fetch_history()).events
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert "publish_dead_letter" not in scheduled  # nothing dead-lettered while paused


def _metric_is(url: str, name: str, value: float, pool: str) -> None:
    assert metric_value(scrape(url), name, pool=pool) == value


async def test_an_allow_list_confines_deletion_and_keeps_the_rest_for_replay(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster
) -> None:
    tenant = f"canary-{uuid.uuid4().hex[:6]}"
    canary_topic, canary = orphan_requests(cluster, tenant, offloaded=False)
    _, others = orphan_requests(cluster, tenant, offloaded=False)
    canary_namespace = canary_topic.rsplit("/", 1)[0]
    live = own.with_overrides(live_allow=canary_namespace)

    async with running_pools(live, temporal_client):
        publish(own, canary + others)
        deleted = await results(temporal_client, canary, Mode.LIVE)
        kept = await results(temporal_client, others, Mode.SHADOW)
    assert {r.outcome for r in deleted.values()} == {Outcome.DELETED}
    assert not any(still_there(cluster, r) for r in canary)
    assert {r.outcome for r in kept.values()} == {Outcome.WOULD_DELETE}
    assert all(r.kept_for_replay == 1 for r in kept.values())
    assert all(still_there(cluster, r) for r in others)

    letters = [d for d in read_dead_letters(own) if d.failed_step == ALLOW_LIST_STEP]
    assert sorted(d.ledger_id or 0 for d in letters) == sorted(r.ledger_id for r in others)
    for letter in letters:
        assert "outside the live allow-list (LEDGER_DELETION_LIVE_ALLOW)" in letter.reason
        assert "replay it once the list is widened" in letter.reason and "WOULD_DELETE" in letter.reason


async def test_deletes_paused_before_the_process_starts_wait_from_the_first_request(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster
) -> None:
    """``pause --show`` reads the switch; a pause given before any deleting process runs holds too."""
    assert (await cli_json("pause", "--show"))["paused"] is False
    await cli("pause", "--reason", "before start")
    shown = await cli_json("pause", "--show")
    assert shown["paused"] is True and "before start" in shown["note"]
    tenant = f"early-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant, offloaded=False)
    async with running_pools(own.with_overrides(pause_recheck_seconds=300), temporal_client):
        publish(own, requests)
        await eventually(lambda: _waiting(temporal_client, requests), timeout=60)
        started = time.monotonic()
        await cli("resume")
        done = await results(temporal_client, requests, Mode.LIVE)
        assert time.monotonic() - started < 60  # by the signal, not the 300 s backstop
    assert {r.outcome for r in done.values()} == {Outcome.DELETED}


async def test_the_switch_flipped_without_the_cli_holds_and_releases_deletes(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster
) -> None:
    """The deleting pools create the switch (off) at start, so an operator can flip it with Temporal's own
    tools (``temporal schedule toggle``, or Pause in the UI's Schedules page); no resume signal comes then,
    and the waiting runs find the switch off at their next backstop look."""
    temporal = shutil.which("temporal", path=str(Path(sys.executable).parent))
    assert temporal is not None
    toggle = [temporal, "schedule", "toggle", "--address", own.temporal_address]
    toggle += ["--schedule-id", own.kill_switch_id]
    tenant = f"toggled-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant, offloaded=False)
    async with running_pools(own.with_overrides(pause_recheck_seconds=1), temporal_client):
        await asyncio.to_thread(subprocess.run, [*toggle, "--pause", "--reason", "incident 7"], check=True)
        assert (await cli_json("pause", "--show"))["note"] == "incident 7"
        await asyncio.sleep(2 * own.kill_switch_seconds)
        publish(own, requests)
        await eventually(lambda: _waiting(temporal_client, requests), timeout=60)
        assert all(still_there(cluster, r) for r in requests)
        await asyncio.to_thread(subprocess.run, [*toggle, "--unpause"], check=True)
        done = await results(temporal_client, requests, Mode.LIVE)
    assert {r.outcome for r in done.values()} == {Outcome.DELETED}


async def test_no_delete_starts_once_pause_has_returned(
    own: Settings, temporal_client: Client, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, as an operator found it: ``pause``, then requests submitted at once, all deleted within a
    second, because the deleting process had not looked at the switch again yet. ``pause`` now returns only
    once every deleting process has either read the switch since it went on or refuses to delete on a view
    that old (``LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS``, the same for the pools and the CLI here)."""
    stale = 6.0
    # Looks far apart, so that without the wait the pause is certainly unseen when the deletes come.
    deployment = own.with_overrides(
        kill_switch_seconds=stale - 1, kill_switch_stale_seconds=stale, pause_recheck_seconds=300
    )
    monkeypatch.setenv("LEDGER_DELETION_KILL_SWITCH_STALE_SECONDS", f"{stale:g}")
    tenant = f"just-paused-{uuid.uuid4().hex[:6]}"
    _, requests = orphan_requests(cluster, tenant)
    assert len(requests) == 3  # two BookKeeper ledgers and one offloaded, as in the issue
    async with running_pools(deployment, temporal_client) as running:
        switch = running.kill_switch
        assert switch is not None and switch.paused is False
        # The worst moment to pause: just after the process looked, its next look a whole period away.
        deadline = time.monotonic() + 3 * stale
        while (switch.age_seconds or stale) > 0.3:
            assert time.monotonic() < deadline, "the pool never read the switch"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        paused = await cli_json("pause", "--reason", "issue 39")
        waited = time.monotonic() - started
        publish(own, requests)

        async def settled() -> None:  # each run waits on the switch, or has ended (deleted, on old code)
            for request in requests:
                status = (await cli_json("show", request.workflow_id))[0]
                live = status.get("live_status") or {}
                assert live.get("step") == Step.PAUSED.value or status.get("status") != "RUNNING", status

        await eventually(settled, timeout=60)
        gone = [(r.ledger_type.value, r.ledger_id) for r in requests if not still_there(cluster, r)]
        assert gone == [], f"deleted though submitted after pause returned (in {waited:.1f} s)"
        await _waiting(temporal_client, requests)
        assert paused["deletes_held"] is True and paused["waited_seconds"] >= stale  # what it rests on
        resumed = await cli_json("resume")
        assert resumed["paused"] is False
        done = await results(temporal_client, requests, Mode.LIVE)
    assert {r.outcome for r in done.values()} == {Outcome.DELETED}, done
