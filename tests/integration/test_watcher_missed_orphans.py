"""Orphans the watcher must not miss for good (issue 39 section 2): a ledger whose earlier suspect ended,
one never listed, one whose request was not acted on, and a store that is not Pulsar's.

The rule: a ledger that is an orphan at any time is requested within the watch delay plus one resync period,
whatever happened to earlier suspects of it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import Client

from devstack.stack import StackEndpoints
from ledger_deletion.errors import PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import (
    build_pulsar_ledger_metadata,
    managed_ledger_custom_metadata,
    schema_custom_metadata,
)
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import managed_ledger_name, serialize_managed_ledger_info
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.request import LedgerComponent, LedgerType
from ledger_deletion.watch.suspects import REASON_PROPERTY, Reason, suspect
from ledger_deletion.watch_contracts import SuspectInput, SuspectOutcome, SuspectPolicy
from tests.integration.watch_support import DELAY, Corner, TopicReader, corner, seen, until, watching
from workers.watcher import run_watcher
from workflows.suspect import LedgerSuspectWorkflow

pytestmark = pytest.mark.stack

SLACK = 12.0
RESYNC = 3.0  # the periodic resync of these tests, seconds
SOURCE, SHADOW = "public/default/source", "public/default/source-shadow"


def ml(topic: str) -> str:
    return f"/managed-ledgers/{managed_ledger_name(topic)}"


def unlisted_ledger(
    c: Corner, ledger_id: int, *, topic: str | None = None, schema: str | None = None
) -> None:
    """A Pulsar ledger nobody lists: a rollover whose ``updateLedgersListAfterRollover`` failed and whose
    delete failed too, or a schema ledger ``BookkeeperSchemaStorage.putSchema`` abandoned on BadVersion."""
    tags = (
        managed_ledger_custom_metadata(managed_ledger_name(topic))
        if topic
        else schema_custom_metadata(schema)
    )
    c.zk.create(
        ledger_path(ledger_id, c.cluster.ledgers_root),
        build_pulsar_ledger_metadata(
            tags, length=128, last_entry_id=0, ctime=int(time.time() * 1000) - 60_000
        ),
        makepath=True,
    )


async def requests_of(reader: TopicReader, keys: set[tuple[str, int]], count: int, timeout: float) -> None:
    """Read until each key arrived ``count`` times, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        arrived = await asyncio.to_thread(reader.drain, 1)
        if all(sum(1 for a in arrived if a.key == key) >= count for key in keys):
            return


async def test_a_ledger_whose_earlier_suspects_ended_is_requested_once_it_is_an_orphan(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    """Two earlier suspects of a ledger, ended: one REFERENCED (as when a resync read a lagging follower
    and took just-listed ledgers for gone), one PUBLISHED for a shadow topic (``ShadowManagedLedgerImpl``
    lists its source's ledgers, and the suspect ids name the ledger, not the topic). When the source
    trims it and its delete fails, it is requested again. (Started with REJECT_DUPLICATE, it never was.)"""
    with corner(stack, s3, new_ledger_id, watch_resync_seconds=0) as c:
        b = c.broker
        reader = TopicReader(c.settings)
        async with watching(c.settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            ids = b.create_topic(SOURCE, 4)
            referenced, shadowed = ids[0], ids[1]
            # The shadow topic's record lists the source's ledgers; then it drops one of them.
            shadow = ml_pb.ManagedLedgerInfo()
            for ledger_id in ids:
                shadow.ledgerInfo.add(ledgerId=ledger_id)
            c.zk.create(ml(SHADOW), serialize_managed_ledger_info(shadow), makepath=True)
            await seen(watcher, c.zk, ml(SOURCE), ml(SHADOW))
            del shadow.ledgerInfo[1]
            c.zk.set(ml(SHADOW), serialize_managed_ledger_info(shadow))
            await seen(watcher, c.zk, ml(SHADOW))
            # A suspect of a ledger still listed: it ends REFERENCED.
            early = suspect(
                Reason.TRIMMED,
                topic_name=SOURCE,
                component=LedgerComponent.MANAGED_LEDGER,
                ledger_type=LedgerType.LEDGER,
                ledger_id=referenced,
            )
            handle = await temporal_client.start_workflow(
                LedgerSuspectWorkflow.run,
                SuspectInput(early.request, SuspectPolicy(delay_seconds=0.0)),
                id=early.workflow_id,
                task_queue=c.settings.watch_task_queue,
            )
            assert (await handle.result()).outcome is SuspectOutcome.REFERENCED
            await requests_of(reader, {("LEDGER", shadowed)}, 1, DELAY + SLACK)
            assert [a.request.topic_name for a in reader.arrived] == [SHADOW]

            # Now both are real orphans: trimmed by their owner, whose deletes fail.
            b.trim(SOURCE, [referenced, shadowed], bk_delete_fails=[referenced, shadowed])
            trimmed = time.time()
            await seen(watcher, c.zk, ml(SOURCE))
            wanted = {("LEDGER", referenced), ("LEDGER", shadowed)}
            await requests_of(reader, wanted, 1, DELAY + SLACK)
            await requests_of(reader, {("LEDGER", shadowed)}, 2, DELAY + SLACK)
        reader.close()
        late = [a for a in reader.arrived if a.publish_time >= trimmed]
        assert sorted(a.key for a in late) == sorted(wanted), watcher.stats
        assert all(a.request.topic_name == SOURCE for a in late)
        assert all(a.request.properties[REASON_PROPERTY] == "trimmed" for a in late)


async def test_the_periodic_resync_requests_what_no_diff_shows(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    """Ledgers never listed (a data ledger of a failed rollover, a schema ledger abandoned on BadVersion)
    left after the watcher's first resync are requested by its periodic resync; an orphan whose request
    nobody acted on (as after SKIPPED_IN_USE: the broker never sends it again) is requested again. With
    resyncs only at start and on reconnection, none of this happened."""
    with corner(stack, s3, new_ledger_id, watch_resync_seconds=RESYNC) as c:
        b = c.broker
        topic, schema = "public/default/rolling", "public/default/rolling"
        before = b.create_topic("public/default/before", 3)
        b.trim("public/default/before", [before[0]], bk_delete_fails=[before[0]])
        reader = TopicReader(c.settings)
        async with watching(c.settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            b.create_topic(topic, 2)
            b.add_schema(schema, versions=1)
            await seen(watcher, c.zk, ml(topic), f"/schemas/{schema}")
            data_orphan, schema_orphan = new_ledger_id(), new_ledger_id()
            unlisted_ledger(c, data_orphan, topic=topic)
            unlisted_ledger(c, schema_orphan, schema=schema)
            b.roll_over(topic)  # the next rollover lists a newer ledger: the failed one is behind it
            b.add_schema_version(schema)  # the retried putSchema stores its own, newer ledger
            made = time.time()
            await seen(watcher, c.zk, ml(topic), f"/schemas/{schema}")
            wanted = {("LEDGER", data_orphan), ("LEDGER", schema_orphan)}
            await requests_of(reader, wanted, 1, DELAY + RESYNC + SLACK)
            # The orphan found at start was requested then, and nobody deleted it: it is requested again.
            await requests_of(reader, {("LEDGER", before[0])}, 2, DELAY + RESYNC + SLACK)
        reader.close()
        found = {a.key: a for a in reader.arrived if a.key in wanted}
        assert set(found) == wanted, (reader.keys(), watcher.stats)
        for one in found.values():
            assert one.request.properties[REASON_PROPERTY] == "unreferenced"
            assert one.publish_time - made <= DELAY + RESYNC + SLACK
        assert found[("LEDGER", schema_orphan)].request.ledger_component is LedgerComponent.SCHEMA_STORAGE
        assert sum(1 for a in reader.arrived if a.key == ("LEDGER", before[0])) >= 2, reader.keys()
        assert watcher.stats.resyncs >= 2


async def test_a_store_without_managed_ledgers_is_refused(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    """A wrong chroot: BookKeeper holds Pulsar's ledgers, the store read has no ``/managed-ledgers``. The
    watcher stops with the reason instead of requesting every ledger (it requested each one before)."""
    with corner(stack, s3, new_ledger_id) as c:
        c.zk.delete("/managed-ledgers")
        orphan = new_ledger_id()
        unlisted_ledger(c, orphan, topic="public/default/elsewhere")
        reader = TopicReader(c.settings)
        stop = asyncio.Event()
        task = asyncio.create_task(run_watcher(c.settings, temporal_client, stop))
        await asyncio.wait([task], timeout=DELAY + SLACK)  # long enough for a request, were there one
        arrived = await asyncio.to_thread(reader.drain, 1)
        stop.set()
        await asyncio.wait([task], timeout=60)
        reader.close()
        assert arrived == []
        assert task.done()
        with pytest.raises(PulsarMetadataNotFound, match="has no /managed-ledgers"):
            task.result()
