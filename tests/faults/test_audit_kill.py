"""The audit log across a kill -9 of the pulsar pool between a run's decision and its ack.

The runs decide (delete) while the pulsar pool that holds their messages is dead, so their ack cannot run
and no record is written. Pulsar redelivers the messages to the restarted pool, whose signal joins each
run still waiting for its ack; the run acks through the new process, which writes the run's decision, the
deletion, once. A record written before the kill is impossible here (none was written), and a record
written twice would show as two objects with one record id, which the reader keeps once.
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.faults import count_redeliverable
from devstack.soak import latest_result
from devstack.stack import Stack
from ledger_deletion.audit.reader import AuditQuery, read
from ledger_deletion.audit.record import from_table
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.contracts import Outcome
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.faults.support import started_pools, started_run_ids

pytestmark = pytest.mark.stack


async def test_a_deletion_decided_while_its_acking_pool_is_dead_is_recorded_once(
    fault_client: Client, fault_settings: Settings, fault_stack: Stack, cluster: SimulatedCluster
) -> None:
    settings = fault_settings.with_overrides(
        audit_prefix=f"fault-{uuid.uuid4().hex[:8]}/audit",
        # Long enough for the dead holder's ack to wait out the pulsar pool's restart (~10 s on two cores):
        # the redelivered message joins the run while it still waits.
        ack_schedule_to_start_seconds=45,
    )
    topic = f"fault/audit-{time.monotonic_ns()}/t"
    ids = cluster.new_ledger_ids(4)
    cluster.create_topic(topic, ids)
    requests = cluster.requests_for_trim(topic, ids[:3])  # before the metadata update: in use for now
    async with started_pools(settings, fault_stack, log_name=f"{settings.task_queue_prefix}-audit") as pools:
        with RequestPublisher(settings) as publisher:
            for request in requests:
                publisher.publish(request)
        # Every run started, waiting out the in-use grace; nothing acked.
        await started_run_ids(fault_client, [r.workflow_id for r in requests])
        pools.kill9("pulsar")
        # The broker's metadata update lands: the runs decide and delete, and schedule acks nobody polls.
        cluster.remove_ledgers_from_metadata(topic, ids[:3])
        for request in requests:
            await _until_ack_scheduled(fault_client, request.workflow_id)
        assert not any(cluster.ledger_exists(i) for i in ids[:3])
        await asyncio.to_thread(pools.restart, "pulsar")
        results = [await latest_result(fault_client, r.workflow_id, 180) for r in requests]
        assert [r.outcome for r in results] == [Outcome.DELETED] * 3
        assert all(r.messages_acked == 1 for r in results)  # through the restarted process
        assert await asyncio.to_thread(count_redeliverable, settings, 1.0) == 0

    store = AuditStore.from_settings(settings)
    records = read(store)
    assert sorted(r.ledger_id for r in records) == sorted(ids[:3])  # once each: the deletion, not a replay
    assert {r.outcome for r in records} == {"DELETED"}
    for request in requests:
        (record,) = [r for r in records if r.ledger_id == request.ledger_id]
        run = (await fault_client.get_workflow_handle(request.workflow_id).describe()).run_id
        assert (record.workflow_id, record.run_id) == (request.workflow_id, run)
    # Each record is in exactly one object: the dead process wrote none, the restarted one each once.
    raw = [r for day in store.days() for key in store.keys(day) for r in from_table(_table(store, key))]
    assert len(raw) == len({r.record_id for r in raw}) == 3
    assert len(read(store, AuditQuery(outcome="DELETED"))) == 3


def _table(store: AuditStore, key: str) -> pa.Table:
    return pq.read_table(io.BytesIO(store.get(key)))


async def _until_ack_scheduled(client: Client, workflow_id: str, timeout: float = 60) -> None:
    """Wait until the run has decided and scheduled its ack (to the dead process's queue)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        if any(
            e.activity_task_scheduled_event_attributes.activity_type.name == "ack_messages"
            for e in history.events
        ):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{workflow_id} scheduled no ack within {timeout} s")


async def test_a_deletion_whose_ack_was_lost_is_recorded_by_the_process_that_gets_the_message(
    fault_client: Client, fault_settings: Settings, fault_stack: Stack, cluster: SimulatedCluster
) -> None:
    """As above, but the run gives its ack up before the pool is back (the fault settings' 4 s to start):
    it completes with the message unacked, and the redelivered message starts a new run, which finds the
    ledger gone. The restarted process reads the ack the first run scheduled and records its deletion too:
    the log says who deleted the ledger, not only that it was gone."""
    settings = fault_settings.with_overrides(audit_prefix=f"fault-{uuid.uuid4().hex[:8]}/audit")
    topic = f"fault/audit-lost-{time.monotonic_ns()}/t"
    ids = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, ids)
    (request,) = cluster.requests_for_trim(topic, ids[:1])
    async with started_pools(settings, fault_stack, log_name=f"{settings.task_queue_prefix}-lost") as pools:
        with RequestPublisher(settings) as publisher:
            publisher.publish(request)
        handle = fault_client.get_workflow_handle(request.workflow_id)
        [first_run] = await started_run_ids(fault_client, [request.workflow_id])
        pools.kill9("pulsar")
        cluster.remove_ledgers_from_metadata(topic, ids[:1])
        first = await latest_result(fault_client, request.workflow_id, 120)
        assert (first.outcome, first.messages_acked, first.messages_unacked) == (Outcome.DELETED, 0, 1)
        await asyncio.to_thread(pools.restart, "pulsar")
        deadline = time.monotonic() + 120
        while (await handle.describe()).run_id == first_run:  # the redelivered message's run
            assert time.monotonic() < deadline, "the redelivered message started no run"
            await asyncio.sleep(0.5)
        second = await latest_result(fault_client, request.workflow_id, 120)
        assert second.outcome is Outcome.ALREADY_DELETED
        store = AuditStore.from_settings(settings)
        deadline = time.monotonic() + 30
        while len(records := read(store)) < 2:  # the first run's record is written beside the new run
            assert time.monotonic() < deadline, records
            await asyncio.sleep(0.5)
    assert sorted((r.outcome, r.run_id == first_run) for r in records) == [
        ("ALREADY_DELETED", False),
        ("DELETED", True),
    ]
    assert {r.ledger_id for r in records} == {ids[0]}
