"""Extract: a parallel, restartable snapshot of BookKeeper, Pulsar metadata and offload buckets as Parquet.

Six tables, each a directory of Parquet part files (one per work unit) under the extract directory:

* ``bk_ledger_ids`` — the id of every ledger znode under the ledgers root (special znodes skipped), from
  the child lists of the hierarchical ledger paths alone: one ``getChildren`` per ``/<2>/<4>`` parent
  (legacy layout, up to 10,000 ledgers each) and per ``/<3>/<4>/<4>/<4>`` parent (long layout), the way
  BookKeeper's own garbage collector lists them. Units: prefixes ``/<2>/<4>`` and ``/<3>/<4>/<4>``.
* ``references`` — every ledger id Pulsar metadata points at: managed-ledger ledger lists, terminated
  position, cursor ledgers, mark-delete and individually deleted positions, the compacted ledger
  (``CompactedTopicLedger`` property of the ``__compaction`` cursor), schema locator ledgers. A record that
  does not decode yields a row of kind ``unreadable`` naming its owner, so nothing it might reference is
  ever deleted. A ledger-list entry whose offload is complete and whose BookKeeper copy the broker marked
  deleted (``bookkeeperDeleted``) is of kind ``offloaded-bk-deleted`` (:data:`OFFLOADED_BK_DELETED`), not
  ``data``: it keeps the ledger id's offloaded objects, not a BK ledger of that id (see
  :func:`reconcile.transform.bk_referenced_ids`). Units: ``<tenant>/<ns>[/...]/persistent`` directories and
  schema namespaces.
  Each row names the ``store`` it was read from: every Pulsar metadata store is read (see below).
* ``namespaces`` — the namespaces each store knows (``store``, ``namespace``): by the rule of the service's
  ``PulsarMetadataStore.knows_namespace``, ``/managed-ledgers/<namespace>`` exists. Units: one per store.
* ``offload_contexts`` — the offload uuids that still exist: (ledger id, uuid, ``ledger``|``segment``).
* ``offload_objects`` — every object of the offload bucket(s): bucket, key, size, last modified. Units:
  key ranges by first character.
* ``bk_ledgers`` — the metadata of the listed ledgers that no reference keeps (the only ones that can be
  findings), and of those whose id names offloaded objects no context keeps (whose owner their BK tags
  tell): id, path, metadata format version, custom metadata (and the Pulsar keys as columns), length,
  state, znode ctime/mtime, and a parse error when the bytes are not ledger metadata. Units: chunks of ids.

This is how BookKeeper's ``ScanAndCompareGarbageCollector.gc`` works: it lists the ledger ids of the
metadata store range by range (``LedgerManager.getLedgerRanges``; ``HierarchicalLedgerManager`` iterates the
legacy and the long layout, ``AbstractHierarchicalLedgerManager.ledgerListToSet`` turns one child list into
ids), compares them with what it holds, and reads a ledger's metadata only for the ones the comparison left
(``verifyMetadataOnGc``). Here the comparison is the anti-join of the id listing with Pulsar's references,
so a scan costs one ZooKeeper request per 10,000 ledgers plus the metadata of the candidates, instead of one
request per ledger. Reads are batched into ZooKeeper multi-reads where the server has them
(:mod:`ledger_deletion.adapters.zk_reads`).

Order, and why it is safe. The ledger ids are listed first, then the objects, then the references, and the
metadata of the unreferenced ids is read last:

* a ledger created after the listing is not in it, so it is no finding (the next run sees it);
* a listed ledger is judged against references read after it already existed: if the record that uses it
  (its managed ledger's list, a cursor, a schema locator) named it when the scan read that record, it is
  kept. The other order would see ledgers created and recorded after the reference scan as unreferenced,
  leaving them to the minimum age alone;
* a listed ledger no reference names — an orphan, or one so new that its broker has not stored the list
  naming it yet (a broker creates the ledger first and stores the list after: ``ManagedLedgerImpl
  .createComplete`` -> ``updateLedgersListAfterRollover``) — is a finding, and a candidate only if older
  than the minimum age: its metadata (znode ctime and mtime, state), which that rule and the "still written
  to" rule judge, is read after the references;
* a ledger deleted between the listing and the metadata read is left out (nothing to delete).

Reading the metadata before the references, as a full scan would, leaves the same decisions (the listing is
still older than the references); only the cost differs. ``ExtractConfig.bk_metadata="all"`` does that
full read (every listed ledger's metadata) and ``multi_read=False`` one request per znode: together they
are the extract as it was before the id listing, kept to measure against.

Two metadata stores: BookKeeper's ledgers are read from ``zookeeper``, Pulsar's own metadata (managed ledgers,
cursors, schema locators) from ``pulsar_metadata_zookeeper`` (Pulsar's ``metadataStoreUrl``), which in many
deployments is another ensemble or chroot. Read from the wrong store, Pulsar's metadata is simply absent and
every Pulsar ledger would look orphaned; so when that store has no managed-ledgers root at all while the BK
ledgers include Pulsar-tagged ones, the extract refuses (:class:`PulsarMetadataNotFound`) before anything is
reconciled.

Several Pulsar clusters may share this BookKeeper (``PulsarClusterMetadataSetup
--existing-bk-metadata-service-uri``; apache/pulsar#5985), and the tags a broker writes on a ledger
(``LedgerMetadataUtils.buildBaseManagedLedgerMetadata``, ``buildMetadataForSchema``) name no cluster: only
the other clusters' stores can say a ledger is theirs. ``other_pulsar_metadata_stores``
(``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH``) are read like ours, unit for unit in the same pool and
multi-reads, after the listing like ours (so the order above holds for them too), with our store's
credentials; their references join ours (``store`` says whose) and their namespaces join ``namespaces``. A
declared store without a managed-ledgers root refuses the run (``PulsarClusterMetadataSetup`` creates that
root before any broker runs, so it is a wrong connect string or chroot).

The work runs in a pool of processes (the "parallel exporter"), each with its own ZooKeeper session, each
unit written atomically as its own part file. With ``resume=True`` the listing units whose part file exists
are skipped: an interrupted extract restarts where it stopped. References are always read again (they must
be newer than the listings), and with them the metadata of the ledgers they leave unreferenced.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ledger_deletion.adapters.zk_reads import ZkReads
from ledger_deletion.adapters.zookeeper import NO_SECURITY, ZooKeeperSecurity
from ledger_deletion.errors import MetadataFormatError, PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import (
    CUSTOM_APPLICATION,
    CUSTOM_COMPACTED_TOPIC,
    CUSTOM_COMPONENT,
    CUSTOM_CURSOR,
    CUSTOM_MANAGED_LEDGER,
    CUSTOM_SCHEMA_ID,
    parse_ledger_metadata,
)
from ledger_deletion.formats.bk_paths import LEDGER_PARENT_PATTERN, is_special_znode, ledger_path
from ledger_deletion.formats.managed_ledger import (
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.formats.offload_keys import BUCKET_PROPERTY, offload_uuid
from ledger_deletion.shared_bookkeeper import SETTING as SHARED_BOOKKEEPER_SETTING

__all__ = [
    "BK_LEDGERS",
    "BK_LEDGER_IDS",
    "CURSOR_INLINE",
    "NAMESPACES",
    "OFFLOAD_CONTEXTS",
    "OFFLOADED_BK_DELETED",
    "OFFLOAD_OBJECTS",
    "REFERENCES",
    "SCHEMAS",
    "ExtractConfig",
    "ExtractResult",
    "Unit",
    "UnitResult",
    "extract_all",
    "ids_from_children",
    "list_bk_units",
    "list_ledger_ids",
    "metadata_ids",
    "read_ledger_metadata",
]

BK_LEDGER_IDS = "bk_ledger_ids"
BK_LEDGERS = "bk_ledgers"
REFERENCES = "references"
OFFLOAD_CONTEXTS = "offload_contexts"
OFFLOAD_OBJECTS = "offload_objects"
NAMESPACES = "namespaces"

# Reference kind of a ledgerInfo entry whose offload is complete and whose OffloadContext says
# ``bookkeeperDeleted=true``: the broker reads it from tiered storage and has given up its BookKeeper copy
# (it stored that flag before deleting the BK ledger, and does not retry a failed delete). Such a reference
# keeps the ledger's offloaded objects (through its offload_contexts rows) but not its BK ledger.
OFFLOADED_BK_DELETED = "offloaded-bk-deleted"

# Reference kind of a cursor whose position is stored inline (cursorsLedgerId -1): it references no ledger
# (ledger id -1), and bounds "newer than listed" for its cursor ledgers by its managed ledger's newest data
# ledger, as the service does (activities/bookkeeper.py ``_inline_cursor_bound``).
CURSOR_INLINE = "cursor-inline"
COMPACTION_CURSOR = "__compaction"
COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
PULSAR_APPLICATION = "pulsar"  # the ``application`` tag of every ledger a broker creates
PULSAR_METADATA_SETTING = "LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER"
METADATA_UNIT_IDS = 5000  # ledgers whose metadata one unit (one part file) reads

SCHEMAS: dict[str, pa.Schema] = {
    BK_LEDGER_IDS: pa.schema([("ledger_id", pa.int64())]),
    BK_LEDGERS: pa.schema(
        [
            ("ledger_id", pa.int64()),
            ("path", pa.string()),
            ("format_version", pa.int32()),
            ("application", pa.string()),
            ("component", pa.string()),
            ("managed_ledger", pa.string()),
            ("cursor_name", pa.string()),
            ("schema_id", pa.string()),
            ("compacted_topic", pa.string()),
            ("custom", pa.map_(pa.string(), pa.string())),
            ("length", pa.int64()),
            ("state", pa.string()),
            ("ctime_ms", pa.int64()),
            ("mtime_ms", pa.int64()),
            ("md_ctime_ms", pa.int64()),
            ("parse_error", pa.string()),
        ]
    ),
    REFERENCES: pa.schema(
        [
            ("ledger_id", pa.int64()),
            ("kind", pa.string()),
            ("owner", pa.string()),
            ("cursor_name", pa.string()),
            ("store", pa.string()),
        ]
    ),
    NAMESPACES: pa.schema([("store", pa.string()), ("namespace", pa.string())]),
    OFFLOAD_CONTEXTS: pa.schema(
        [
            ("ledger_id", pa.int64()),
            ("uuid", pa.string()),
            ("variant", pa.string()),
            ("managed_ledger", pa.string()),
            ("bucket", pa.string()),
            ("complete", pa.bool_()),
        ]
    ),
    OFFLOAD_OBJECTS: pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("size", pa.int64()),
            ("last_modified_ms", pa.int64()),
        ]
    ),
}


@dataclass(frozen=True)
class ExtractConfig:
    """Where to read from, and how. ``zookeeper`` holds BookKeeper's ledgers root;
    ``pulsar_metadata_zookeeper`` Pulsar's managed-ledgers and schemas roots. Either may carry a chroot
    (``host:port/chroot``).

    ``bk_metadata``: whose ledger metadata to read, ``candidates`` (the listed ledgers no reference keeps)
    or ``all`` (every listed ledger, the full scan). ``multi_read``: batch reads into ZooKeeper multi-reads
    of ``zk_batch`` operations when the server has them (3.6+); False sends one request per znode.
    """

    zookeeper: str
    ledgers_root: str = "/ledgers"
    managed_ledgers_root: str = "/managed-ledgers"
    schemas_root: str = "/schemas"
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    buckets: tuple[str, ...] = ()
    workers: int = 2
    zk_timeout: float = 30.0
    zk_auth_digest: str | None = None  # "user:password"
    pulsar_metadata_zookeeper: str | None = None  # None (or empty): the same as ``zookeeper``
    pulsar_metadata_auth_digest: str | None = None  # None: ``zk_auth_digest``
    # SASL and TLS of each store (ledger_deletion.connections.zookeeper_security): picklable, so every
    # extract process connects as the driver does.
    zk_security: ZooKeeperSecurity = NO_SECURITY
    pulsar_metadata_zk_security: ZooKeeperSecurity = NO_SECURITY
    bk_metadata: Literal["candidates", "all"] = "candidates"
    multi_read: bool = True
    zk_batch: int = 500
    # The metadata stores of the other Pulsar clusters that share this BookKeeper
    # (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH, ledger_deletion.shared_bookkeeper): connect strings with their
    # chroot, read with the credentials of Pulsar's own store (the setting names no others).
    other_pulsar_metadata_stores: tuple[str, ...] = ()

    @property
    def pulsar_metadata_hosts(self) -> str:
        return self.pulsar_metadata_zookeeper or self.zookeeper

    @property
    def pulsar_stores(self) -> tuple[str, ...]:
        """Every Pulsar metadata store whose references keep a ledger: ours first (index 0), then the other
        clusters' (a store given twice is read once)."""
        return tuple(dict.fromkeys((self.pulsar_metadata_hosts, *self.other_pulsar_metadata_stores)))

    @property
    def pulsar_metadata_digest(self) -> str | None:
        return self.pulsar_metadata_auth_digest or self.zk_auth_digest


@dataclass(frozen=True)
class Unit:
    """One piece of work: a table, and the prefix (znode path or key range) or the ledger ids it covers."""

    table: str
    key: str  # znode path, "bucket|lo|hi" for a key range, or the first ledger id of a chunk
    name: str  # file-name-safe id of the unit
    ids: tuple[int, ...] = ()  # the ledgers whose metadata a bk_ledgers unit reads
    store: int = 0  # references and namespaces: the Pulsar metadata store read (ExtractConfig.pulsar_stores)

    @property
    def part_name(self) -> str:
        return f"part-{self.name}.parquet"


@dataclass(frozen=True)
class UnitResult:
    """What one unit wrote (rows per table) and the ZooKeeper requests it sent."""

    rows: dict[str, int]
    zk_requests: int


@dataclass
class ExtractResult:
    directory: Path
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    units: dict[str, int] = field(default_factory=dict)
    skipped_units: dict[str, int] = field(default_factory=dict)
    # ZooKeeper requests sent per stage, by every session of the extract (as counted by the client).
    zk_requests: dict[str, int] = field(default_factory=dict)

    def path(self, table: str) -> str:
        return str(self.directory / table)


ProgressFn = Callable[[str, int, int], None]

# ---------------------------------------------------------------------------------------------------------
# ZooKeeper sessions (one per process and store, reused by every unit that process runs)
# ---------------------------------------------------------------------------------------------------------

# Keyed by (hosts, digest, security): BookKeeper's ZooKeeper and Pulsar's metadata store may differ in any,
# and a process reads from both (the driver lists units of both).
_clients: dict[tuple[str, str | None, ZooKeeperSecurity], ZkReads] = {}


def _session(config: ExtractConfig, hosts: str, digest: str | None, security: ZooKeeperSecurity) -> ZkReads:
    key = (hosts, digest, security)
    reads = _clients.get(key)
    if reads is None or not reads.connected:
        from kazoo.client import KazooClient

        auth = [("digest", digest)] if digest else None
        client = KazooClient(
            hosts=hosts,
            timeout=config.zk_timeout,
            auth_data=auth,
            read_only=True,
            **security.kazoo_options(),
        )
        client.start(timeout=config.zk_timeout)
        sent = reads.requests if reads is not None else 0
        reads = ZkReads(client, multi_read=config.multi_read, batch=config.zk_batch)
        reads.requests = sent  # the count is the process's, across reconnections
        _clients[key] = reads
    return reads


def _zk(config: ExtractConfig) -> ZkReads:
    """The session on BookKeeper's ZooKeeper (the ledgers root)."""
    return _session(config, config.zookeeper, config.zk_auth_digest, config.zk_security)


def _pulsar_zk(config: ExtractConfig, store: int = 0) -> ZkReads:
    """The session on a Pulsar metadata store (the managed-ledgers and schemas roots): ours (``store`` 0)
    or another cluster's (:attr:`ExtractConfig.pulsar_stores`)."""
    return _session(
        config,
        config.pulsar_stores[store],
        config.pulsar_metadata_digest,
        config.pulsar_metadata_zk_security,
    )


def _requests_sent() -> int:
    """ZooKeeper requests sent so far by this process's sessions."""
    return sum(reads.requests for reads in _clients.values())


def _close_clients() -> None:
    for reads in _clients.values():
        with contextlib.suppress(Exception):  # best effort on shutdown
            reads.close()
    _clients.clear()


# ---------------------------------------------------------------------------------------------------------
# BK ledgers: the id listing, then the metadata of the ones that matter
# ---------------------------------------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]{4}")
_LEAF = re.compile(r"L[0-9]{4}")
# The parents of ledger znodes below the root: /<2>/<4> (legacy layout) and /<3>/<4>/<4>/<4> (long layout).
_LEGACY_PARENT = re.compile(r"[0-9]{2}/[0-9]{4}")
_LONG_PARENT = re.compile(r"[0-9]{3}/[0-9]{4}/[0-9]{4}/[0-9]{4}")
# Where bk_paths.ledger_path switches from the legacy to the long layout (Integer.MAX_VALUE) and the
# largest id; each id has one canonical path, the other spelling is no ledger BookKeeper would read.
_LONG_LAYOUT_FROM = 2**31 - 1
_LONG_MAX = 2**63 - 1


def list_bk_units(config: ExtractConfig) -> list[Unit]:
    """Prefix units of the ledgers root: ``/<2>/<4>`` (legacy layout) and ``/<3>/<4>/<4>`` (long layout)."""
    zk = _zk(config)
    root = config.ledgers_root.rstrip("/")
    units: list[Unit] = []
    for top in zk.children(root):
        if is_special_znode(top) or not LEDGER_PARENT_PATTERN.fullmatch(top):
            continue
        depth = 1 if len(top) == 2 else 2
        level = [f"{root}/{top}"]
        for _ in range(depth):
            level = [f"{p}/{c}" for p, cs in zk.children_many(level) for c in cs if _DIGITS.fullmatch(c)]
        units.extend(Unit(BK_LEDGER_IDS, p, p[len(root) + 1 :].replace("/", "_")) for p in level)
    return units


def ids_from_children(root: str, parent: str, children: Sequence[str]) -> list[int]:
    """The ledger ids of the ``L<4>`` children of one ledger parent (``AbstractHierarchicalLedgerManager
    .ledgerListToSet``: the parent's digits, then the child's), canonical paths only: exactly the ids
    :func:`ledger_deletion.formats.bk_paths.ledger_id_from_path` accepts for ``parent/child``."""
    rest = parent[len(root) + 1 :] if parent.startswith(root + "/") else ""
    if _LEGACY_PARENT.fullmatch(rest):
        low, high = 0, _LONG_LAYOUT_FROM - 1
    elif _LONG_PARENT.fullmatch(rest):
        low, high = _LONG_LAYOUT_FROM, _LONG_MAX
    else:
        return []
    digits = rest.replace("/", "")
    ids: list[int] = []
    for child in children:
        if _LEAF.fullmatch(child):
            ledger_id = int(digits + child[1:])
            if low <= ledger_id <= high:
                ids.append(ledger_id)
    return ids


def list_ledger_ids(config: ExtractConfig, prefix: str) -> dict[str, list[Any]]:
    """The ids of every ledger znode below ``prefix`` (the ``bk_ledger_ids`` columns): child lists only."""
    zk = _zk(config)
    root = config.ledgers_root.rstrip("/")
    ids: list[int] = []
    level = [prefix]
    while level:
        nxt: list[str] = []
        for parent, children in zk.children_many(level):
            ids.extend(ids_from_children(root, parent, children))
            nxt.extend(f"{parent}/{child}" for child in children if _DIGITS.fullmatch(child))
        level = nxt
    return {"ledger_id": ids}


def read_ledger_metadata(zk: ZkReads, root: str, ids: Sequence[int]) -> dict[str, list[Any]]:
    """The ``bk_ledgers`` columns of the given ledgers that still exist, read in batches."""
    paths = [ledger_path(ledger_id, root) for ledger_id in ids]
    id_of = dict(zip(paths, ids, strict=True))
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMAS[BK_LEDGERS].names}
    for path, data, stat in zk.get_many(paths):
        cols["ledger_id"].append(id_of[path])
        cols["path"].append(path)
        cols["ctime_ms"].append(stat.ctime)
        cols["mtime_ms"].append(stat.mtime)
        try:
            md = parse_ledger_metadata(data)
        except MetadataFormatError as exc:
            for name in (
                "format_version",
                "application",
                "component",
                "managed_ledger",
                "cursor_name",
                "schema_id",
                "compacted_topic",
                "custom",
                "length",
                "state",
                "md_ctime_ms",
            ):
                cols[name].append(None)
            cols["parse_error"].append(str(exc)[:300])
            continue
        custom = {key: md.custom(key) or "" for key in md.custom_metadata}
        cols["format_version"].append(md.format_version)
        cols["application"].append(custom.get(CUSTOM_APPLICATION))
        cols["component"].append(custom.get(CUSTOM_COMPONENT))
        cols["managed_ledger"].append(custom.get(CUSTOM_MANAGED_LEDGER))
        cols["cursor_name"].append(custom.get(CUSTOM_CURSOR))
        cols["schema_id"].append(custom.get(CUSTOM_SCHEMA_ID))
        cols["compacted_topic"].append(custom.get(CUSTOM_COMPACTED_TOPIC))
        cols["custom"].append(list(custom.items()))
        cols["length"].append(md.length)
        cols["state"].append(md.state)
        cols["md_ctime_ms"].append(md.ctime)
        cols["parse_error"].append(None)
    return cols


_OBJECT_LEDGER_KEY = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-ledger-([0-9]{1,19})(?:-index)?"
)


def metadata_ids(config: ExtractConfig, directory: Path) -> list[int]:
    """The listed ledgers whose metadata the reconcile needs, sorted: with ``bk_metadata="candidates"``
    those no reference keeps, and those whose id names offloaded objects no offload context keeps.

    A reference of any kind but ``offloaded-bk-deleted`` keeps the BK ledger of its id
    (:func:`reconcile.transform.bk_referenced_ids`, which also drops that entry's own offload contexts: an
    offload context always comes with a ledger-list entry of its id, so the contexts keep no other id).
    Reading more than that set is harmless: the transform applies the anti-join itself. The second part
    keeps the findings of such objects whole: their topic is the BK ledger's tag when the objects carry
    none (:func:`reconcile.transform.attach_offload_owners`).
    """
    listed = pq.read_table(directory / BK_LEDGER_IDS, columns=["ledger_id"]).column("ledger_id")
    if config.bk_metadata == "all":
        return sorted(set(listed.to_pylist()))
    refs = pq.read_table(directory / REFERENCES, columns=["ledger_id", "kind"])
    keeping = refs.filter(
        pc.and_(pc.greater_equal(refs["ledger_id"], 0), pc.not_equal(refs["kind"], OFFLOADED_BK_DELETED))
    ).column("ledger_id")
    unreferenced = set(listed.filter(pc.invert(pc.is_in(listed, value_set=keeping))).to_pylist())
    contexts = pq.read_table(directory / OFFLOAD_CONTEXTS, columns=["uuid", "ledger_id"]).to_pydict()
    kept = set(zip(contexts["uuid"], contexts["ledger_id"], strict=True))
    named: set[int] = set()
    for key in pq.read_table(directory / OFFLOAD_OBJECTS, columns=["key"]).column("key").to_pylist():
        match = _OBJECT_LEDGER_KEY.fullmatch(key)
        if match is not None:
            ledger_id = int(match.group(2))
            if (match.group(1), ledger_id) not in kept:
                named.add(ledger_id)
    named_ids = pa.array(sorted(i for i in named if i <= _LONG_MAX), pa.int64())
    unreferenced |= set(listed.filter(pc.is_in(listed, value_set=named_ids)).to_pylist())
    return sorted(unreferenced)


def list_metadata_units(config: ExtractConfig, directory: Path) -> list[Unit]:
    """Chunks of :func:`metadata_ids`, each one unit (one part file) of the ``bk_ledgers`` stage."""
    ids = metadata_ids(config, directory)
    return [
        Unit(BK_LEDGERS, str(ids[i]), f"{i // METADATA_UNIT_IDS:06d}", tuple(ids[i : i + METADATA_UNIT_IDS]))
        for i in range(0, len(ids), METADATA_UNIT_IDS)
    ]


# ---------------------------------------------------------------------------------------------------------
# Pulsar references
# ---------------------------------------------------------------------------------------------------------


def list_reference_units(config: ExtractConfig) -> list[Unit]:
    """Of every Pulsar metadata store (ours, then the other clusters' sharing this BookKeeper): its
    ``.../persistent`` dirs of the managed-ledger tree (V2 depth 3, V1 depth 4), its schema namespaces, and
    one unit for the namespaces it knows. Part names carry the store's index (ours none)."""
    units: list[Unit] = []
    for store in range(len(config.pulsar_stores)):
        units.extend(_reference_units_of(config, store))
    return units


def _reference_units_of(config: ExtractConfig, store: int) -> list[Unit]:
    zk = _pulsar_zk(config, store)
    tag = f"s{store}_" if store else ""
    units: list[Unit] = []
    ml_root = config.managed_ledgers_root.rstrip("/")
    level = [ml_root]
    for _depth in range(4):
        nxt: list[str] = []
        for parent, children in zk.children_many(level):
            for child in children:
                path = f"{parent}/{child}"
                if child == "persistent" and parent != ml_root:
                    name = tag + "ml_" + _safe(path[len(ml_root) + 1 :])
                    units.append(Unit(REFERENCES, "ml:" + path, name, store=store))
                else:
                    nxt.append(path)
        level = nxt
    schema_root = config.schemas_root.rstrip("/")
    tenants = [f"{schema_root}/{tenant}" for tenant in zk.children(schema_root)]
    for tenant_path, namespaces in zk.children_many(tenants):
        for ns in namespaces:
            path = f"{tenant_path}/{ns}"
            name = tag + "schema_" + _safe(path[len(schema_root) + 1 :])
            units.append(Unit(REFERENCES, "schema:" + path, name, store=store))
    units.append(Unit(NAMESPACES, "namespaces:", tag + "namespaces", store=store))
    return units


def _refuse_without_pulsar_metadata(config: ExtractConfig, directory: Path) -> None:
    """Raise :class:`PulsarMetadataNotFound` when Pulsar's metadata store has no managed-ledgers root while
    the BK ledgers listed into ``directory`` include Pulsar's: the store read is not the brokers' one.

    Every managed ledger's record lives under that root, so a store that ever held one has it; a store
    without it is not Pulsar's, or its chroot is wrong. (Should a cluster ever lose the root with its last
    topic while orphans remain, the job refuses where it could have gone on: the safe side.) The common case
    costs one ``exists``; only when the root is missing is the metadata of the listed ledgers read, to count
    the Pulsar-tagged ones. A cluster without Pulsar ledgers has nothing to protect and passes.
    """
    ml_root = config.managed_ledgers_root.rstrip("/") or "/"
    for other in range(1, len(config.pulsar_stores)):
        # Another cluster's store is declared to hold that cluster's references: PulsarClusterMetadataSetup
        # creates its managed-ledgers root before any broker runs, so a store without one is a wrong connect
        # string or chroot, and the ledgers it should protect would look unreferenced.
        if not _pulsar_zk(config, other).exists(ml_root):
            raise PulsarMetadataNotFound(
                f"the metadata store {config.pulsar_stores[other]}, declared in {SHARED_BOOKKEEPER_SETTING} "
                f"as another Pulsar cluster's sharing this BookKeeper, has no {ml_root} znode: it is not a "
                f"Pulsar cluster's metadata store (check the connect string and its chroot), and that "
                f"cluster's ledgers would be reported as orphans, so nothing was reconciled."
            )
    if _pulsar_zk(config).exists(ml_root):
        return
    listed = pq.read_table(directory / BK_LEDGER_IDS, columns=["ledger_id"]).column("ledger_id").to_pylist()
    root = config.ledgers_root.rstrip("/")
    applications = read_ledger_metadata(_zk(config), root, sorted(set(listed)))["application"]
    tagged = sum(1 for application in applications if application == PULSAR_APPLICATION)
    if not tagged:
        return
    store = config.pulsar_metadata_hosts
    if store == config.zookeeper:  # the likeliest mistake: the setting left empty
        store += f" (the same as BookKeeper's, as when {PULSAR_METADATA_SETTING} is empty)"
    raise PulsarMetadataNotFound(
        f"Pulsar's metadata store {store} has no {ml_root} znode, but {tagged} BookKeeper ledgers in "
        f"{config.ledgers_root} on {config.zookeeper} are tagged application={PULSAR_APPLICATION}. This is "
        f"not the store Pulsar's brokers write to: every one of them would be reported as an orphan, so "
        f"nothing was reconciled. Set {PULSAR_METADATA_SETTING} to Pulsar's metadataStoreUrl "
        f"(host:port[,host:port][/chroot])."
    )


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", lambda m: f"%{ord(m.group()):02X}", text.replace("/", "_"))


def scan_namespaces_unit(config: ExtractConfig, store: int) -> dict[str, list[Any]]:
    """The namespaces one store knows (``namespaces`` rows), by the rule of the service's
    ``PulsarMetadataStore.knows_namespace``: ``<managed-ledgers root>/<namespace>`` exists, for a namespace
    of two segments (``tenant/ns``) or three (v1's ``tenant/cluster/ns``).

    That znode is created as a parent with the namespace's first managed ledger
    (``MetaStoreImpl.getManagedLedgerInfo``) and removed by the namespace's deletion
    (``NamespacesBase.internalClearZkSources`` -> ``clearNamespacePersistence``); it is in the cluster's local
    store, which no other cluster shares (``/admin/policies`` is in the configuration store, which
    geo-replicated clusters do share). Two child lists per store, in multi-reads: every node at depth two
    and three below the root, as ``knows_namespace`` answers yes for each of them.
    """
    zk = _pulsar_zk(config, store)
    root = config.managed_ledgers_root.rstrip("/")
    tenants = [f"{root}/{tenant}" for tenant in zk.children(root)]
    second = [f"{parent}/{child}" for parent, children in zk.children_many(tenants) for child in children]
    third = [f"{parent}/{child}" for parent, children in zk.children_many(second) for child in children]
    names = [path[len(root) + 1 :] for path in (*second, *third)]
    label = config.pulsar_stores[store]
    return {"store": [label] * len(names), "namespace": names}


def scan_reference_unit(config: ExtractConfig, key: str, store: int = 0) -> dict[str, dict[str, list[Any]]]:
    """References (and offload contexts) of one unit of one store: a ``persistent`` directory or a schema
    namespace."""
    zk = _pulsar_zk(config, store)
    label = config.pulsar_stores[store]
    refs: dict[str, list[Any]] = {name: [] for name in SCHEMAS[REFERENCES].names}
    ctxs: dict[str, list[Any]] = {name: [] for name in SCHEMAS[OFFLOAD_CONTEXTS].names}

    def ref(ledger_id: int, kind: str, owner: str, cursor: str | None = None) -> None:
        refs["ledger_id"].append(ledger_id)
        refs["kind"].append(kind)
        refs["owner"].append(owner)
        refs["cursor_name"].append(cursor)
        refs["store"].append(label)

    kind, path = key.split(":", 1)
    if kind == "schema":
        root = config.schemas_root.rstrip("/")
        for node_path, data, _ in zk.get_many([f"{path}/{c}" for c in zk.children(path)]):
            schema_id = node_path[len(root) + 1 :]
            try:
                for ledger_id in schema_ledger_ids(parse_schema_locator(data)):
                    ref(ledger_id, "schema", schema_id)
            except MetadataFormatError:
                ref(-1, "unreadable", schema_id)
        return {REFERENCES: refs}
    ml_root = config.managed_ledgers_root.rstrip("/")
    ml_paths = [f"{path}/{c}" for c in zk.children(path)]
    cursor_paths: list[str] = []
    for ml_path, children in zk.children_many(ml_paths):
        cursor_paths.extend(f"{ml_path}/{c}" for c in children)
    for ml_path, data, _ in zk.get_many(ml_paths):
        ml_name = ml_path[len(ml_root) + 1 :]
        try:
            info = parse_managed_ledger_info(data)
        except MetadataFormatError:
            ref(-1, "unreadable", ml_name)
            continue
        for li in info.ledgerInfo:
            ref(li.ledgerId, _ledger_info_kind(li), ml_name)
            if li.HasField("offloadContext"):
                oc = li.offloadContext
                default_bucket = _driver_bucket(oc.driverMetadata) if oc.HasField("driverMetadata") else None
                if oc.uidMsb or oc.uidLsb:
                    _ctx(
                        ctxs,
                        li.ledgerId,
                        offload_uuid(oc.uidMsb, oc.uidLsb),
                        "ledger",
                        ml_name,
                        default_bucket,
                        oc.complete,
                    )
                for seg in oc.offloadSegment:
                    bucket = _driver_bucket(seg.driverMetadata) if seg.HasField("driverMetadata") else None
                    _ctx(
                        ctxs,
                        li.ledgerId,
                        offload_uuid(seg.uidMsb, seg.uidLsb),
                        "segment",
                        ml_name,
                        bucket or default_bucket,
                        seg.complete,
                    )
        if info.HasField("terminatedPosition"):
            ref(info.terminatedPosition.ledgerId, "terminated", ml_name)
    for cursor_path, data, _ in zk.get_many(cursor_paths):
        ml_path, cursor = cursor_path.rsplit("/", 1)
        ml_name = ml_path[len(ml_root) + 1 :]
        try:
            ci = parse_managed_cursor_info(data)
        except MetadataFormatError:
            ref(-1, "unreadable", ml_name, cursor)
            continue
        if ci.cursorsLedgerId >= 0 and data:
            ref(ci.cursorsLedgerId, "cursor", ml_name, cursor)
        elif data:
            # Position stored inline: no ledger, but a cursor ledger being created has no other bound
            # (transform.newest_listed).
            ref(-1, CURSOR_INLINE, ml_name, cursor)
        if ci.HasField("markDeleteLedgerId"):
            ref(ci.markDeleteLedgerId, "position", ml_name, cursor)
        for rng in ci.individualDeletedMessages:
            ref(rng.lowerEndpoint.ledgerId, "position", ml_name, cursor)
            ref(rng.upperEndpoint.ledgerId, "position", ml_name, cursor)
        for prop in ci.properties:
            if prop.name == COMPACTED_TOPIC_LEDGER:
                ref(prop.value, "compacted", ml_name, cursor)
        for sprop in ci.cursorProperties:
            if sprop.name == COMPACTED_TOPIC_LEDGER and sprop.value.lstrip("-").isdigit():
                ref(int(sprop.value), "compacted", ml_name, cursor)
    return {REFERENCES: refs, OFFLOAD_CONTEXTS: ctxs}


def _ledger_info_kind(li: Any) -> str:
    """The reference kind of one ``ledgerInfo`` entry: ``data``, or :data:`OFFLOADED_BK_DELETED` when its
    offload is complete and the broker has marked the BookKeeper copy deleted (``bookkeeperDeleted``)."""
    if li.HasField("offloadContext") and li.offloadContext.complete and li.offloadContext.bookkeeperDeleted:
        return OFFLOADED_BK_DELETED
    return "data"


def _driver_bucket(driver: Any) -> str | None:
    for kv in driver.properties:
        if kv.key == BUCKET_PROPERTY and kv.value:
            return str(kv.value)
    return None


def _ctx(
    cols: dict[str, list[Any]],
    ledger_id: int,
    uid: str,
    variant: str,
    ml_name: str,
    bucket: str | None,
    complete: bool,
) -> None:
    cols["ledger_id"].append(ledger_id)
    cols["uuid"].append(uid)
    cols["variant"].append(variant)
    cols["managed_ledger"].append(ml_name)
    cols["bucket"].append(bucket)
    cols["complete"].append(complete)


# ---------------------------------------------------------------------------------------------------------
# Offload objects
# ---------------------------------------------------------------------------------------------------------

_HEX = "0123456789abcdef"
_TOP = "\U0010ffff"


def list_object_units(config: ExtractConfig) -> list[Unit]:
    """Per bucket: one unit per leading hex digit (offload keys start with a uuid) and one for the rest."""
    units: list[Unit] = []
    for bucket in config.buckets:
        for ch in _HEX:
            units.append(Unit(OFFLOAD_OBJECTS, f"{bucket}|prefix|{ch}", f"{_safe(bucket)}_{ch}"))
        units.append(Unit(OFFLOAD_OBJECTS, f"{bucket}|rest|", f"{_safe(bucket)}_rest"))
    return units


def _s3(config: ExtractConfig) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=config.s3_endpoint or None,
        region_name=config.s3_region,
        config=Config(retries={"max_attempts": 10, "mode": "adaptive"}),
    )


def scan_object_unit(config: ExtractConfig, key: str) -> dict[str, list[Any]]:
    bucket, mode, prefix = key.split("|", 2)
    s3 = _s3(config)
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMAS[OFFLOAD_OBJECTS].names}
    if mode == "prefix":
        ranges: list[tuple[str | None, str | None, str]] = [(None, None, prefix)]
    else:  # every key not starting with a lowercase hex digit
        ranges = [(None, "0", ""), ("9" + _TOP, "a", ""), ("f" + _TOP, None, "")]
    for start_after, stop, pfx in ranges:
        for obj in _list(s3, bucket, pfx, start_after):
            if stop is not None and obj["Key"] >= stop:
                break
            cols["bucket"].append(bucket)
            cols["key"].append(obj["Key"])
            cols["size"].append(int(obj.get("Size", 0)))
            cols["last_modified_ms"].append(int(obj["LastModified"].timestamp() * 1000))
    return cols


def _list(s3: Any, bucket: str, prefix: str, start_after: str | None) -> Iterator[dict[str, Any]]:
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
    if start_after:
        kwargs["StartAfter"] = start_after
    while True:
        page = s3.list_objects_v2(**kwargs)
        yield from page.get("Contents", [])
        if not page.get("IsTruncated"):
            return
        kwargs["ContinuationToken"] = page["NextContinuationToken"]
        kwargs.pop("StartAfter", None)


# ---------------------------------------------------------------------------------------------------------
# The exporter: units -> part files, in a process pool
# ---------------------------------------------------------------------------------------------------------


def _write_part(directory: Path, table: str, part: str, cols: dict[str, list[Any]]) -> int:
    out = directory / table
    out.mkdir(parents=True, exist_ok=True)
    arrow = pa.table(cols, schema=SCHEMAS[table])
    tmp = out / f".{part}.tmp-{os.getpid()}"
    pq.write_table(arrow, tmp, compression="zstd")
    os.replace(tmp, out / part)
    return int(arrow.num_rows)


def _scan(config: ExtractConfig, unit: Unit) -> dict[str, dict[str, list[Any]]]:
    if unit.table == BK_LEDGER_IDS:
        return {BK_LEDGER_IDS: list_ledger_ids(config, unit.key)}
    if unit.table == BK_LEDGERS:
        return {BK_LEDGERS: read_ledger_metadata(_zk(config), config.ledgers_root.rstrip("/"), unit.ids)}
    if unit.table == OFFLOAD_OBJECTS:
        return {OFFLOAD_OBJECTS: scan_object_unit(config, unit.key)}
    if unit.table == NAMESPACES:
        return {NAMESPACES: scan_namespaces_unit(config, unit.store)}
    return scan_reference_unit(config, unit.key, unit.store)


def run_unit(config: ExtractConfig, unit: Unit, directory: str) -> UnitResult:
    """Scan one unit and write its part file(s) (runs in a pool process)."""
    before = _requests_sent()
    tables = _scan(config, unit)
    rows = {
        table: _write_part(Path(directory), table, unit.part_name, cols) for table, cols in tables.items()
    }
    return UnitResult(rows, _requests_sent() - before)


def _empty_table(directory: Path, table: str) -> None:
    """An empty part so that every table can be read even when no unit produced rows."""
    out = directory / table
    out.mkdir(parents=True, exist_ok=True)
    if not any(out.glob("*.parquet")):
        pq.write_table(SCHEMAS[table].empty_table(), out / "part-empty.parquet")


@dataclass(frozen=True)
class _Stage:
    name: str
    units: Callable[[ExtractConfig, Path], list[Unit]]
    tables: tuple[str, ...]
    resumable: bool  # False: read again on every run, because it must be newer than what came before


_STAGES = (
    # The id listing first: everything read later is newer than it (see the module docstring).
    _Stage(BK_LEDGER_IDS, lambda config, _: list_bk_units(config), (BK_LEDGER_IDS,), True),
    _Stage(OFFLOAD_OBJECTS, lambda config, _: list_object_units(config), (OFFLOAD_OBJECTS,), True),
    _Stage(
        REFERENCES,
        lambda config, _: list_reference_units(config),
        (REFERENCES, OFFLOAD_CONTEXTS, NAMESPACES),
        False,
    ),
    # Last: which ledgers' metadata is read depends on the references.
    _Stage(BK_LEDGERS, list_metadata_units, (BK_LEDGERS,), False),
)


def extract_all(
    config: ExtractConfig,
    directory: Path,
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
) -> ExtractResult:
    """Run the whole extract into ``directory``: ledger ids, objects, references, then ledger metadata.

    ``progress(stage, done, total)`` is called as units finish, and with ``done=0`` when a stage starts
    (after the stages before it are complete).

    Raises:
        PulsarMetadataNotFound: right after the ledger ids, before the (longer) object listing, when
            Pulsar's metadata store has no managed-ledgers root yet Pulsar-tagged ledgers exist.
    """
    directory.mkdir(parents=True, exist_ok=True)
    result = ExtractResult(directory)
    report = progress or (lambda _stage, _done, _total: None)
    ctx = get_context("spawn")  # kazoo and the JVM gateway run threads: never fork them
    with ProcessPoolExecutor(max_workers=max(1, config.workers), mp_context=ctx) as pool:
        try:
            for stage in _STAGES:
                started = time.monotonic()
                sent = _requests_sent()
                if not (stage.resumable and resume):
                    for table in stage.tables:
                        _clear(directory / table)
                units = stage.units(config, directory)
                todo = [u for u in units if not (directory / u.table / u.part_name).exists()]
                result.units[stage.name] = len(units)
                result.skipped_units[stage.name] = len(units) - len(todo)
                report(stage.name, 0, len(todo))
                futures = [pool.submit(run_unit, config, unit, str(directory)) for unit in todo]
                unit_requests = 0
                for done, future in enumerate(as_completed(futures), start=1):
                    unit_requests += future.result().zk_requests
                    report(stage.name, done, len(todo))
                for table in stage.tables:
                    _empty_table(directory, table)
                    result.rows[table] = pq.ParquetDataset(directory / table).read(columns=[]).num_rows
                if stage.name == BK_LEDGER_IDS:
                    _refuse_without_pulsar_metadata(config, directory)
                result.zk_requests[stage.name] = unit_requests + _requests_sent() - sent
                result.seconds[stage.name] = time.monotonic() - started
        finally:
            _close_clients()
    return result


def _clear(path: Path) -> None:
    if path.exists():
        for part in path.glob("*"):
            part.unlink()
