"""The watcher on the stack: a simulated broker changes ZooKeeper (and deletes, or fails to delete, what it
drops); exactly the orphans are requested on the deletion topic, after the delay, and nothing referenced."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.client import Client

from devstack.stack import StackEndpoints
from ledger_deletion.formats.managed_ledger import managed_ledger_name
from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.request import LedgerComponent, LedgerType
from ledger_deletion.watch.suspects import REASON_PROPERTY, SOURCE_PROPERTY
from tests.integration.watch_support import DELAY, Corner, TopicReader, corner, seen, until, watching

pytestmark = pytest.mark.stack

SLACK = 12.0  # how long after its delay a request may arrive on a shared, noisy machine
A, D = "public/default/a", "public/default/d"
FAILED, KEPT = "public/default/store-failed", "public/default/store-kept"
ORDERS, KEPT_SCHEMA = "public/default/orders", "public/default/kept"


def ml(topic: str) -> str:
    return f"/managed-ledgers/{managed_ledger_name(topic)}"


def referenced(
    c: Corner, topics: list[str], cursors: dict[str, list[str]], schemas: list[str]
) -> tuple[set[int], set[tuple[int, str]]]:
    """Every ledger id the store still lists (data, cursor, schema), and every (ledger, offload uuid)."""
    ids: set[int] = set()
    offloads: set[tuple[int, str]] = set()
    for topic in topics:
        ids.update(c.broker.stored_ledgers(topic))
        info = c.cluster.managed_ledger_info(topic)
        assert info is not None
        for li in info.ledgerInfo:
            if li.HasField("offloadContext"):
                offloads.add((li.ledgerId, offload_uuid(li.offloadContext.uidMsb, li.offloadContext.uidLsb)))
        for cursor in cursors.get(topic, []):
            info = c.cluster.cursor_info(topic, cursor)
            if info is not None and info.cursorsLedgerId >= 0:
                ids.add(info.cursorsLedgerId)
    for schema in schemas:
        ids.update(c.broker.schema_ledgers(schema))
    return ids, offloads


async def test_exactly_the_orphans_are_requested_after_the_delay(
    stack: StackEndpoints, s3: Any, temporal_client: Client, new_ledger_id: Any
) -> None:
    with corner(stack, s3, new_ledger_id) as c:
        b = c.broker
        expected: dict[tuple[str, int], float] = {}  # orphan -> when it was born (its delay starts then)

        # Before any watcher runs: a trim whose BookKeeper delete failed, a topic deleted half-way.
        pre = b.create_topic("public/default/pre", 4)
        b.trim("public/default/pre", pre[:2], bk_delete_fails=[pre[0]])
        gone = b.create_topic("public/default/gone-before", 3)
        gone_cursor = b.add_cursor("public/default/gone-before", "s")
        b.delete_topic("public/default/gone-before", bk_delete_fails=[gone[1], gone_cursor])

        reader = TopicReader(c.settings)
        async with watching(c.settings, temporal_client) as watcher:
            await until(lambda: watcher.stats.resyncs >= 1, 30, "the first resync")
            born = time.time()
            for key in [("LEDGER", pre[0]), ("LEDGER", gone[1]), ("LEDGER", gone_cursor)]:
                expected[key] = born

            # Trims: each delete that fails leaves an orphan, each one that succeeds leaves nothing.
            a = b.create_topic(A, 6, offloaded=[0, 1, 2], offload_failed=[2])
            cursor_ledger = b.add_cursor(A, "sub")
            await seen(watcher, c.zk, ml(A), f"{ml(A)}/sub")
            b.roll_over(A)
            await seen(watcher, c.zk, ml(A))
            b.trim(A, [a[0]], offload_delete_fails=[a[0]])
            expected[("OFFLOAD_LEDGER", a[0])] = time.time()
            await seen(watcher, c.zk, ml(A))
            b.trim(A, [a[1]], bk_delete_fails=[a[1]])
            expected[("LEDGER", a[1])] = time.time()
            await seen(watcher, c.zk, ml(A))
            # A failed offload attempt replaced, its objects' cleanup failing.
            b.replace_offload(A, a[2], cleanup_fails=True)
            replaced = c.cluster.managed_ledger_info(A)
            assert replaced is not None
            [ctx] = [li.offloadContext for li in replaced.ledgerInfo if li.ledgerId == a[2]]
            new_uuid = offload_uuid(ctx.uidMsb, ctx.uidLsb)
            expected[("OFFLOAD_LEDGER", a[2])] = time.time()
            await seen(watcher, c.zk, ml(A))
            # Cursor switches: the old ledger's delete fails once, succeeds once.
            old, _ = b.switch_cursor(A, "sub", delete_fails=True)
            assert old == cursor_ledger
            expected[("LEDGER", old)] = time.time()
            await seen(watcher, c.zk, f"{ml(A)}/sub")
            b.switch_cursor(A, "sub")
            await seen(watcher, c.zk, f"{ml(A)}/sub")

            # A failed store write: the ledger leaves memory, stays in the store, is not deleted; it leaves
            # the store's list with the next successful write (a rollover), and only then is it suspected.
            t = b.create_topic(FAILED, 3)
            await seen(watcher, c.zk, ml(FAILED))
            b.trim(FAILED, [t[0]], store_fails=True)
            assert b.stored_ledgers(FAILED) == t
            await asyncio.sleep(DELAY + 1)  # long enough for a suspect to be requested, were there one
            b.roll_over(FAILED)
            expected[("LEDGER", t[0])] = time.time()
            await seen(watcher, c.zk, ml(FAILED))

            # A failed store write the broker never repeats: a restart reloads the list from the store, which
            # still names the ledger; it is never requested (and trimmed later, properly, leaves nothing).
            k = b.create_topic(KEPT, 3)
            await seen(watcher, c.zk, ml(KEPT))
            b.trim(KEPT, [k[0]], store_fails=True)
            assert b.load(KEPT) == k
            await asyncio.sleep(DELAY + 1)
            b.trim(KEPT, [k[0]])
            await seen(watcher, c.zk, ml(KEPT))

            # A schema deleted by force, one ledger's delete failing; another schema gains a version.
            schema = b.add_schema(ORDERS, versions=2)
            kept_schema = b.add_schema(KEPT_SCHEMA, versions=1)
            await seen(watcher, c.zk, f"/schemas/{ORDERS}", f"/schemas/{KEPT_SCHEMA}")
            kept_schema.append(b.add_schema_version(KEPT_SCHEMA))
            b.delete_schema(ORDERS, delete_fails=[schema[1]])
            expected[("LEDGER", schema[1])] = time.time()
            await seen(watcher, c.zk, f"/schemas/{ORDERS}", f"/schemas/{KEPT_SCHEMA}")

            # A topic deleted with failures: a data ledger, its cursor's ledger, an offload.
            d = b.create_topic(D, 3, offloaded=[0])
            d_cursor = b.add_cursor(D, "d-sub")
            await seen(watcher, c.zk, ml(D), f"{ml(D)}/d-sub")
            b.delete_topic(D, bk_delete_fails=[d[1], d_cursor], offload_delete_fails=[d[0]])
            for key in [("LEDGER", d[1]), ("LEDGER", d_cursor), ("OFFLOAD_LEDGER", d[0])]:
                expected[key] = time.time()
            await seen(watcher, c.zk, ml(D))

            arrived = await asyncio.to_thread(reader.drain, DELAY + SLACK)
            while len(arrived) < len(expected) and time.time() - max(expected.values()) < DELAY + 2 * SLACK:
                arrived = await asyncio.to_thread(reader.drain, 2)
            await asyncio.to_thread(reader.drain, 2)  # anything more would be a request too many
        reader.close()

        assert reader.keys() == sorted(expected), watcher.stats
        for one in reader.arrived:
            assert one.request.check_ledger_still_in_use
            assert one.request.properties[SOURCE_PROPERTY] == "watcher"
            waited = one.publish_time - expected[one.key]
            assert DELAY - 1 <= waited <= DELAY + SLACK, (one.key, waited)
        reasons = {one.key: one.request.properties[REASON_PROPERTY] for one in reader.arrived}
        assert reasons[("LEDGER", pre[0])] == "unreferenced"
        assert reasons[("LEDGER", t[0])] == "trimmed"
        assert reasons[("OFFLOAD_LEDGER", a[2])] == "offload-replaced"
        assert reasons[("LEDGER", d_cursor)] == "cursor-deleted"
        components = {one.key: one.request.ledger_component for one in reader.arrived}
        assert components[("LEDGER", schema[1])] is LedgerComponent.SCHEMA_STORAGE
        assert components[("LEDGER", old)] is LedgerComponent.MANAGED_CURSOR
        # Nothing referenced: no BookKeeper ledger listed, no offload uuid stored (a replaced attempt's
        # ledger is still listed, under its new uuid).
        ledgers, offloads = referenced(
            c, ["public/default/pre", A, FAILED, KEPT], {A: ["sub"]}, [KEPT_SCHEMA]
        )
        assert set(kept_schema) | set(k[1:]) <= ledgers and (a[2], new_uuid) in offloads
        for one in reader.arrived:
            if one.request.ledger_type is LedgerType.LEDGER:
                assert one.request.ledger_id not in ledgers
            else:
                ctx = one.request.context.offload_context if one.request.context else None
                assert ctx is not None
                assert (one.request.ledger_id, offload_uuid(ctx.uid_msb, ctx.uid_lsb)) not in offloads
