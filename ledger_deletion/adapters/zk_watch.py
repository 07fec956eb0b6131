"""Persistent recursive watches (ZooKeeper 3.6+) on a kazoo client, which has no call for them.

ZooKeeper's ``addWatch`` (``OpCode.addWatch`` = 106, ``AddWatchRequest{path, mode}``) registers a watch that
stays after it fires and, in ``PERSISTENT_RECURSIVE`` mode, covers every znode below its path: each create,
data change and delete sends the client one event naming the znode (never its data). kazoo 2.x has no call
for it (python-zk/kazoo#715 is not in a release) and drops an event no one-shot watcher waits for, so:

* :class:`AddWatch` is the request record, sent through the client's connection as kazoo sends its own
  (``KazooClient._call``), as :class:`ledger_deletion.adapters.zk_reads.MultiRead` sends multi-reads;
* the connection's event reader is wrapped so an event under a watched root reaches a callback before
  kazoo's own dispatch, which then finds no one-shot watcher for it and drops it as before.

Watches live with the connection. ZooKeeper removes a connection's watches when it closes
(``DataTree.removeCnxn``), and kazoo 2.11 re-sends no watch at all on reconnection (it has no
``SetWatches``: its one-shot watchers simply never fire again). Nor would the server replay what a persistent
watch missed: ``DataTree.setWatches`` re-adds persistent and persistent recursive watches without comparing
zxids. It does compare them for one-shot watches, though: a path sent as a data watch whose znode is gone
fires ``NodeDeleted``, one whose ``mzxid`` is above the request's ``relativeZxid`` fires
``NodeDataChanged``; a path sent as a child watch whose ``pzxid`` is above it fires
``NodeChildrenChanged``; every other path gets the watch registered. So after a reconnection within the same
session, :meth:`PersistentWatches.catch_up` adds the persistent watches again and sends ``SetWatches``
(``OpCode.setWatches`` = 101) with the zxid of the last answer received before the drop, naming every record
and directory the caller knows: ZooKeeper answers with one event per record changed or deleted meanwhile and
per directory whose children changed, and nothing for the rest, instead of the caller reading everything
again. (A session that expired loses the zxid's meaning for the caller's state only if the caller says so:
kazoo starts a new session's ``last_zxid`` at 0, and the caller then reads everything, as on a start.)

The one-shot watches ``SetWatches`` registers for unchanged paths stay on the server until each fires once
(a change of that znode, which the persistent watch reports too: ``WatchManager.triggerWatch`` collects the
watchers of one event in a set, so the connection gets it once) or the connection closes: a watch entry per
record on the server, the price of not reading every record again.

Every byte read from the connection is counted (:attr:`PersistentWatches.bytes_received`), so the caller can
say what a resync or a catch-up cost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import Watch, int_struct, long_struct, write_string

from ledger_deletion.errors import ConfigurationError

__all__ = [
    "ADD_WATCH_OPCODE",
    "SET_WATCHES_OPCODE",
    "AddWatch",
    "EventKind",
    "PersistentWatches",
    "ReceivedBytes",
    "SetWatches",
    "WatchEvent",
]

ADD_WATCH_OPCODE = 106  # ZooDefs.OpCode.addWatch
SET_WATCHES_OPCODE = 101  # ZooDefs.OpCode.setWatches
PERSISTENT_RECURSIVE = 1  # AddWatchMode.PERSISTENT_RECURSIVE.getMode()
_RESULT_TIMEOUT = 30.0
# ClientCnxn.SET_WATCHES_MAX_LENGTH: the Java client splits its SetWatches at 128 KiB of paths, well below
# the server's jute.maxbuffer (1 MiB by default), which would close the connection on a bigger packet.
_SET_WATCHES_MAX_LENGTH = 128 * 1024


class EventKind(StrEnum):
    # Watcher.Event.EventType codes; a recursive watch sends no NodeChildrenChanged.
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    # From a catch-up's one-shot child watch only: the children of a directory changed meanwhile.
    CHILDREN = "children"


_KINDS = {1: EventKind.CREATED, 2: EventKind.DELETED, 3: EventKind.CHANGED, 4: EventKind.CHILDREN}


@dataclass(frozen=True)
class WatchEvent:
    kind: EventKind
    path: str  # without the client's chroot


class AddWatch:
    """``AddWatchRequest{ustring path; int mode}``; the reply is an ``ErrorResponse`` (one int, 0)."""

    type = ADD_WATCH_OPCODE  # read by kazoo's connection as ``request.type``
    __slots__ = ("mode", "path")

    def __init__(self, path: str, mode: int = PERSISTENT_RECURSIVE) -> None:
        self.path = path
        self.mode = mode

    def serialize(self) -> bytearray:
        out = bytearray(write_string(self.path))
        out.extend(int_struct.pack(self.mode))
        return out

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True


class SetWatches:
    """``SetWatches{long relativeZxid; vector<ustring> dataWatches, existWatches, childWatches}``; the reply
    is a header alone, sent after the events the request fired."""

    type = SET_WATCHES_OPCODE
    __slots__ = ("child_watches", "data_watches", "relative_zxid")

    def __init__(self, relative_zxid: int, data_watches: list[str], child_watches: list[str]) -> None:
        self.relative_zxid = relative_zxid
        self.data_watches = data_watches
        self.child_watches = child_watches

    def serialize(self) -> bytearray:
        out = bytearray(long_struct.pack(self.relative_zxid))
        for paths in (self.data_watches, [], self.child_watches):
            out.extend(int_struct.pack(len(paths)))
            for path in paths:
                out.extend(write_string(path))
        return out

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True


class ReceivedBytes:
    """Counts every byte kazoo reads from a client's connection (answers, events, pings), across
    reconnections: what a resync or a catch-up cost, seen from the client."""

    def __init__(self, client: KazooClient) -> None:
        self.count = 0
        connection: Any = client._connection
        original = connection._read

        def read(length: int, timeout: float) -> Any:
            data = original(length, timeout)
            self.count += len(data)
            return data

        connection._read = read


class PersistentWatches:
    """Persistent recursive watches of one kazoo client, each event handed to ``on_event``.

    ``on_event`` runs on kazoo's connection thread, in the order ZooKeeper sent the events: it must only
    queue them. Events outside the watched roots are left to kazoo.
    """

    def __init__(self, client: KazooClient, on_event: Callable[[WatchEvent], None]) -> None:
        self._client = client
        self._on_event = on_event
        self._roots: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._catching_up = False
        self._received = ReceivedBytes(client)
        connection: Any = client._connection  # kazoo keeps one handler per client, across reconnections
        original = connection._read_watch_event

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            kind = _KINDS.get(watch.type)
            # A child watch fires outside a catch-up only where SetWatches left one registered: the
            # persistent recursive watch already reported the child's creation or deletion itself.
            if kind is not None and (kind is not EventKind.CHILDREN or self._catching_up):
                path = client.unchroot(watch.path)
                if any(path == root or path.startswith(root + "/") for root in self._roots):
                    on_event(WatchEvent(kind, path))
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event

    @property
    def bytes_received(self) -> int:
        return self._received.count

    @property
    def roots(self) -> tuple[str, ...]:
        return self._roots

    def add(self, root: str) -> None:
        """Watch ``root`` and everything below it (it need not exist yet); again after a reconnection.

        Raises:
            ConfigurationError: a server before 3.6, which has no ``addWatch``.
            kazoo's connection errors.
        """
        with self._lock:
            if root not in self._roots:
                self._roots = (*self._roots, root)
        result = self._client.handler.async_result()
        self._client._call(AddWatch(_prefix_root(self._client.chroot, root)), result)
        try:
            result.get(timeout=_RESULT_TIMEOUT)
        except UnimplementedError as exc:
            hosts = ",".join(f"{host}:{port}" for host, port in self._client.hosts)
            raise ConfigurationError(
                f"ZooKeeper {hosts} has no persistent recursive watches (addWatch): the watcher needs "
                "ZooKeeper 3.6 or later"
            ) from exc

    def catch_up(self, relative_zxid: int, records: Iterable[str], directories: Iterable[str]) -> int:
        """After a reconnection within the session: watch every root again, then have ZooKeeper fire an
        event for each of ``records`` changed or deleted since ``relative_zxid`` and for each of
        ``directories`` whose children changed (:class:`EventKind` ``CHILDREN``), before this returns.
        Returns the number of SetWatches requests sent.

        Raises:
            kazoo's connection errors (the caller catches up again, from the same zxid, once connected).
        """
        for root in self._roots:
            self.add(root)
        sent = 0
        self._catching_up = True
        try:
            pending = []
            for data, children in _chunks(records, directories):
                chroot = self._client.chroot
                request = SetWatches(
                    relative_zxid,
                    [_prefix_root(chroot, p) for p in data],
                    [_prefix_root(chroot, p) for p in children],
                )
                result = self._client.handler.async_result()
                self._client._call(request, result)
                pending.append(result)
                sent += 1
            for result in pending:
                result.get(timeout=_RESULT_TIMEOUT)  # its events came first, on the same connection
        finally:
            self._catching_up = False
        return sent


def _chunks(records: Iterable[str], directories: Iterable[str]) -> Iterator[tuple[list[str], list[str]]]:
    """Paths in groups of at most ``_SET_WATCHES_MAX_LENGTH`` bytes: records as data watches, directories
    as child watches."""
    batch: tuple[list[str], list[str]] = ([], [])
    size = 0
    for which, paths in ((0, records), (1, directories)):
        for path in paths:
            length = len(path.encode()) + 4
            if size + length > _SET_WATCHES_MAX_LENGTH and (batch[0] or batch[1]):
                yield batch
                batch, size = ([], []), 0
            batch[which].append(path)
            size += length
    if batch[0] or batch[1]:
        yield batch
