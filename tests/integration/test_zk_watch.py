"""Persistent recursive watches through kazoo, on the stack's ZooKeeper (3.6+)."""

from __future__ import annotations

import queue
import threading
import uuid
from typing import Any

import pytest

from devstack.stack import StackEndpoints
from ledger_deletion.adapters.zk_watch import EventKind, PersistentWatches, WatchEvent
from ledger_deletion.adapters.zookeeper import kazoo_client

pytestmark = pytest.mark.stack


def drain(events: queue.Queue[WatchEvent], count: int) -> list[tuple[EventKind, str]]:
    got = [events.get(timeout=10) for _ in range(count)]
    return [(e.kind, e.path) for e in got]


def test_every_change_below_a_watched_root_arrives_once_in_order(stack: StackEndpoints, zk: Any) -> None:
    chroot = f"/zk-watch-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(chroot)
    client = kazoo_client(f"{stack.zookeeper}{chroot}", 10.0)
    client.start(timeout=10)
    try:
        events: queue.Queue[WatchEvent] = queue.Queue()
        watches = PersistentWatches(client, events.put)
        watches.add("/watched")  # before it exists
        # kazoo's own one-shot watches go on working beside them.
        fired = threading.Event()
        client.exists("/watched/a", watch=lambda _event: fired.set())
        client.create("/watched/a", b"1", makepath=True)
        client.set("/watched/a", b"2")
        client.create("/watched/a/b/c", b"", makepath=True)
        client.create("/elsewhere", b"")
        client.delete("/watched", recursive=True)
        assert drain(events, 8) == [
            (EventKind.CREATED, "/watched"),
            (EventKind.CREATED, "/watched/a"),
            (EventKind.CHANGED, "/watched/a"),
            (EventKind.CREATED, "/watched/a/b"),
            (EventKind.CREATED, "/watched/a/b/c"),
            (EventKind.DELETED, "/watched/a/b/c"),
            (EventKind.DELETED, "/watched/a/b"),
            (EventKind.DELETED, "/watched/a"),
        ]
        assert drain(events, 1) == [(EventKind.DELETED, "/watched")]
        assert events.empty() and fired.wait(5)
    finally:
        client.stop()
        client.close()
        zk.delete(chroot, recursive=True)


def test_a_catch_up_reports_what_changed_since_a_zxid_and_nothing_else(
    stack: StackEndpoints, zk: Any
) -> None:
    """ZooKeeper compares SetWatches' one-shot watches with its zxid (DataTree.setWatches): a record changed
    or deleted since, a directory that gained a child, each fires one event; an unchanged one fires none."""
    chroot = f"/zk-watch-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(chroot)
    client = kazoo_client(f"{stack.zookeeper}{chroot}", 10.0)
    client.start(timeout=10)
    try:
        for name in ("same", "changed", "deleted"):
            client.create(f"/watched/dir/{name}", b"1", makepath=True)
        client.create("/watched/quiet", b"")
        events: queue.Queue[WatchEvent] = queue.Queue()
        watches = PersistentWatches(client, events.put)
        zxid = client.last_zxid  # the answer to the last create: everything up to it is known
        # Made by another client: this one's persistent watch is not there yet (as while disconnected).
        zk.set(f"{chroot}/watched/dir/changed", b"2")
        zk.delete(f"{chroot}/watched/dir/deleted")
        zk.create(f"{chroot}/watched/dir/new", b"")
        watches.add("/watched")  # after the changes: this connection's persistent watch missed them
        records = [f"/watched/dir/{name}" for name in ("same", "changed", "deleted")]
        before = watches.bytes_received
        assert watches.catch_up(zxid, records, ["/watched/dir", "/watched/quiet"]) == 1
        assert watches.bytes_received > before
        got = [(e.kind, e.path) for e in (events.get_nowait() for _ in range(events.qsize()))]
        assert sorted(got) == sorted(
            [
                (EventKind.DELETED, "/watched/dir/deleted"),
                (EventKind.CHANGED, "/watched/dir/changed"),
                (EventKind.CHILDREN, "/watched/dir"),
            ]
        )
        # A one-shot child watch left by the catch-up fires no event of its own afterwards: the
        # persistent watch reports the child itself.
        client.create("/watched/quiet/child", b"")
        assert drain(events, 1) == [(EventKind.CREATED, "/watched/quiet/child")]
    finally:
        client.stop()
        client.close()
        zk.delete(chroot, recursive=True)
