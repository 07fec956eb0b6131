"""What the watcher knows Pulsar references, record by record, and the suspects each change leaves.

Sized for a million topics: a managed ledger is kept as its references alone (:mod:`.compact`: ledger ids
delta-coded, each offload's 16-byte uuid, flags and a shared driver slot), its cursors' ``cursorsLedgerId``
appended to the same bytes, a schema as its locator's ledger ids delta-coded. Records are grouped by their
parent: one dict per namespace (``tenant/ns/persistent``, ``tenant/ns`` for schemas) keyed by the local
name, so the namespace part of a million names is stored once per namespace.

A record whose new content does not decode keeps its last decoded content, so an unreadable write never
reads as "every ledger left": the next readable one is diffed against the last known.

A resync updates the snapshot in place, record by record as the walk reads them (:meth:`Snapshot.apply`),
then forgets what each listing no longer names (:meth:`Snapshot.forget_unlisted`,
:meth:`Snapshot.forget_outside`): there is never a second snapshot beside this one.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.managed_ledger import (
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.watch import compact
from ledger_deletion.watch.diff import cursor_changes, managed_ledger_changes, schema_changes
from ledger_deletion.watch.paths import (
    MANAGED_LEDGERS_ROOT,
    ROOTS,
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

    unreadable: set[str] = field(default_factory=set)
    rejected: list[str] = field(default_factory=list)
    # The znodes above the records (roots, tenants, namespaces, ``persistent``) as last walked or watched:
    # a catch-up asks which of them gained children, empty ones included.
    directories: set[str] = field(default_factory=set)
    # tenant/ns/persistent -> local name -> [managed ledger part][cursors] (see _pack)
    _topics: dict[str, dict[str, bytes]] = field(default_factory=dict, repr=False)
    # tenant/ns -> topic -> the locator's ledger ids, sorted, delta varints
    _schemas: dict[str, dict[str, bytes]] = field(default_factory=dict, repr=False)
    _drivers: compact.Drivers = field(default_factory=compact.Drivers, repr=False)
    _counts: list[int] = field(default_factory=lambda: [0, 0, 0], repr=False)  # mls, cursors, schemas

    @property
    def records(self) -> int:
        return sum(self._counts)

    @property
    def managed_ledger_count(self) -> int:
        return self._counts[0]

    @property
    def cursor_count(self) -> int:
        return self._counts[1]

    @property
    def schema_count(self) -> int:
        return self._counts[2]

    @property
    def managed_ledgers(self) -> frozenset[str]:
        """The managed-ledger names held (built on demand: for tests and small snapshots)."""
        return frozenset(name for name, _ in self._ml_entries())

    def known(self, path: str) -> object:
        """What the snapshot holds of the record at ``path``, comparable across snapshots (None: nothing):
        a managed ledger's references as a protobuf's bytes, a cursor's ledger id, a schema's ledger ids."""
        record = classify(path)
        if isinstance(record, ManagedLedgerRecord):
            ml = self._ml_part(record.name)
            return (
                None
                if ml is None
                else compact.decode(ml, self._drivers).SerializeToString(deterministic=True)
            )
        if isinstance(record, CursorRecord):
            return self.cursor_ledger(record.managed_ledger, record.cursor)
        if isinstance(record, SchemaRecord):
            ids = self._schema_ids(record.schema_id)
            return None if ids is None else tuple(ids)
        return None

    # --- filling and following ----------------------------------------------------------------------------

    def load(self, path: str, data: bytes) -> None:
        """Record what a full read found at ``path`` (no diff: there is nothing to compare with)."""
        mark = len(self.rejected)
        self.apply(path, data)
        del self.rejected[mark:]  # nothing to compare with: whatever a diff found is not this read's

    def apply(self, path: str, data: bytes | None) -> list[Suspect]:
        """The znode at ``path`` now holds ``data`` (None: it was deleted): the suspects the change leaves.

        A resync feeds every record it reads through here too, so the snapshot is updated in place.
        """
        record = classify(path)
        try:
            if isinstance(record, ManagedLedgerRecord):
                return self._apply_ml(record.name, data)
            if isinstance(record, CursorRecord):
                return self._apply_cursor(record.managed_ledger, record.cursor, data)
            if isinstance(record, SchemaRecord):
                return self._apply_schema(record.schema_id, data)
        except MetadataFormatError:
            self.unreadable.add(path)
            return []
        return []

    def forget_unlisted(self, parent: str, listed: Collection[str]) -> list[Suspect]:
        """A resync listed ``parent``'s children: every record the snapshot holds directly below it that
        the listing does not name was deleted meanwhile (a topic's cursors before the topic)."""
        # A record that never decoded has no entry: its path alone goes.
        below = {p for p in self.unreadable if p.rpartition("/")[0] == parent}
        self.unreadable -= {p for p in below if p.rpartition("/")[2] not in listed}
        record = classify(parent)
        if isinstance(record, ManagedLedgerRecord):  # its cursors
            prefix, local = _split(record.name)
            entry = self._topics.get(prefix, {}).get(local)
            if entry is None:
                return []
            gone = [c for c in _unpack(entry)[1] if c not in listed]
            return [s for c in gone for s in self.apply(f"{parent}/{c}", None)]
        if parent.startswith(MANAGED_LEDGERS_ROOT + "/"):
            prefix = parent[len(MANAGED_LEDGERS_ROOT) + 1 :]
            names = [local for local in self._topics.get(prefix, {}) if local not in listed]
            return [s for local in names for s in self._delete_topic(f"{prefix}/{local}")]
        if parent.startswith(SCHEMAS_ROOT + "/"):
            prefix = parent[len(SCHEMAS_ROOT) + 1 :]
            names = [local for local in self._schemas.get(prefix, {}) if local not in listed]
            return [s for local in names for s in self.apply(f"{parent}/{local}", None)]
        return []

    def forget_outside(self, topic_dirs: Collection[str], schema_dirs: Collection[str]) -> list[Suspect]:
        """A resync walked these directories (``/managed-ledgers/<tenant>/<ns>/persistent``,
        ``/schemas/<tenant>/<ns>``): every record held under another one was deleted with it."""
        walked = (*topic_dirs, *schema_dirs)
        self.unreadable = {p for p in self.unreadable if any(p.startswith(d + "/") for d in walked)}
        out: list[Suspect] = []
        for prefix in [p for p in self._topics if f"{MANAGED_LEDGERS_ROOT}/{p}" not in topic_dirs]:
            for local in list(self._topics.get(prefix, {})):
                out += self._delete_topic(f"{prefix}/{local}")
        for prefix in [p for p in self._schemas if f"{SCHEMAS_ROOT}/{p}" not in schema_dirs]:
            for local in list(self._schemas.get(prefix, {})):
                out += self.apply(f"{SCHEMAS_ROOT}/{prefix}/{local}", None)
        return out

    def resync(self, fresh: Snapshot) -> list[Suspect]:
        """Become ``fresh`` (a full read held beside this one) and return the suspects of every record that
        changed meanwhile. A record ``fresh`` could not decode keeps what this snapshot knew of it.

        The watcher resyncs in place instead (``apply`` and ``forget_*``, no second snapshot); this is the
        same diff, for a read already held whole.
        """
        out: list[Suspect] = []
        for name, ml in list(self._ml_entries()):
            path = f"{MANAGED_LEDGERS_ROOT}/{name}"
            for cursor in list(ml[1]):
                cpath = f"{path}/{cursor}"
                if cpath not in fresh.unreadable and fresh.cursor_ledger(name, cursor) is None:
                    out += self.apply(cpath, None)
            if ml[0] is not None and path not in fresh.unreadable and fresh._ml_part(name) is None:
                out += self._apply_ml(name, None)
        for schema_id in [s for s, _ in self._schema_entries()]:
            path = f"{SCHEMAS_ROOT}/{schema_id}"
            if path not in fresh.unreadable and fresh._schema_ids(schema_id) is None:
                out += self.apply(path, None)
        for name, (part, cursors) in fresh._ml_entries():
            if part is not None:
                out += self._store_ml(name, part)
            for cursor, ledger_id in cursors.items():
                out += self._store_cursor(name, cursor, ledger_id)
        for schema_id, ids in fresh._schema_entries():
            out += self._store_schema(schema_id, ids)
        self.unreadable = set(fresh.unreadable)
        self.rejected += fresh.rejected
        return out

    # --- catching up --------------------------------------------------------------------------------------

    def watch_paths(self) -> tuple[Iterator[str], Iterator[str]]:
        """What a catch-up asks about: every record held (and every unreadable one), as data watches; every
        directory and managed ledger (whose children are its cursors), as child watches. Generated, not
        listed: a million paths are never held at once."""

        def records() -> Iterator[str]:
            for name, (ml, cursors) in self._ml_entries():
                path = f"{MANAGED_LEDGERS_ROOT}/{name}"
                yield from (f"{path}/{cursor}" for cursor in cursors)
                if ml is not None:
                    yield path
            for prefix, schemas in self._schemas.items():
                yield from (f"{SCHEMAS_ROOT}/{prefix}/{local}" for local in schemas)
            yield from sorted(self.unreadable)

        def parents() -> Iterator[str]:
            yield from sorted(set(ROOTS) | self.directories)
            for prefix, entries in self._topics.items():
                yield from (f"{MANAGED_LEDGERS_ROOT}/{prefix}/{local}" for local in entries)
            for path in sorted(self.unreadable):
                if isinstance(classify(path), ManagedLedgerRecord):
                    yield path

        return records(), parents()

    def known_children(self, parent: str) -> set[str]:
        """The children of ``parent`` the snapshot knows of: directories, records, unreadable records."""
        # Any path held below ``parent`` names the child it is under (a namespace's ``persistent`` its
        # namespace too, should the walk not have held that one).
        start = len(parent) + 1
        held = self.directories | self.unreadable
        names = {p[start:].split("/", 1)[0] for p in held if p.startswith(parent + "/")}
        record = classify(parent)
        if isinstance(record, ManagedLedgerRecord):
            prefix, local = _split(record.name)
            entry = self._topics.get(prefix, {}).get(local)
            return names | (set() if entry is None else set(_unpack(entry)[1]))
        if parent.startswith(MANAGED_LEDGERS_ROOT + "/"):
            names |= set(self._topics.get(parent[len(MANAGED_LEDGERS_ROOT) + 1 :], {}))
        elif parent.startswith(SCHEMAS_ROOT + "/"):
            names |= set(self._schemas.get(parent[len(SCHEMAS_ROOT) + 1 :], {}))
        return names

    def directory_event(self, path: str, created: bool) -> None:
        """A znode that holds no record was created or deleted (with what was below it)."""
        if created:
            self.directories.add(path)
        else:
            self.directories -= {d for d in self.directories if d == path or d.startswith(path + "/")}

    # --- what is referenced -------------------------------------------------------------------------------

    def bk_referenced(self) -> set[int]:
        """Every ledger id whose BookKeeper ledger a record references.

        A ledger listed only as an offload whose BookKeeper copy the broker gave up (``bookkeeperDeleted``)
        is not among them: a BookKeeper ledger of that id is the copy whose delete failed.
        """
        ids: set[int] = set()
        for entries in self._topics.values():
            for entry in entries.values():
                ml, cursors = _unpack(entry)
                if ml is not None:
                    ids.update(ref.ledger_id for ref in compact.ledgers(ml) if not ref.released)
                ids.update(ledger_id for ledger_id in cursors.values() if ledger_id != _NO_LEDGER)
        for schemas in self._schemas.values():
            for blob in schemas.values():
                ids.update(_read_ids(blob))
        return ids

    def newest_listed(self, ml_name: str) -> int | None:
        """The highest ledger id the managed ledger lists (-1 for none), None when there is no record."""
        ml = self._ml_part(ml_name)
        return None if ml is None else compact.newest(ml)

    def cursor_ledger(self, ml_name: str, cursor: str) -> int | None:
        """The cursor's stored ``cursorsLedgerId`` (-1: none), None when there is no such cursor."""
        prefix, local = _split(ml_name)
        entry = self._topics.get(prefix, {}).get(local)
        return None if entry is None else _unpack(entry)[1].get(cursor)

    def newest_schema_ledger(self, schema_id: str) -> int | None:
        ids = self._schema_ids(schema_id)
        return None if ids is None else max(ids, default=_NO_LEDGER)

    # --- internals ----------------------------------------------------------------------------------------

    def _ml_entries(self) -> Iterator[tuple[str, tuple[bytes | None, dict[str, int]]]]:
        for prefix, entries in self._topics.items():
            for local, entry in entries.items():
                yield f"{prefix}/{local}", _unpack(entry)

    def _schema_entries(self) -> Iterator[tuple[str, list[int]]]:
        for prefix, schemas in self._schemas.items():
            for local, blob in schemas.items():
                yield f"{prefix}/{local}", _read_ids(blob)

    def _ml_part(self, ml_name: str) -> bytes | None:
        prefix, local = _split(ml_name)
        entry = self._topics.get(prefix, {}).get(local)
        return None if entry is None else _unpack(entry)[0]

    def _schema_ids(self, schema_id: str) -> list[int] | None:
        prefix, local = _split(schema_id)
        blob = self._schemas.get(prefix, {}).get(local)
        return None if blob is None else _read_ids(blob)

    def _apply_ml(self, name: str, data: bytes | None) -> list[Suspect]:
        """Raises MetadataFormatError (nothing stored) for content that does not decode."""
        path = f"{MANAGED_LEDGERS_ROOT}/{name}"
        new = None if data is None else compact.encode(parse_managed_ledger_info(data), self._drivers)
        self.unreadable.discard(path)
        return self._store_ml(name, new)

    def _store_ml(self, name: str, new: bytes | None) -> list[Suspect]:
        prefix, local = _split(name)
        entries = self._topics.get(prefix)
        entry = None if entries is None else entries.get(local)
        old, cursors = (None, {}) if entry is None else _unpack(entry)
        if old == new:
            return []  # read again unchanged (two events of one round, a write of the same list)
        self._counts[0] += (new is not None) - (old is not None)
        self._put_topic(prefix, local, new, cursors)
        if old is None:
            return []
        before = compact.decode(old, self._drivers)
        after = None if new is None else compact.decode(new, self._drivers)
        return managed_ledger_changes(name, before, after, self.rejected)

    def _apply_cursor(self, ml_name: str, cursor: str, data: bytes | None) -> list[Suspect]:
        ledger_id: int | None = None
        if data is not None:
            info = parse_managed_cursor_info(data)
            # Empty bytes: the cursor's znode exists before its first update, with no ledger yet.
            has_ledger = bool(data) and info.HasField("cursorsLedgerId")
            ledger_id = info.cursorsLedgerId if has_ledger else _NO_LEDGER
        self.unreadable.discard(f"{MANAGED_LEDGERS_ROOT}/{ml_name}/{cursor}")
        return self._store_cursor(ml_name, cursor, ledger_id)

    def _store_cursor(self, ml_name: str, cursor: str, ledger_id: int | None) -> list[Suspect]:
        prefix, local = _split(ml_name)
        entries = self._topics.get(prefix)
        entry = None if entries is None else entries.get(local)
        ml, cursors = (None, {}) if entry is None else _unpack(entry)
        old = cursors.get(cursor)
        if old == ledger_id:
            return []
        self._counts[1] += (ledger_id is not None) - (old is not None)
        if ledger_id is None:
            del cursors[cursor]
        else:
            cursors[cursor] = ledger_id
        self._put_topic(prefix, local, ml, cursors)
        return cursor_changes(ml_name, cursor, old, ledger_id, self.rejected)

    def _apply_schema(self, schema_id: str, data: bytes | None) -> list[Suspect]:
        ids = None if data is None else sorted(schema_ledger_ids(parse_schema_locator(data)))
        self.unreadable.discard(f"{SCHEMAS_ROOT}/{schema_id}")
        return self._store_schema(schema_id, ids)

    def _store_schema(self, schema_id: str, ids: list[int] | None) -> list[Suspect]:
        prefix, local = _split(schema_id)
        old = self._schema_ids(schema_id)
        if old == ids:
            return []
        self._counts[2] += (ids is not None) - (old is not None)
        if ids is None:
            schemas = self._schemas[prefix]
            del schemas[local]
            if not schemas:
                del self._schemas[prefix]
        else:
            self._schemas.setdefault(sys.intern(prefix), {})[local] = _write_ids(ids)
        return schema_changes(schema_id, old, ids, self.rejected)

    def _put_topic(self, prefix: str, local: str, ml: bytes | None, cursors: dict[str, int]) -> None:
        if ml is None and not cursors:
            entries = self._topics.get(prefix)
            if entries is not None:
                entries.pop(local, None)
                if not entries:
                    del self._topics[prefix]
            return
        self._topics.setdefault(sys.intern(prefix), {})[local] = _pack(ml, cursors)

    def _delete_topic(self, name: str) -> list[Suspect]:
        """The topic's znode and its cursors' are gone: its cursors first, as the broker deletes them."""
        path = f"{MANAGED_LEDGERS_ROOT}/{name}"
        prefix, local = _split(name)
        entry = self._topics.get(prefix, {}).get(local)
        if entry is None:
            return []
        out = [s for c in list(_unpack(entry)[1]) for s in self.apply(f"{path}/{c}", None)]
        return out + self.apply(path, None)


def _split(name: str) -> tuple[str, str]:
    prefix, _, local = name.rpartition("/")
    return prefix, local


def _pack(ml: bytes | None, cursors: dict[str, int]) -> bytes:
    """``[len(ml) + 1, or 0: no record][ml][per cursor: len(name), name, cursorsLedgerId + 1]``."""
    out = bytearray()
    if ml is None:
        out.append(0)
    else:
        compact.write_varint(out, len(ml) + 1)
        out += ml
    for cursor, ledger_id in cursors.items():
        name = cursor.encode()
        compact.write_varint(out, len(name))
        out += name
        compact.write_varint(out, ledger_id + 1)
    return bytes(out)


def _unpack(entry: bytes) -> tuple[bytes | None, dict[str, int]]:
    length, pos = compact.read_varint(entry, 0)
    ml = None if length == 0 else entry[pos : pos + length - 1]
    pos += max(length - 1, 0)
    cursors: dict[str, int] = {}
    while pos < len(entry):
        size, pos = compact.read_varint(entry, pos)
        name = entry[pos : pos + size].decode()
        ledger_id, pos = compact.read_varint(entry, pos + size)
        cursors[name] = ledger_id - 1
    return ml, cursors


def _write_ids(ids: list[int]) -> bytes:
    out, previous = bytearray(), 0
    for ledger_id in ids:  # sorted: the deltas are >= 0
        compact.write_varint(out, ledger_id - previous)
        previous = ledger_id
    return bytes(out)


def _read_ids(blob: bytes) -> list[int]:
    ids, pos, previous = [], 0, 0
    while pos < len(blob):
        delta, pos = compact.read_varint(blob, pos)
        previous += delta
        ids.append(previous)
    return ids
