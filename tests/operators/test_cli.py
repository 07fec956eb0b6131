"""The operator CLI on the embedded stack: list/show/inflight by tenant, dlq list and replay (items 2, 7)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Any

import pulsar
import pytest
from temporalio.service import RPCError, RPCStatusCode
from typer.testing import CliRunner

from devstack.cluster import SimulatedCluster
from ledger_deletion.adapters.messaging import dead_letter_properties
from ledger_deletion.cli import app
from ledger_deletion.contracts import Outcome
from ledger_deletion.formats.avro import decode_request, encode_request
from ledger_deletion.ops.dlq import REPLAY_COUNT, REPLAYED_FROM, read_dead_letters
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.submit import RequestPublisher
from ledger_deletion.tenancy import namespace_of_topic
from tests.operators.support import Observed, orphan_requests, results_of
from tests.support import eventually

pytestmark = pytest.mark.stack


async def cli(*args: str) -> Any:
    """Run a command in a thread (it calls asyncio.run) while this loop keeps the pools running."""
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args), env={"COLUMNS": "250"})
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


async def cli_json(*args: str) -> Any:
    return json.loads((await cli(*args, "-o", "json")).stdout)


async def test_per_namespace_topic_is_consumed_and_list_show_inflight_filter_by_tenant(
    observed: Observed, cluster: SimulatedCluster, cli_env: dict[str, str]
) -> None:
    tenant = observed.tenant_topic.split("://")[1].split("/")[0]
    # The namespace's own deletion topic, not the system topic: tenant isolation. It takes
    # requests of its own namespace only.
    _, requests = orphan_requests(cluster, tenant, namespace=namespace_of_topic(observed.tenant_topic))
    with RequestPublisher(observed.settings.with_overrides(topic=observed.tenant_topic)) as publisher:
        for request in requests:
            publisher.publish(request)
    results = await results_of(observed.client, requests)
    assert {r.outcome for r in results.values()} == {Outcome.DELETED}

    async def listed() -> None:
        rows = (await cli_json("list", "--tenant", tenant))["deletions"]
        assert sorted(r["workflow_id"] for r in rows) == sorted(results)
        assert {r["tenant"] for r in rows} == {tenant}
        assert {r["outcome"] for r in rows} == {"DELETED"}
        assert (await cli_json("list", "--tenant", tenant, "--running"))["deletions"] == []
        assert (await cli_json("list", "--tenant", "no-such-tenant"))["deletions"] == []

    await eventually(listed)

    offloaded = next(r for r in requests if r.ledger_type.value == "OFFLOAD_LEDGER")
    shown = await cli_json("show", str(offloaded.ledger_id))
    assert sorted(d["workflow_id"] for d in shown) == sorted(
        {r.workflow_id for r in requests if r.ledger_id == offloaded.ledger_id}
    )
    bk = next(d for d in shown if d["ledger_type"] == "LEDGER")
    steps = {s["step"]: s for s in bk["steps"]}
    assert steps["delete_bk_ledger"]["state"] == "completed"
    assert steps["delete_bk_ledger"]["attempts"] == 1
    assert steps["delete_bk_ledger"]["seconds"] is not None
    assert bk["result"]["outcome"] == "DELETED" and bk["messages_joined"] == 1
    assert "ledger" in bk["summary"] and offloaded.topic_name in bk["summary"]
    table = (await cli("show", offloaded.workflow_id)).stdout
    assert "delete_offload_segment" in table and "completed" in table

    async def drained() -> None:
        # Every message acked: no running workflow, and the namespace topic's subscription backlog (topic
        # stats from the admin API, which pulsar-lite's metrics feed a moment after the ack) is empty.
        report = await cli_json("inflight", "--tenant", tenant)
        assert report["backlog_error"] == "" and report["backlog_source"]
        assert [t["backlog"] for t in report["tenants"] if t["tenant"] == tenant] == [0]
        assert report["total"] == 0

    await eventually(drained)
    human = (await cli("inflight", "--tenant", tenant)).stdout
    assert "running workflows" in human and "backlog" in human


async def test_inflight_counts_running_workflows_per_tenant(
    observed: Observed, cluster: SimulatedCluster, cli_env: dict[str, str]
) -> None:
    """A ledger whose topic still references it stays in the in-use grace (running) for a while."""
    tenant = f"inflight-{observed.settings.task_queue_prefix[-6:]}"
    topic = f"{tenant}/ns/orders"
    ids = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, ids)
    request = cluster.requests_for_trim(topic, ids[:1])[0]  # published, but metadata not yet updated
    with RequestPublisher(observed.settings) as publisher:
        publisher.publish(request)

    async def running() -> None:
        report = await cli_json("inflight", "--tenant", tenant, "--metrics-url", observed.metrics_url)
        assert [t["running_workflows"] for t in report["tenants"] if t["tenant"] == tenant] == [1]
        assert report["total"] == 1
        # The pulsar pool holds that message unacked while its workflow runs (its pending-ack gauge).
        assert report["held_by_pulsar_pools"] >= 1 and report["held_error"] == ""

    await eventually(running)

    async def explained() -> None:
        # A running deletion explained: the live status query and the durable waits so far. The owner
        # broker is asked once the checks land, so its step shows up in the history a moment later.
        live = (await cli_json("show", request.workflow_id))[0]
        assert live["status"] == "RUNNING"
        assert live["live_status"]["step"] in ("wait_in_use", "ask_owner_broker")
        assert live["live_status"]["messages_collected"] == 1
        assert "ask_owner_broker" in [s["step"] for s in live["steps"]]

    await eventually(explained)
    cluster.remove_ledgers_from_metadata(topic, ids[:1])  # the mark phase catches up: grace ends
    drained = await cli("inflight", "--tenant", tenant, "--wait", "--timeout", "90")
    assert "total" in drained.stdout
    results = await results_of(observed.client, [request])
    assert results[request.workflow_id].outcome is Outcome.DELETED
    assert (await cli_json("inflight", "--tenant", tenant))["total"] == 0


def _dead_letter(publisher: RequestPublisher, request: PendingDeleteLedgerInfo, reason: str) -> None:
    """What the workflow publishes when a step exhausts its retries."""
    publisher.publish_raw(
        encode_request(request),
        dead_letter_properties(
            reason=reason,
            failed_step="delete_bk_ledger",
            attempts=4,
            workflow_id=request.workflow_id,
            original={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        ),
    )


async def test_dlq_list_and_replay_acks_only_what_was_replayed(
    observed: Observed, cluster: SimulatedCluster, cli_env: dict[str, str]
) -> None:
    tenant = f"dlq-{observed.settings.task_queue_prefix[-6:]}"
    _, first_requests = orphan_requests(cluster, tenant, offloaded=False)
    first, second = first_requests  # two LEDGER requests of the same topic
    with RequestPublisher(observed.settings.with_overrides(topic=observed.settings.dead_letter_topic)) as dlq:
        _dead_letter(dlq, first, "ZooKeeperUnavailable: connection loss")
        _dead_letter(dlq, second, "ZooKeeperUnavailable: session expired")

    listed = (await cli_json("dlq", "list", "--tenant", tenant))["dead_letters"]
    by_ledger = {d["ledger_id"]: d for d in listed}
    assert set(by_ledger) == {first.ledger_id, second.ledger_id}
    entry = by_ledger[first.ledger_id]
    assert entry["reason"] == "ZooKeeperUnavailable: connection loss"
    assert entry["failed_step"] == "delete_bk_ledger" and entry["attempts"] == 4
    assert entry["workflow_id"] == first.workflow_id and entry["age_seconds"] >= 0
    assert "connection loss" in (await cli("dlq", "list")).stdout

    dry = await cli_json("dlq", "replay", "--ledger", str(first.ledger_id), "--dry-run")
    assert dry["dry_run"] and dry["selected"] == 1 and dry["replayed"] == []
    assert cluster.ledger_exists(first.ledger_id)  # a dry run changes nothing

    replayed = await cli_json("dlq", "replay", "--ledger", str(first.ledger_id))
    assert [d["ledger_id"] for d in replayed["replayed"]] == [first.ledger_id]
    results = await results_of(observed.client, [first])
    assert results[first.workflow_id].outcome is Outcome.DELETED
    assert not cluster.ledger_exists(first.ledger_id)
    assert cluster.ledger_exists(second.ledger_id)  # not selected: untouched

    # The replayed entry was acked; the other one is still waiting in the DLQ subscription. A dry run
    # counts what a replay would find (not the retained entry already replayed), and hands it back.
    assert (await cli_json("dlq", "replay", "--ledger", str(first.ledger_id), "--dry-run"))["selected"] == 0
    again = await cli_json("dlq", "replay", "--ledger", str(first.ledger_id))
    assert again["replayed"] == []
    for _ in range(2):  # the second dry run still finds what the first one looked at
        dry = await cli_json("dlq", "replay", "--ledger", str(second.ledger_id), "--dry-run")
        assert dry["selected"] == 1 and dry["replayed"] == []
    rest = await cli("dlq", "replay", "--ledger", str(second.ledger_id))
    assert "replayed 1 dead letter(s)" in rest.stdout
    results = await results_of(observed.client, [second])
    assert results[second.workflow_id].outcome is Outcome.DELETED
    # The list is a non-destructive look at the topic: both entries are still retained there.
    assert {d["ledger_id"] for d in (await cli_json("dlq", "list", "--tenant", tenant))["dead_letters"]} == {
        first.ledger_id,
        second.ledger_id,
    }


def _forged(victim_namespace: str, ledger_id: int) -> PendingDeleteLedgerInfo:
    """Another namespace's ledger, in-use check off: what a tenant's topic must never get through."""
    request = PendingDeleteLedgerInfo(
        f"{victim_namespace}/ledger-partition-0", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id
    )
    return replace(request, check_ledger_still_in_use=False)


async def _assert_never_started(observed: Observed, workflow_id: str) -> None:
    with pytest.raises(RPCError) as refused:
        await observed.client.get_workflow_handle(workflow_id).describe()
    assert refused.value.status == RPCStatusCode.NOT_FOUND


async def test_replay_sends_an_entry_back_to_the_topic_it_came_from(
    observed: Observed, cluster: SimulatedCluster, cli_env: dict[str, str]
) -> None:
    """Not to the system topic, which would trust it with any namespace and without the in-use check."""
    run = uuid.uuid4().hex[:8]
    # A namespace's deletion topic that no pool consumes (what arrives there stays to be read), and the
    # partition the ingest would have read the entry from.
    topic = f"persistent://replay-{run}/orders/__ledger_deletion"
    origin = f"{topic}-partition-1"
    [ledger_id] = cluster.new_ledger_ids(1)
    forged = _forged(f"globex-{run}/payments", ledger_id)
    payload = encode_request(forged)
    client = pulsar.Client(
        observed.settings.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        arrived = client.subscribe(topic, "read-back", initial_position=pulsar.InitialPosition.Earliest)
        with RequestPublisher(
            observed.settings.with_overrides(topic=observed.settings.dead_letter_topic)
        ) as dlq:
            dlq.publish_raw(
                payload,
                dead_letter_properties(  # what the ingest publishes (workers/ingest.py, _origin)
                    reason="refused",
                    failed_step="tenant",
                    attempts=1,
                    workflow_id="",
                    original={
                        "ledger-deletion.origin-topic": origin,
                        "ledger-deletion.origin-message-id": "x",
                    },
                ),
            )

        dry = await cli_json("dlq", "replay", "--ledger", str(ledger_id), "--dry-run")
        assert dry["destinations"] == {topic: 1}
        replayed = await cli_json("dlq", "replay", "--ledger", str(ledger_id))
        assert [d["replay_topic"] for d in replayed["replayed"]] == [topic]

        message = await asyncio.to_thread(arrived.receive, 10_000)
        # The request as sent, with the in-use check (a replay always asks the owner).
        assert decode_request(message.data()) == replace(forged, check_ledger_still_in_use=True)
        assert message.properties()[REPLAY_COUNT] == "1"
        arrived.acknowledge(message)
    finally:
        client.close()
    await asyncio.sleep(3)  # had it gone to the system topic, the pools would have started it by now
    await _assert_never_started(observed, forged.workflow_id)


async def test_tenants_dead_letter_replayed_is_refused_again_on_its_own_topic(
    observed: Observed, cluster: SimulatedCluster, cli_env: dict[str, str]
) -> None:
    """End to end through the running pools: a namespace's topic naming another namespace is dead-lettered;
    replayed, it goes back to that namespace's topic and is refused again, never started."""
    run = uuid.uuid4().hex[:8]
    victim = f"globex-{run}/payments"
    [ledger_id] = cluster.new_ledger_ids(1)
    forged = _forged(victim, ledger_id)
    with RequestPublisher(observed.settings.with_overrides(topic=observed.tenant_topic)) as tenant:
        tenant.publish(forged)

    def letters() -> list[Any]:
        return [d for d in read_dead_letters(observed.settings) if d.ledger_id == ledger_id]

    async def dead_lettered(count: int) -> None:
        found = await asyncio.to_thread(letters)
        assert len(found) == count and all(d.failed_step == "tenant" for d in found)

    await eventually(lambda: dead_lettered(1), timeout=30)
    [first] = await asyncio.to_thread(letters)
    assert first.origin_topic.startswith(observed.tenant_topic) and victim in first.reason

    replayed = await cli_json("dlq", "replay", "--ledger", str(ledger_id))
    assert [d["replay_topic"] for d in replayed["replayed"]] == [observed.tenant_topic]
    await eventually(lambda: dead_lettered(2), timeout=30)
    again = next(d for d in await asyncio.to_thread(letters) if d.message_id != first.message_id)
    assert again.origin_topic.startswith(observed.tenant_topic)
    assert again.properties[REPLAYED_FROM] == first.message_id
    await _assert_never_started(observed, forged.workflow_id)


async def test_replay_needs_exactly_one_selector(cli_env: dict[str, str]) -> None:
    result = await asyncio.to_thread(CliRunner().invoke, app, ["dlq", "replay"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "command",
    [["list"], ["show"], ["inflight"], ["dlq", "list"], ["dlq", "replay"], ["report"], ["pause"], ["resume"]],
)
def test_every_command_has_help(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output
