"""The watcher's full reads: every record of Pulsar's metadata into a snapshot, BookKeeper's ledger ids, and
the metadata of the ledgers nothing references.

All reads go through :class:`ledger_deletion.adapters.zk_reads.ZkReads`, the batched reads reconcile's extract
uses (multi-reads of hundreds of znodes per request on ZooKeeper 3.6+), on the watcher's own sessions. The
walk of Pulsar's tree is the extract's (``persistent`` directories at depth 3 or 4, their managed ledgers,
their cursors; schema namespaces), but it diffs each record into the watcher's snapshot as it reads it, where
the extract flattens them into reference rows (and the extract needs pyarrow, which the watcher does not).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from ledger_deletion.adapters.zk_reads import ZkReads
from ledger_deletion.errors import MetadataFormatError
from ledger_deletion.formats.bk_metadata import LedgerMetadata, parse_ledger_metadata
from ledger_deletion.formats.bk_paths import LEDGER_PARENT_PATTERN, is_special_znode, ledger_path
from ledger_deletion.watch.paths import (
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    CursorRecord,
    SchemaRecord,
    classify,
)
from ledger_deletion.watch.snapshot import Snapshot
from ledger_deletion.watch.suspects import Suspect

__all__ = [
    "list_bk_ledger_ids",
    "read_bk_metadata",
    "read_new_children",
    "read_pulsar_metadata",
    "read_records",
    "sync_pulsar_metadata",
]

_PERSISTENT = "persistent"
_MAX_DEPTH = 4  # tenant/cluster/namespace/persistent: the deepest a V1 name puts its ``persistent`` level
_DIGITS = re.compile(r"[0-9]{4}")
_LEAF = re.compile(r"L[0-9]{4}")
_CHUNK = 5000  # records per step of the walk: a few MiB of raw records at most
_LIST_BATCH = 500  # directories listed per step


def read_pulsar_metadata(reads: ZkReads) -> Snapshot:
    """A snapshot of every managed ledger, cursor and schema locator in Pulsar's metadata store."""
    snapshot = Snapshot()
    sync_pulsar_metadata(reads, snapshot)
    snapshot.rejected.clear()  # nothing was compared: a first read leaves no suspect
    return snapshot


def sync_pulsar_metadata(reads: ZkReads, snapshot: Snapshot) -> list[Suspect]:
    """Read every record of Pulsar's metadata store into ``snapshot`` in place, and return the suspects of
    every change since it was last read.

    The walk goes a few thousand records at a time (``_CHUNK``): each read record is diffed and stored at
    once, and each directory's listing forgets the records it no longer names, so the only copy of the
    state is the snapshot itself, plus one chunk of raw records and the current listings.
    """
    suspects: list[Suspect] = []
    level, persistent_dirs = [MANAGED_LEDGERS_ROOT], []
    walked: set[str] = set()
    for _ in range(_MAX_DEPTH):
        deeper = []
        for parent, children in reads.children_many(level):
            walked.add(parent)
            for child in children:
                path = f"{parent}/{child}"
                if child == _PERSISTENT and parent != MANAGED_LEDGERS_ROOT:
                    persistent_dirs.append(path)
                else:
                    deeper.append(path)
        level = deeper
    topic_dirs: set[str] = set()
    for group in _groups(reads, persistent_dirs):
        ml_paths = [f"{d}/{c}" for d, part, _ in group for c in part]
        cursors = dict(reads.children_many(ml_paths))
        cursor_paths = [f"{ml}/{c}" for ml in ml_paths for c in cursors.get(ml, ())]
        found = {path: data for path, data, _ in reads.get_many(ml_paths + cursor_paths)}
        for ml in ml_paths:
            listed = cursors.get(ml, [])
            suspects += snapshot.forget_unlisted(ml, listed)
            for cursor in listed:
                suspects += snapshot.apply(f"{ml}/{cursor}", found.get(f"{ml}/{cursor}"))
            suspects += snapshot.apply(ml, found.get(ml))  # None: deleted since it was listed
        for directory, _, whole in group:
            topic_dirs.add(directory)
            if whole is not None:
                suspects += snapshot.forget_unlisted(directory, whole)
    tenants = [f"{SCHEMAS_ROOT}/{t}" for t in reads.children(SCHEMAS_ROOT)]
    namespaces = [f"{t}/{ns}" for t, children in reads.children_many(tenants) for ns in children]
    schema_dirs: set[str] = set()
    for group in _groups(reads, namespaces):
        schema_paths = [f"{d}/{c}" for d, part, _ in group for c in part]
        found = {path: data for path, data, _ in reads.get_many(schema_paths)}
        for path in schema_paths:
            suspects += snapshot.apply(path, found.get(path))
        for directory, _, whole in group:
            schema_dirs.add(directory)
            if whole is not None:
                suspects += snapshot.forget_unlisted(directory, whole)
    suspects += snapshot.forget_outside(topic_dirs, schema_dirs)
    snapshot.directories = {*walked, *topic_dirs, SCHEMAS_ROOT, *tenants, *schema_dirs}
    return suspects


def read_new_children(reads: ZkReads, snapshot: Snapshot, parents: Sequence[str]) -> list[Suspect]:
    """After a catch-up reported that ``parents`` gained or lost children: read what the snapshot does not
    know below them (new tenants, namespaces, topics, cursors, schemas, and everything below those) into
    it. What left them fires its own deletion event."""
    suspects: list[Suspect] = []
    level = [
        f"{parent}/{child}"
        for parent, children in reads.children_many(parents)
        for child in children
        if child not in snapshot.known_children(parent)
    ]
    while level:
        records = [path for path in level if classify(path) is not None]
        found = {path: data for path, data, _ in reads.get_many(records)}
        for path in level:
            if classify(path) is None:
                snapshot.directories.add(path)
            elif path in found:
                suspects += snapshot.apply(path, found[path])
        parents_next = [p for p in level if not isinstance(classify(p), CursorRecord | SchemaRecord)]
        level = [f"{p}/{c}" for p, children in reads.children_many(parents_next) for c in children]
    return suspects


_Part = tuple[str, list[str], frozenset[str] | None]


def _groups(reads: ZkReads, directories: Sequence[str]) -> Iterator[list[_Part]]:
    """The directories' listings in groups of at most ``_CHUNK`` children: ``(directory, some of its
    children, all of them)``, the last element set on a directory's last part only (a big directory is
    split across groups, and what its listing no longer names is forgotten once all of it was read)."""
    group: list[_Part] = []
    size = 0
    for start in range(0, len(directories), _LIST_BATCH):
        for directory, children in reads.children_many(directories[start : start + _LIST_BATCH]):
            whole = frozenset(children)
            for at in range(0, max(len(children), 1), _CHUNK):
                part = children[at : at + _CHUNK]
                last = at + _CHUNK >= len(children)
                group.append((directory, part, whole if last else None))
                size += len(part)
                if size >= _CHUNK:
                    yield group
                    group, size = [], 0
    if group:
        yield group


def read_records(reads: ZkReads, paths: Sequence[str]) -> dict[str, bytes | None]:
    """What each path holds now, None for those that do not exist."""
    found: dict[str, bytes | None] = dict.fromkeys(paths)
    for path, data, _ in reads.get_many(list(paths)):
        found[path] = data
    return found


def list_bk_ledger_ids(reads: ZkReads, root: str) -> list[int]:
    """Every ledger id under BookKeeper's ledgers root, from child lists alone (one request per 10,000
    ledgers), as ``HierarchicalLedgerManager`` iterates them: ``/<2>/<4>/L<4>`` then
    ``/<3>/<4>/<4>/<4>/L<4>``."""
    root = root.rstrip("/")
    tops = [t for t in reads.children(root) if not is_special_znode(t) and LEDGER_PARENT_PATTERN.fullmatch(t)]
    ids: list[int] = []
    for top in tops:
        levels = 1 if len(top) == 2 else 3  # four-digit levels between the top and the L<4> leaves
        parents = [f"{root}/{top}"]
        for _ in range(levels):
            parents = [
                f"{p}/{c}"
                for p, children in reads.children_many(parents)
                for c in children
                if _DIGITS.fullmatch(c)
            ]
        for parent, leaves in reads.children_many(parents):
            ids.extend(_ids(root, parent, leaves))
    return ids


def _ids(root: str, parent: str, leaves: Sequence[str]) -> Iterator[int]:
    digits = parent[len(root) + 1 :].replace("/", "")
    for leaf in leaves:
        if _LEAF.fullmatch(leaf):
            ledger_id = int(digits + leaf[1:])
            # One canonical path per id: a small id spelled in the long layout is no ledger BK would read.
            if ledger_path(ledger_id, root) == f"{parent}/{leaf}":
                yield ledger_id


def read_bk_metadata(reads: ZkReads, root: str, ids: Sequence[int]) -> dict[int, LedgerMetadata]:
    """The metadata of each ledger that still exists and parses (one that does not is nobody's to request)."""
    by_path = {ledger_path(ledger_id, root): ledger_id for ledger_id in ids}
    found: dict[int, LedgerMetadata] = {}
    for path, data, _ in reads.get_many(list(by_path)):
        try:
            found[by_path[path]] = parse_ledger_metadata(data)
        except MetadataFormatError:
            continue
    return found
