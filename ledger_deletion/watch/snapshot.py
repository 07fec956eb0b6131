"""What the watcher knows Pulsar references, record by record, and the suspects each change leaves.

A managed ledger is kept as the bytes of its record (what the diff needs is all there: ledger ids and
offload contexts; and nothing is smaller than the protobuf encoding itself), a cursor as its
``cursorsLedgerId``, a schema as its locator's ledger ids. A record whose new content does not decode
keeps its last decoded content, so an unreadable write never reads as "every ledger left": the next
readable one is diffed against the last known.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.managed_ledger import (
    ManagedLedgerInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.watch.diff import (
    bk_copy_released,
    cursor_changes,
    managed_ledger_changes,
    schema_changes,
)
from ledger_deletion.watch.paths import (
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    CursorRecord,
    ManagedLedgerRecord,
    SchemaRecord,
    classify,
)
from ledger_deletion.watch.suspects import Suspect

__all__ = ["Snapshot"]

_NO_LEDGER = -1


@dataclass
class Snapshot:
    """Pulsar's references as last read. ``rejected`` collects suspects the service would refuse (names it
    does not accept), for the caller to report; ``unreadable`` the paths whose last content did not decode."""

    managed_ledgers: dict[str, bytes] = field(default_factory=dict)
    cursors: dict[tuple[str, str], int] = field(default_factory=dict)
    schemas: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unreadable: set[str] = field(default_factory=set)
    rejected: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return len(self.managed_ledgers) + len(self.cursors) + len(self.schemas)

    # --- filling and following ----------------------------------------------------------------------------

    def load(self, path: str, data: bytes) -> None:
        """Record what a full read found at ``path`` (no diff: there is nothing to compare with)."""
        self._set(path, data)

    def apply(self, path: str, data: bytes | None) -> list[Suspect]:
        """The znode at ``path`` now holds ``data`` (None: it was deleted): the suspects the change leaves."""
        record = classify(path)
        if isinstance(record, ManagedLedgerRecord):
            before = self.managed_ledgers.get(record.name)
            if before is not None and before == data:
                return []  # read again unchanged (two events of one round, a write of the same list)
            stored = self._set(path, data)
            return (
                self._ml_changes(record.name, before, self.managed_ledgers.get(record.name)) if stored else []
            )
        if isinstance(record, CursorRecord):
            key = (record.managed_ledger, record.cursor)
            old = self.cursors.get(key)
            stored = self._set(path, data)
            return cursor_changes(*key, old, self.cursors.get(key), self.rejected) if stored else []
        if isinstance(record, SchemaRecord):
            ids = self.schemas.get(record.schema_id)
            stored = self._set(path, data)
            new = self.schemas.get(record.schema_id)
            return schema_changes(record.schema_id, ids, new, self.rejected) if stored else []
        return []

    def resync(self, fresh: Snapshot) -> list[Suspect]:
        """Become ``fresh`` (a full read) and return the suspects of every record that changed meanwhile.

        A record ``fresh`` could not decode keeps what this snapshot knew of it.
        """
        out: list[Suspect] = []
        for name, data in self.managed_ledgers.items():
            path = f"{MANAGED_LEDGERS_ROOT}/{name}"
            if path in fresh.unreadable:
                fresh.managed_ledgers[name] = data
            elif fresh.managed_ledgers.get(name) != data:
                out += self._ml_changes(name, data, fresh.managed_ledgers.get(name))
        for (ml_name, cursor), ledger_id in self.cursors.items():
            if f"{MANAGED_LEDGERS_ROOT}/{ml_name}/{cursor}" in fresh.unreadable:
                fresh.cursors[(ml_name, cursor)] = ledger_id
            elif fresh.cursors.get((ml_name, cursor)) != ledger_id:
                now = fresh.cursors.get((ml_name, cursor))
                out += cursor_changes(ml_name, cursor, ledger_id, now, self.rejected)
        for schema_id, ids in self.schemas.items():
            if f"{SCHEMAS_ROOT}/{schema_id}" in fresh.unreadable:
                fresh.schemas[schema_id] = ids
            elif fresh.schemas.get(schema_id) != ids:
                out += schema_changes(schema_id, ids, fresh.schemas.get(schema_id), self.rejected)
        self.managed_ledgers, self.cursors, self.schemas = (
            fresh.managed_ledgers,
            fresh.cursors,
            fresh.schemas,
        )
        self.unreadable = fresh.unreadable
        self.rejected += fresh.rejected
        return out

    # --- what is referenced -------------------------------------------------------------------------------

    def bk_referenced(self) -> set[int]:
        """Every ledger id whose BookKeeper ledger a record references.

        A ledger listed only as an offload whose BookKeeper copy the broker gave up (``bookkeeperDeleted``)
        is not among them: a BookKeeper ledger of that id is the copy whose delete failed.
        """
        ids: set[int] = set()
        for data in self.managed_ledgers.values():
            ids.update(i.ledgerId for i in _ml(data).ledgerInfo if not bk_copy_released(i))
        ids.update(ledger_id for ledger_id in self.cursors.values() if ledger_id != _NO_LEDGER)
        for ledger_ids in self.schemas.values():
            ids.update(ledger_ids)
        return ids

    def newest_listed(self, ml_name: str) -> int | None:
        """The highest ledger id the managed ledger lists (-1 for none), None when there is no record."""
        data = self.managed_ledgers.get(ml_name)
        if data is None:
            return None
        return max((i.ledgerId for i in _ml(data).ledgerInfo), default=_NO_LEDGER)

    def newest_schema_ledger(self, schema_id: str) -> int | None:
        ids = self.schemas.get(schema_id)
        return None if ids is None else max(ids, default=_NO_LEDGER)

    # --- internals ----------------------------------------------------------------------------------------

    def _set(self, path: str, data: bytes | None) -> bool:
        """Store what ``path`` holds now; False (nothing stored) when it does not decode."""
        record = classify(path)
        if record is None:
            return False
        try:
            if isinstance(record, ManagedLedgerRecord):
                name = sys.intern(record.name)  # shared with the keys of its cursors
                if data is None:
                    self.managed_ledgers.pop(name, None)
                else:
                    parse_managed_ledger_info(data)
                    self.managed_ledgers[name] = bytes(data)
            elif isinstance(record, CursorRecord):
                key = (sys.intern(record.managed_ledger), record.cursor)
                if data is None:
                    self.cursors.pop(key, None)
                else:
                    info = parse_managed_cursor_info(data)
                    # Empty bytes: the cursor's znode exists before its first update, with no ledger yet.
                    has_ledger = bool(data) and info.HasField("cursorsLedgerId")
                    self.cursors[key] = info.cursorsLedgerId if has_ledger else _NO_LEDGER
            elif data is None:
                self.schemas.pop(record.schema_id, None)
            else:
                ids = schema_ledger_ids(parse_schema_locator(data))
                self.schemas[record.schema_id] = tuple(sorted(ids))
        except MetadataFormatError:
            self.unreadable.add(path)
            return False
        self.unreadable.discard(path)
        return True

    def _ml_changes(self, name: str, before: bytes | None, after: bytes | None) -> list[Suspect]:
        old = None if before is None else _ml(before)
        new = None if after is None else _ml(after)
        return managed_ledger_changes(name, old, new, self.rejected)


def _ml(data: bytes) -> ManagedLedgerInfo:
    """A stored record: it decoded when it was stored, so it decodes again."""
    return parse_managed_ledger_info(data)
