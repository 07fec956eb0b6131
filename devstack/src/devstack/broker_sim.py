"""A simulated broker: the metadata writes and the deletes a Pulsar broker makes, and the ways they fail.

What the watcher can see of a broker is ZooKeeper: this class changes nothing else (BookKeeper's ledger
znodes and the offload bucket, which a real broker changes through BookKeeper and jclouds, are written on
the same :class:`~devstack.cluster.SimulatedCluster`). It keeps each topic's ledger list in memory, as
``ManagedLedgerImpl`` does, and follows the broker's order of work:

* a trim drops ledgers from memory, stores the list (``MetaStoreImpl#asyncUpdateLedgerIds``), and only once
  that succeeded deletes the ledgers and their offloaded objects (``ManagedLedgerImpl#internalTrimLedgers``).
  A failed store write leaves memory and store apart: the ledgers stay listed in the store, are never
  deleted, and leave the store's list silently with the next successful write (a rollover);
* a rollover creates the new ledger, then stores the list naming it;
* a cursor switch creates the new cursor ledger, stores the cursor naming it, then deletes the old one
  (``ManagedCursorImpl#switchToNewLedger``);
* a replaced offload attempt stores the new uuid, then cleans the old attempt's objects
  (``ManagedLedgerImpl#prepareLedgerInfoForOffloaded``, "Previous failed offload");
* a topic deletion deletes each cursor (its ledger, then its znode), the data ledgers and offloaded
  objects, then the managed ledger's znode;
* a schema's forced deletion deletes its ledgers and its locator (``BookkeeperSchemaStorage#delete``).

Every delete can be made to fail (``*_fails``): that is how orphans are born. Dev/test tooling.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable

from kazoo.exceptions import NoNodeError

from devstack.cluster import SimulatedCluster
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import (
    ManagedLedgerInfo,
    PbLedgerInfo,
    ledger_info_to_request_context,
    managed_ledger_name,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
    serialize_managed_ledger_info,
)
from ledger_deletion.formats.offload_keys import offload_keys_for_context

__all__ = ["SimulatedBroker"]


def _topic(name: str) -> str:
    return name.removeprefix("persistent://")


def _now_ms() -> int:
    return int(time.time() * 1000)


class SimulatedBroker:
    """One broker owning the topics it creates or :meth:`load`s, on ``cluster``'s ZooKeeper and bucket.

    ``allocate(n)`` hands out ``n`` fresh ledger ids; by default the cluster's id generator (tests that share
    a Temporal namespace pass ids no other test uses: ledger ids key the workflows).
    """

    def __init__(self, cluster: SimulatedCluster, allocate: Callable[[int], list[int]] | None = None) -> None:
        self.cluster = cluster
        self.zk = cluster.zk
        self._allocate = allocate or cluster.new_ledger_ids
        self._ledgers: dict[str, list[PbLedgerInfo]] = {}  # topic -> its ledger list, as in memory

    # --- topics --------------------------------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        ledgers: int = 3,
        *,
        offloaded: Collection[int] = (),
        offload_failed: Collection[int] = (),
    ) -> list[int]:
        """A topic with ``ledgers`` closed ledgers (``offloaded`` / ``offload_failed``: their indexes,
        oldest first); returns their ids."""
        ids = self._allocate(ledgers)
        self.cluster.create_topic(
            topic,
            ids,
            offloaded=[ids[i] for i in offloaded],
            offload_failed=[ids[i] for i in offload_failed],
        )
        self.load(topic)
        return ids

    def load(self, topic: str) -> list[int]:
        """Take the topic's ledger list from the store, as a broker loading the topic does (a new owner,
        or this one after a restart): whatever only its memory held is gone."""
        name = _topic(topic)
        self._ledgers[name] = list(self._stored(name).ledgerInfo)
        return self.ledgers(name)

    def ledgers(self, topic: str) -> list[int]:
        """The ledger list in memory."""
        return [info.ledgerId for info in self._ledgers[_topic(topic)]]

    def stored_ledgers(self, topic: str) -> list[int]:
        """The ledger list in the store."""
        return [info.ledgerId for info in self._stored(_topic(topic)).ledgerInfo]

    def roll_over(self, topic: str, *, store_fails: bool = False) -> int:
        """Create the next ledger and store the list naming it (with whatever memory dropped meanwhile)."""
        name = _topic(topic)
        [ledger_id] = self._allocate(1)
        self.zk.create(
            ledger_path(ledger_id, self.cluster.ledgers_root),
            build_pulsar_ledger_metadata(
                managed_ledger_custom_metadata(managed_ledger_name(name)), state="OPEN", ctime=_now_ms()
            ),
            makepath=True,
        )
        self._ledgers[name].append(PbLedgerInfo(ledgerId=ledger_id, timestamp=_now_ms()))
        if not store_fails:
            self._store(name)
        return ledger_id

    def trim(
        self,
        topic: str,
        ledger_ids: Iterable[int],
        *,
        store_fails: bool = False,
        bk_delete_fails: Collection[int] = (),
        offload_delete_fails: Collection[int] = (),
    ) -> None:
        """Trim ``ledger_ids``: memory, then the store, then (only if the store took it) the deletes."""
        name = _topic(topic)
        drop = set(ledger_ids)
        dropped = [info for info in self._ledgers[name] if info.ledgerId in drop]
        self._ledgers[name] = [info for info in self._ledgers[name] if info.ledgerId not in drop]
        if store_fails:
            return  # "Failed to update the list of ledgers after trimming": nothing deleted, no rollback
        self._store(name)
        for info in dropped:
            released = info.offloadContext.bookkeeperDeleted if info.HasField("offloadContext") else False
            if not released and info.ledgerId not in bk_delete_fails:
                self._delete_ledger(info.ledgerId)
            if info.HasField("offloadContext") and info.ledgerId not in offload_delete_fails:
                self._delete_offload(info)

    def replace_offload(self, topic: str, ledger_id: int, *, cleanup_fails: bool = False) -> None:
        """The next attempt of a failed offload: a new uuid stored, then the old attempt's objects cleaned."""
        name = _topic(topic)
        [old] = [info for info in self._ledgers[name] if info.ledgerId == ledger_id]
        previous = PbLedgerInfo()
        previous.CopyFrom(old)
        self.cluster.replace_offload(name, ledger_id, complete=True)
        [stored] = [info for info in self._stored(name).ledgerInfo if info.ledgerId == ledger_id]
        old.CopyFrom(stored)
        if not cleanup_fails:
            self._delete_offload(previous)

    def delete_topic(
        self,
        topic: str,
        *,
        bk_delete_fails: Collection[int] = (),
        offload_delete_fails: Collection[int] = (),
    ) -> None:
        """Delete the topic: each cursor (ledger, znode), the ledgers and offloads, then its znode."""
        name = _topic(topic)
        path = self._ml_path(name)
        for cursor in self.zk.get_children(path):
            self.delete_cursor(
                name, cursor, delete_fails=self._cursor_ledger(name, cursor) in bk_delete_fails
            )
        for info in self._ledgers.pop(name):
            released = info.offloadContext.bookkeeperDeleted if info.HasField("offloadContext") else False
            if not released and info.ledgerId not in bk_delete_fails:
                self._delete_ledger(info.ledgerId)
            if info.HasField("offloadContext") and info.ledgerId not in offload_delete_fails:
                self._delete_offload(info)
        self.zk.delete(path)

    # --- cursors -------------------------------------------------------------------------------------------

    def add_cursor(self, topic: str, cursor: str) -> int:
        """A durable cursor with its first cursor ledger; returns the ledger's id."""
        [ledger_id] = self._allocate(1)
        self.cluster.add_cursor(_topic(topic), cursor, ledger_id)
        return ledger_id

    def switch_cursor(self, topic: str, cursor: str, *, delete_fails: bool = False) -> tuple[int, int]:
        """The cursor moves to a new ledger; returns (old, new)."""
        name = _topic(topic)
        old = self._cursor_ledger(name, cursor)
        [new] = self._allocate(1)
        self.cluster.add_cursor(name, cursor, new)
        if not delete_fails and old >= 0:
            self._delete_ledger(old)
        return old, new

    def delete_cursor(self, topic: str, cursor: str, *, delete_fails: bool = False) -> int:
        """The subscription is deleted: its cursor ledger, then its znode; returns the ledger's id."""
        name = _topic(topic)
        old = self._cursor_ledger(name, cursor)
        if not delete_fails and old >= 0:
            self._delete_ledger(old)
        self.zk.delete(f"{self._ml_path(name)}/{cursor}")
        return old

    # --- schemas -------------------------------------------------------------------------------------------

    def add_schema(self, schema_id: str, versions: int = 1) -> list[int]:
        ids = self._allocate(versions)
        self.cluster.add_schema(schema_id, ids)
        return ids

    def add_schema_version(self, schema_id: str) -> int:
        [ledger_id] = self._allocate(1)
        self.cluster.add_schema(schema_id, [*self.schema_ledgers(schema_id), ledger_id])
        return ledger_id

    def schema_ledgers(self, schema_id: str) -> list[int]:
        data, _ = self.zk.get(f"/schemas/{schema_id}")
        return sorted(schema_ledger_ids(parse_schema_locator(data)))

    def delete_schema(self, schema_id: str, *, delete_fails: Collection[int] = ()) -> list[int]:
        """Forced deletion: every ledger of the schema, then its locator; returns the ledgers."""
        ids = self.schema_ledgers(schema_id)
        for ledger_id in ids:
            if ledger_id not in delete_fails:
                self._delete_ledger(ledger_id)
        self.zk.delete(f"/schemas/{schema_id}")
        return ids

    # --- helpers -------------------------------------------------------------------------------------------

    @staticmethod
    def _ml_path(name: str) -> str:
        return f"/managed-ledgers/{managed_ledger_name(name)}"

    def _stored(self, name: str) -> ManagedLedgerInfo:
        data, _ = self.zk.get(self._ml_path(name))
        return parse_managed_ledger_info(data or b"")

    def _store(self, name: str) -> None:
        """``asyncUpdateLedgerIds``: the list in memory, written over the stored one (versioned)."""
        path = self._ml_path(name)
        data, stat = self.zk.get(path)
        info = parse_managed_ledger_info(data or b"")
        del info.ledgerInfo[:]
        info.ledgerInfo.extend(self._ledgers[name])
        self.zk.set(path, serialize_managed_ledger_info(info), version=stat.version)

    def _cursor_ledger(self, name: str, cursor: str) -> int:
        data, _ = self.zk.get(f"{self._ml_path(name)}/{cursor}")
        info = parse_managed_cursor_info(data or b"")
        return info.cursorsLedgerId if data and info.HasField("cursorsLedgerId") else -1

    def _delete_ledger(self, ledger_id: int) -> None:
        with contextlib.suppress(NoNodeError):
            self.zk.delete(ledger_path(ledger_id, self.cluster.ledgers_root))

    def _delete_offload(self, info: PbLedgerInfo) -> None:
        ctx = ledger_info_to_request_context(info).offload_context
        if ctx is None:
            return
        for bucket, key in offload_keys_for_context(ctx, info.ledgerId, self.cluster.bucket):
            self.cluster.s3.delete_object(Bucket=bucket, Key=key)
