"""Persistent recursive watches (ZooKeeper 3.6+) on a kazoo client, which has no call for them.

ZooKeeper's ``addWatch`` (``OpCode.addWatch`` = 106, ``AddWatchRequest{path, mode}``) registers a watch that
stays after it fires and, in ``PERSISTENT_RECURSIVE`` mode, covers every znode below its path: each create,
data change and delete sends the client one event naming the znode (never its data). kazoo 2.x has no call
for it (python-zk/kazoo#715 is not in a release) and drops an event no one-shot watcher waits for, so:

* :class:`AddWatch` is the request record, sent through the client's connection as kazoo sends its own
  (``KazooClient._call``), as :class:`ledger_deletion.adapters.zk_reads.MultiRead` sends multi-reads;
* the connection's event reader is wrapped so an event under a watched root reaches a callback before
  kazoo's own dispatch, which then finds no one-shot watcher for it and drops it as before.

Watches live with the connection. ZooKeeper removes a connection's watches when it closes, and kazoo's
reconnection re-sends its own one-shot watches only; the server would not replay what a persistent watch
missed anyway (``DataTree.setWatches`` re-adds persistent watches without comparing zxids). So after every
reconnection the caller adds the watches again and reads what may have changed meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import Watch, int_struct, write_string

from ledger_deletion.errors import ConfigurationError

__all__ = ["ADD_WATCH_OPCODE", "AddWatch", "EventKind", "PersistentWatches", "WatchEvent"]

ADD_WATCH_OPCODE = 106  # ZooDefs.OpCode.addWatch
PERSISTENT_RECURSIVE = 1  # AddWatchMode.PERSISTENT_RECURSIVE.getMode()
_RESULT_TIMEOUT = 30.0


class EventKind(StrEnum):
    # Watcher.Event.EventType codes; a recursive watch sends no NodeChildrenChanged.
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"


_KINDS = {1: EventKind.CREATED, 2: EventKind.DELETED, 3: EventKind.CHANGED}


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
        connection: Any = client._connection  # kazoo keeps one handler per client, across reconnections
        original = connection._read_watch_event

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            kind = _KINDS.get(watch.type)
            if kind is not None:
                path = client.unchroot(watch.path)
                if any(path == root or path.startswith(root + "/") for root in self._roots):
                    on_event(WatchEvent(kind, path))
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event

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
