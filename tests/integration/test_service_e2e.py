"""The whole service on the real stack: Pulsar messages in, ZooKeeper/S3 deletions and acks out.

The pools run in this process (``service`` fixture) against the session's own deletion topic; the cluster is
real metadata in ZooKeeper and real objects in S3, trimmed the way PIP-186's mark phase does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.scenario import Scenario, build_and_mark
from ledger_deletion.contracts import DeletionResult, Outcome
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result, wait_until_all_acked
from workers.pools import RunningPools

pytestmark = pytest.mark.stack


async def collect_results(
    client: Client, scenario: Scenario, timeout: float = 120
) -> dict[str, DeletionResult]:
    """Wait for every case's workflow while the scenario's deferred metadata updates happen on time."""
    started = time.monotonic()

    async def deferred() -> None:
        while scenario.deferred:
            scenario.run_deferred(started)
            await asyncio.sleep(0.05)

    updates = asyncio.create_task(deferred())
    ids = sorted({case.request.workflow_id for case in scenario.cases})
    outcomes = await asyncio.gather(*(wait_for_result(client, i, timeout=timeout) for i in ids))
    await updates
    return dict(zip(ids, outcomes, strict=True))


def read_dead_letters(
    settings: Settings, count: int, timeout_s: float = 20, *, wanted: Callable[[Any], bool] | None = None
) -> list[Any]:
    """The first ``count`` letters of the session's dead-letter topic that are ``wanted`` (default: all);
    other tests of the session dead-letter there too."""
    client = pulsar.Client(settings.pulsar_url)
    try:
        consumer = client.subscribe(
            settings.dead_letter_topic,
            f"test-reader-{uuid.uuid4().hex[:6]}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        letters: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(letters) < count and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            if wanted is None or wanted(message):
                letters.append(message)
            consumer.acknowledge(message)
        consumer.close()
        return letters
    finally:
        client.close()


async def test_every_case_of_the_scenario(
    cluster: SimulatedCluster,
    service: RunningPools,
    settings: Settings,
    temporal_client: Client,
    publisher: RequestPublisher,
) -> None:
    scenario = build_and_mark(
        cluster, f"e2e/ns-{uuid.uuid4().hex[:6]}", publisher.publish, publisher.publish_raw
    )
    results = await collect_results(temporal_client, scenario)

    wrong = {
        case.label: (case.expected.value, results[case.request.workflow_id].outcome.value)
        for case in scenario.cases
        if results[case.request.workflow_id].outcome is not case.expected
    }
    assert wrong == {}
    assert scenario.check_storage() == []
    duplicate = next(c for c in scenario.cases if c.copies == 2)
    assert results[duplicate.request.workflow_id].messages_acked == 2
    await wait_until_all_acked(service)

    # The session's dead-letter topic also holds other tests' letters (requests kept for replay).
    letters = read_dead_letters(
        settings, count=len(scenario.garbage), wanted=lambda m: m.data() in scenario.garbage
    )
    assert [m.data() for m in letters] == scenario.garbage
    assert letters[0].properties()["ledger-deletion.failed-step"] == "decode"
    assert letters[0].properties()["ledger-deletion.reason"]


async def test_step_that_keeps_failing_ends_in_the_dead_letter_topic(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, stack, new_ledger_id
) -> None:
    """An offload pool that cannot reach its S3 endpoint: retries run out, the request is dead-lettered."""
    broken = settings.with_overrides(
        topic=f"{settings.topic}-broken",
        task_queue_prefix=f"{settings.task_queue_prefix}-broken",
        s3_endpoint="http://127.0.0.1:9",  # discard port: connection refused
        s3_endpoint_aliases=stack.s3_endpoint,  # the store the offload names, unreachable from this pool
        max_attempts=2,
    )
    topic = f"e2e/ns-{uuid.uuid4().hex[:6]}/offloaded"
    (ledger_id,) = cluster.new_ledger_ids(1)
    cluster.create_topic(topic, [ledger_id, new_ledger_id()], offloaded={ledger_id})
    async with running_pools(broken, temporal_client) as running:
        with RequestPublisher(broken) as broken_publisher:
            requests = cluster.trim(topic, [ledger_id], broken_publisher.publish)
        offload = next(r for r in requests if r.ledger_type.value == "OFFLOAD_LEDGER")
        result = await wait_for_result(temporal_client, offload.workflow_id)
        assert result.outcome is Outcome.DEAD_LETTERED
        assert result.failed_step == "delete_offload_segment" and "ObjectStoreUnavailable" in result.reason
        assert result.messages_acked == 1
        await wait_until_all_acked(running)
    assert all(
        cluster.object_exists(key, bucket) for bucket, key in cluster.offload_keys(offload.context, ledger_id)
    )  # type: ignore[arg-type]
    (letter,) = read_dead_letters(broken, count=1)
    props = letter.properties()
    assert props["ledger-deletion.failed-step"] == "delete_offload_segment"
    assert props["ledger-deletion.attempts"] == "2"
    assert props["ledger-deletion.workflow-id"] == offload.workflow_id


async def test_offload_in_a_bucket_that_is_not_there_is_dead_lettered_not_acked_as_deleted(
    settings: Settings, temporal_client: Client, s3, stack, new_ledger_id
) -> None:
    """The driver metadata names a bucket the endpoint does not have: not ALREADY_DELETED (acked, objects
    left for ever) but BucketNotFound, retried until the attempts run out, then the DLQ with the reason."""
    nobucket = settings.with_overrides(
        topic=f"{settings.topic}-nobucket",
        task_queue_prefix=f"{settings.task_queue_prefix}-nobucket",
        max_attempts=2,
    )
    missing = f"e2e-missing-{uuid.uuid4().hex[:8]}"
    ledger_id = new_ledger_id()
    request = PendingDeleteLedgerInfo(
        f"e2e/ns-{uuid.uuid4().hex[:6]}/gone",
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.OFFLOAD_LEDGER,
        ledger_id,
        context=LedgerInfo(
            ledger_id,
            offload_context=OffloadContext(
                7,
                ledger_id,
                complete=True,
                driver_metadata=OffloadDriverMetadata("aws-s3", {"bucket": missing}),
            ),
        ),
        check_ledger_still_in_use=False,
    )
    async with running_pools(nobucket, temporal_client) as running:
        with RequestPublisher(nobucket) as publisher:
            publisher.publish(request)
        result = await wait_for_result(temporal_client, request.workflow_id)
        assert result.outcome is Outcome.DEAD_LETTERED
        assert result.failed_step == "delete_offload_segment" and "BucketNotFound" in result.reason
        assert result.messages_acked == 1
        await wait_until_all_acked(running)
    (letter,) = read_dead_letters(nobucket, count=1)
    props = letter.properties()
    assert props["ledger-deletion.failed-step"] == "delete_offload_segment"
    assert props["ledger-deletion.attempts"] == "2"  # retried: the bucket might have been there the next time
    assert missing in props["ledger-deletion.reason"]


async def test_the_bk_copy_an_offloaded_topic_released_is_deleted_and_its_objects_kept(
    cluster: SimulatedCluster, service: RunningPools, temporal_client: Client, publisher: RequestPublisher
) -> None:
    """After the offload deletion lag the broker marks ``bookkeeperDeleted`` and then deletes the BK copy;
    when that delete fails the copy is left for ever, while the topic still lists the ledger (read from
    tiered storage). That copy is deleted; the copy of a ledger still within the lag, and every offloaded
    object, are kept: the first, past the grace, in the dead-letter topic (the broker marks a copy released
    in memory before its store write, so it would not send that request again)."""
    leaked, within_lag, current = cluster.new_ledger_ids(3)
    topic = cluster.create_topic(
        f"e2e/ns-{uuid.uuid4().hex[:6]}/offloaded",
        [leaked, within_lag, current],
        offloaded=[leaked, within_lag],
        bookkeeper_deleted=[leaked],
        bk_copy_left=[leaked],  # the broker's own delete of the released copy failed
    )
    requests = {
        ledger_id: PendingDeleteLedgerInfo(
            topic.name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id
        )
        for ledger_id in (leaked, within_lag)
    }
    for request in requests.values():
        publisher.publish(request)
    results = {
        ledger_id: await wait_for_result(temporal_client, request.workflow_id)
        for ledger_id, request in requests.items()
    }
    assert results[leaked].outcome is Outcome.DELETED
    assert results[within_lag].outcome is Outcome.DEAD_LETTERED
    assert "has not released its BookKeeper copy" in results[within_lag].reason
    assert not cluster.ledger_exists(leaked) and cluster.ledger_exists(within_lag)
    for ledger_id in (leaked, within_lag):
        for bucket, key in cluster.offload_keys(topic.name, ledger_id):
            assert cluster.object_exists(key, bucket), key


async def test_a_pending_ack_stores_ledgers_are_decided_by_pulsars_metadata_store(
    cluster: SimulatedCluster, service: RunningPools, temporal_client: Client, publisher: RequestPublisher
) -> None:
    """A pending-ack store is a managed ledger the owner broker refuses to load as a topic (it answers
    internalStats with "Can not create transaction system topic"): the ledger its trim released is deleted,
    the one the store still lists is kept (past the grace, in the dead-letter topic, to be replayed)."""
    trimmed, listed, current = cluster.new_ledger_ids(3)
    topic = cluster.create_topic(
        f"e2e/ns-{uuid.uuid4().hex[:6]}/orders-sub__transaction_pending_ack", [trimmed, listed, current]
    )
    [released] = cluster.trim(topic.name, [trimmed], publisher.publish)
    [still_listed] = cluster.requests_for_trim(topic.name, [listed])  # its store write never happened
    publisher.publish(still_listed)
    deleted = await wait_for_result(temporal_client, released.workflow_id)
    kept = await wait_for_result(temporal_client, still_listed.workflow_id)
    assert deleted.outcome is Outcome.DELETED and not cluster.ledger_exists(trimmed)
    assert kept.outcome is Outcome.DEAD_LETTERED and "metadata store" in kept.reason
    assert cluster.ledger_exists(listed)


async def test_the_objects_of_a_replaced_offload_attempt_are_deleted_and_the_current_ones_kept(
    cluster: SimulatedCluster, service: RunningPools, temporal_client: Client, publisher: RequestPublisher
) -> None:
    """A broker starting a new offload attempt stores the new uuid, then sends the replaced attempt's objects
    here ("Previous failed offload") while its topic still lists the ledger. Those objects are read by
    nothing: deleted. A request for the uuid the managed ledger stores is kept after the grace, as is the
    ledger's BookKeeper copy."""
    ledger_id, current = cluster.new_ledger_ids(2)
    topic = cluster.create_topic(
        f"e2e/ns-{uuid.uuid4().hex[:6]}/reoffloaded",
        [ledger_id, current],
        offloaded=[ledger_id],
        offload_failed=[ledger_id],
    )
    replaced = cluster.replace_offload(topic.name, ledger_id, complete=False)
    [stored] = [
        r
        for r in cluster.requests_for_trim(topic.name, [ledger_id])
        if r.ledger_type.value == "OFFLOAD_LEDGER"
    ]
    replaced_keys = cluster.offload_keys(replaced.context, ledger_id)  # type: ignore[arg-type]
    stored_keys = cluster.offload_keys(topic.name, ledger_id)
    assert replaced_keys and stored_keys and set(replaced_keys).isdisjoint(stored_keys)
    assert replaced.workflow_id != stored.workflow_id
    publisher.publish(replaced)
    publisher.publish(stored)

    results = {
        "replaced": await wait_for_result(temporal_client, replaced.workflow_id),
        "stored": await wait_for_result(temporal_client, stored.workflow_id),
    }
    assert results["replaced"].outcome is Outcome.DELETED
    assert results["stored"].outcome is Outcome.SKIPPED_IN_USE
    assert not any(cluster.object_exists(key, bucket) for bucket, key in replaced_keys)
    assert all(cluster.object_exists(key, bucket) for bucket, key in stored_keys)
    assert cluster.ledger_exists(ledger_id)


async def test_schema_locators_come_from_pulsars_metadata_store_when_it_is_apart(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client, zk, stack, new_ledger_id
) -> None:
    """Pulsar's metadata in a store of its own (a chroot here), BookKeeper's at the top: the locator found
    there keeps the live schema ledger and lets the dropped version go. Read from BookKeeper's ZooKeeper,
    which has no locator, both would have been deleted."""
    run = uuid.uuid4().hex[:6]
    pulsar_root = f"/pulsar-metadata-{run}"
    apart = settings.with_overrides(
        topic=f"{settings.topic}-apart-{run}",
        task_queue_prefix=f"{settings.task_queue_prefix}-apart-{run}",
        pulsar_metadata_zookeeper=stack.zookeeper + pulsar_root,
    )
    schema_id = f"e2e/ns-{run}/orders"
    dropped, live = new_ledger_id(), new_ledger_id()
    cluster.add_schema(schema_id, [dropped, live])
    cluster.add_schema(schema_id, [live])  # the broker dropped a version: the locator lists only `live`
    locator, _ = zk.get(f"/schemas/{schema_id}")
    zk.create(f"{pulsar_root}/schemas/{schema_id}", locator, makepath=True)  # move it to Pulsar's store
    zk.delete(f"/schemas/{schema_id}")
    # The namespace is Pulsar's: its topic's managed ledger is in Pulsar's store (knows_namespace).
    zk.create(f"{pulsar_root}/managed-ledgers/e2e/ns-{run}/persistent/orders", b"", makepath=True)
    requests = {
        ledger_id: PendingDeleteLedgerInfo(
            schema_id, LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, ledger_id, schema_id=schema_id
        )
        for ledger_id in (dropped, live)
    }
    async with running_pools(apart, temporal_client) as running:
        with RequestPublisher(apart) as publisher:
            for request in requests.values():
                publisher.publish(request)
        results = {
            ledger_id: await wait_for_result(temporal_client, request.workflow_id)
            for ledger_id, request in requests.items()
        }
        await wait_until_all_acked(running)
    assert results[dropped].outcome is Outcome.DELETED
    assert results[live].outcome is Outcome.SKIPPED_IN_USE and "schema locator" in results[live].reason
    assert cluster.ledger_exists(live) and not cluster.ledger_exists(dropped)


async def test_restarted_pulsar_pool_loses_nothing(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client
) -> None:
    """Stop the pools while requests are in flight (held messages unacked), start them again: every request
    still ends deleted and acked, because Pulsar redelivers what the stopped consumer held."""
    restart = settings.with_overrides(
        topic=f"{settings.topic}-restart",
        task_queue_prefix=f"{settings.task_queue_prefix}-restart",
        in_use_rechecks=1,
        in_use_recheck_seconds=3,
        shutdown_grace_seconds=0,
        ack_schedule_to_start_seconds=3,
    )
    topic = f"e2e/ns-{uuid.uuid4().hex[:6]}/restart"
    ids = cluster.new_ledger_ids(12)
    cluster.create_topic(topic, ids)
    # Requests sent before the metadata update: every workflow sits in its in-use grace when we stop.
    with RequestPublisher(restart) as pub:
        requests = cluster.requests_for_trim(topic, ids[:10])
        for request in requests:
            pub.publish(request)
    async with running_pools(restart, temporal_client) as first:
        assert first.ingestor is not None
        deadline = time.monotonic() + 30
        while first.ingestor.stats.started_or_joined < len(requests) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert first.ingestor.stats.started_or_joined == len(requests)
    cluster.remove_ledgers_from_metadata(topic, ids[:10])
    async with running_pools(restart, temporal_client) as second:
        results = [await wait_for_result(temporal_client, r.workflow_id) for r in requests]
        await wait_until_all_acked(second)
        assert second.ingestor is not None and second.ingestor.stats.received >= len(requests)  # redelivered
    assert {r.outcome for r in results} <= {Outcome.DELETED, Outcome.ALREADY_DELETED}
    assert not any(cluster.ledger_exists(i) for i in ids[:10])
    assert all(cluster.ledger_exists(i) for i in ids[10:])


async def test_colocated_pools_handle_every_case_on_one_task_queue(
    cluster: SimulatedCluster, settings: Settings, temporal_client: Client
) -> None:
    """``colocate_pools``: one process, one task queue, every activity started eagerly by the same worker."""
    colocated = settings.with_overrides(
        topic=f"{settings.topic}-colocated",
        task_queue_prefix=f"{settings.task_queue_prefix}-colocated",
        colocate_pools=True,
    )
    async with running_pools(colocated, temporal_client) as running:
        with RequestPublisher(colocated) as colocated_publisher:
            scenario = build_and_mark(
                cluster,
                f"e2e/ns-{uuid.uuid4().hex[:6]}",
                colocated_publisher.publish,
                colocated_publisher.publish_raw,
            )
            results = await collect_results(temporal_client, scenario)
        await wait_until_all_acked(running)
    wrong = {
        case.label: results[case.request.workflow_id].outcome.value
        for case in scenario.cases
        if results[case.request.workflow_id].outcome is not case.expected
    }
    assert wrong == {}
    assert scenario.check_storage() == []
    deleted = next(c for c in scenario.cases if c.expected is Outcome.DELETED and c.copies == 1)
    history = await temporal_client.get_workflow_handle(deleted.request.workflow_id).fetch_history()
    queues = {
        event.activity_task_scheduled_event_attributes.task_queue.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    }
    shared = colocated.task_queue("workflow")
    # every step on the one queue, except the ack, which goes to the process holding the message
    assert {q for q in queues if "-ack-" not in q} == {shared} and len(queues) == 2
