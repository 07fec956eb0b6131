"""Extract: a parallel, restartable snapshot of BookKeeper, Pulsar metadata and offload buckets as Parquet.

Four tables, each a directory of Parquet part files (one per work unit) under the extract directory:

* ``bk_ledgers`` — every ledger znode under the ledgers root (special znodes skipped): id, path, metadata
  format version, custom metadata (and the Pulsar keys as columns), length, state, znode ctime/mtime, and a
  parse error when the bytes are not ledger metadata. Units: ledger path prefixes (``/<2>/<4>`` for the
  legacy layout, ``/<3>/<4>/<4>`` for the long one), so no unit holds more than 10,000 (legacy) znodes.
* ``references`` — every ledger id Pulsar metadata points at: managed-ledger ledger lists, terminated
  position, cursor ledgers, mark-delete and individually deleted positions, the compacted ledger
  (``CompactedTopicLedger`` property of the ``__compaction`` cursor), schema locator ledgers. A record that
  does not decode yields a row of kind ``unreadable`` naming its owner, so nothing it might reference is
  ever deleted. A ledger-list entry whose offload is complete and whose BookKeeper copy the broker marked
  deleted (``bookkeeperDeleted``) is of kind ``offloaded-bk-deleted`` (:data:`OFFLOADED_BK_DELETED`), not
  ``data``: it keeps the ledger id's offloaded objects, not a BK ledger of that id (see
  :func:`reconcile.transform.bk_referenced_ids`). Units: ``<tenant>/<ns>[/...]/persistent`` directories and
  schema namespaces.
* ``offload_contexts`` — the offload uuids that still exist: (ledger id, uuid, ``ledger``|``segment``).
* ``offload_objects`` — every object of the offload bucket(s): bucket, key, size, last modified. Units:
  key ranges by first character.

Order matters for safety: BK ledgers are listed first, then objects, then references, so anything created
between the scans is either invisible or referenced; the minimum age covers the rest.

Two metadata stores: BookKeeper's ledgers are read from ``zookeeper``, Pulsar's own metadata (managed ledgers,
cursors, schema locators) from ``pulsar_metadata_zookeeper`` (Pulsar's ``metadataStoreUrl``), which in many
deployments is another ensemble or chroot. Read from the wrong store, Pulsar's metadata is simply absent and
every Pulsar ledger would look orphaned; so when that store has no managed-ledgers root at all while the BK
ledgers include Pulsar-tagged ones, the extract refuses (:class:`PulsarMetadataNotFound`) before anything is
reconciled.

The work runs in a pool of processes (the "parallel exporter"), each with its own ZooKeeper session that
pipelines asynchronous reads, each unit written atomically as its own part file. With ``resume=True`` the
units whose part file exists are skipped: an interrupted extract restarts where it stopped. (References
are always re-read: they must be at least as new as the storage listings.) :func:`spark_scan_bk_ledgers` runs
the same unit scan inside Spark tasks instead; see the module :mod:`reconcile.job` for which is used and why.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

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
from ledger_deletion.formats.bk_paths import LEDGER_PARENT_PATTERN, is_special_znode
from ledger_deletion.formats.managed_ledger import (
    parse_managed_cursor_info,
    parse_managed_ledger_info,
    parse_schema_locator,
    schema_ledger_ids,
)
from ledger_deletion.formats.offload_keys import BUCKET_PROPERTY, offload_uuid

__all__ = [
    "BK_LEDGERS",
    "OFFLOAD_CONTEXTS",
    "OFFLOADED_BK_DELETED",
    "OFFLOAD_OBJECTS",
    "REFERENCES",
    "SCHEMAS",
    "ExtractConfig",
    "ExtractResult",
    "Unit",
    "extract_all",
    "list_bk_units",
    "scan_bk_unit",
    "spark_scan_bk_ledgers",
]

BK_LEDGERS = "bk_ledgers"
REFERENCES = "references"
OFFLOAD_CONTEXTS = "offload_contexts"
OFFLOAD_OBJECTS = "offload_objects"

# Reference kind of a ledgerInfo entry whose offload is complete and whose OffloadContext says
# ``bookkeeperDeleted=true``: the broker reads it from tiered storage and has given up its BookKeeper copy
# (it stored that flag before deleting the BK ledger, and does not retry a failed delete). Such a reference
# keeps the ledger's offloaded objects (through its offload_contexts rows) but not its BK ledger.
OFFLOADED_BK_DELETED = "offloaded-bk-deleted"

COMPACTION_CURSOR = "__compaction"
COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
PULSAR_APPLICATION = "pulsar"  # the ``application`` tag of every ledger a broker creates
PULSAR_METADATA_SETTING = "LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER"

SCHEMAS: dict[str, pa.Schema] = {
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
        ]
    ),
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
    """Where to read from. ``zookeeper`` holds BookKeeper's ledgers root; ``pulsar_metadata_zookeeper``
    Pulsar's managed-ledgers and schemas roots. Either may carry a chroot (``host:port/chroot``)."""

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

    @property
    def pulsar_metadata_hosts(self) -> str:
        return self.pulsar_metadata_zookeeper or self.zookeeper

    @property
    def pulsar_metadata_digest(self) -> str | None:
        return self.pulsar_metadata_auth_digest or self.zk_auth_digest


@dataclass(frozen=True)
class Unit:
    """One piece of work: a table, and the prefix (znode path or key range) it covers."""

    table: str
    key: str  # znode path, or "bucket|lo|hi" for a key range
    name: str  # file-name-safe id of the unit

    @property
    def part_name(self) -> str:
        return f"part-{self.name}.parquet"


@dataclass
class ExtractResult:
    directory: Path
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    units: dict[str, int] = field(default_factory=dict)
    skipped_units: dict[str, int] = field(default_factory=dict)

    def path(self, table: str) -> str:
        return str(self.directory / table)


ProgressFn = Callable[[str, int, int], None]

# ---------------------------------------------------------------------------------------------------------
# ZooKeeper sessions (one per process and store, reused by every unit that process runs)
# ---------------------------------------------------------------------------------------------------------

# Keyed by (hosts, digest): BookKeeper's ZooKeeper and Pulsar's metadata store may differ in either, and a
# process reads from both (the driver lists units of both).
_clients: dict[tuple[str, str | None], Any] = {}


def _session(hosts: str, digest: str | None, timeout: float) -> Any:
    key = (hosts, digest)
    client = _clients.get(key)
    if client is None or not client.connected:
        from kazoo.client import KazooClient

        auth = [("digest", digest)] if digest else None
        client = KazooClient(hosts=hosts, timeout=timeout, auth_data=auth, read_only=True)
        client.start(timeout=timeout)
        _clients[key] = client
    return client


def _zk(config: ExtractConfig) -> Any:
    """The session on BookKeeper's ZooKeeper (the ledgers root)."""
    return _session(config.zookeeper, config.zk_auth_digest, config.zk_timeout)


def _pulsar_zk(config: ExtractConfig) -> Any:
    """The session on Pulsar's metadata store (the managed-ledgers and schemas roots)."""
    return _session(config.pulsar_metadata_hosts, config.pulsar_metadata_digest, config.zk_timeout)


def _close_clients() -> None:
    for client in _clients.values():
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001, S110 - best effort on shutdown
            pass
    _clients.clear()


def _children(zk: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def _get_many(zk: Any, paths: Sequence[str], window: int = 4000) -> Iterator[tuple[str, bytes, Any]]:
    """(path, data, stat) for each path that still exists, reading ``window`` znodes at a time, pipelined."""
    from kazoo.exceptions import NoNodeError

    for start in range(0, len(paths), window):
        chunk = paths[start : start + window]
        pending = [(path, zk.get_async(path)) for path in chunk]
        for path, result in pending:
            try:
                data, stat = result.get(timeout=120)
            except NoNodeError:
                continue  # deleted between listing and reading: nothing to reconcile
            yield path, data or b"", stat


def _children_many(zk: Any, paths: Sequence[str], window: int = 4000) -> Iterator[tuple[str, list[str]]]:
    from kazoo.exceptions import NoNodeError

    for start in range(0, len(paths), window):
        chunk = paths[start : start + window]
        pending = [(path, zk.get_children_async(path)) for path in chunk]
        for path, result in pending:
            try:
                yield path, sorted(result.get(timeout=120))
            except NoNodeError:
                continue


# ---------------------------------------------------------------------------------------------------------
# BK ledgers
# ---------------------------------------------------------------------------------------------------------

_DIGITS = re.compile(r"\d{4}")


def list_bk_units(config: ExtractConfig) -> list[Unit]:
    """Prefix units of the ledgers root: ``/<2>/<4>`` (legacy layout) and ``/<3>/<4>/<4>`` (long layout)."""
    zk = _zk(config)
    root = config.ledgers_root.rstrip("/")
    units: list[Unit] = []
    for top in _children(zk, root):
        if is_special_znode(top) or not LEDGER_PARENT_PATTERN.fullmatch(top):
            continue
        depth = 1 if len(top) == 2 else 2
        level = [f"{root}/{top}"]
        for _ in range(depth):
            level = [f"{p}/{c}" for p, cs in _children_many(zk, level) for c in cs if _DIGITS.fullmatch(c)]
        units.extend(Unit(BK_LEDGERS, p, p[len(root) + 1 :].replace("/", "_")) for p in level)
    return units


def scan_bk_unit(config: ExtractConfig, prefix: str) -> dict[str, list[Any]]:
    """Read every ledger znode below ``prefix`` (columns of the ``bk_ledgers`` table)."""
    from ledger_deletion.formats.bk_paths import ledger_id_from_path

    zk = _zk(config)
    root = config.ledgers_root.rstrip("/")
    leaves: list[str] = []
    level = [prefix]
    while level:
        nxt: list[str] = []
        for parent, children in _children_many(zk, level):
            for child in children:
                if child.startswith("L"):
                    leaves.append(f"{parent}/{child}")
                elif _DIGITS.fullmatch(child):
                    nxt.append(f"{parent}/{child}")
        level = nxt
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMAS[BK_LEDGERS].names}
    for path, data, stat in _get_many(zk, leaves):
        try:
            ledger_id = ledger_id_from_path(path, root)
        except ValueError:
            continue  # not a canonical ledger path: BookKeeper would not read it either
        cols["ledger_id"].append(ledger_id)
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


# ---------------------------------------------------------------------------------------------------------
# Pulsar references
# ---------------------------------------------------------------------------------------------------------


def list_reference_units(config: ExtractConfig) -> list[Unit]:
    """``.../persistent`` dirs of the managed-ledger tree (V2 depth 3, V1 depth 4), schema namespaces."""
    zk = _pulsar_zk(config)
    units: list[Unit] = []
    ml_root = config.managed_ledgers_root.rstrip("/")
    level = [ml_root]
    for _depth in range(4):
        nxt: list[str] = []
        for parent, children in _children_many(zk, level):
            for child in children:
                path = f"{parent}/{child}"
                if child == "persistent" and parent != ml_root:
                    units.append(Unit(REFERENCES, "ml:" + path, "ml_" + _safe(path[len(ml_root) + 1 :])))
                else:
                    nxt.append(path)
        level = nxt
    schema_root = config.schemas_root.rstrip("/")
    for tenant in _children(zk, schema_root):
        for ns in _children(zk, f"{schema_root}/{tenant}"):
            path = f"{schema_root}/{tenant}/{ns}"
            units.append(Unit(REFERENCES, "schema:" + path, "schema_" + _safe(f"{tenant}/{ns}")))
    return units


def _refuse_without_pulsar_metadata(config: ExtractConfig, directory: Path) -> None:
    """Raise :class:`PulsarMetadataNotFound` when Pulsar's metadata store has no managed-ledgers root while
    the BK ledgers extracted into ``directory`` include Pulsar's: the store read is not the brokers' one.

    Every managed ledger's record lives under that root, so a store that ever held one has it; a store
    without it is not Pulsar's, or its chroot is wrong. (Should a cluster ever lose the root with its last
    topic while orphans remain, the job refuses where it could have gone on: the safe side.) The common case
    costs one ``exists``; only when the root is missing are the BK parts read (the ``application`` column
    alone). A cluster without Pulsar ledgers has nothing to protect and passes.
    """
    ml_root = config.managed_ledgers_root.rstrip("/") or "/"
    if _pulsar_zk(config).exists(ml_root) is not None:
        return
    tagged = pq.read_table(
        directory / BK_LEDGERS, columns=["application"], filters=[("application", "==", PULSAR_APPLICATION)]
    ).num_rows
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


def scan_reference_unit(config: ExtractConfig, key: str) -> dict[str, dict[str, list[Any]]]:
    """References (and offload contexts) of one unit: a ``persistent`` directory or a schema namespace."""
    zk = _pulsar_zk(config)
    refs: dict[str, list[Any]] = {name: [] for name in SCHEMAS[REFERENCES].names}
    ctxs: dict[str, list[Any]] = {name: [] for name in SCHEMAS[OFFLOAD_CONTEXTS].names}

    def ref(ledger_id: int, kind: str, owner: str, cursor: str | None = None) -> None:
        refs["ledger_id"].append(ledger_id)
        refs["kind"].append(kind)
        refs["owner"].append(owner)
        refs["cursor_name"].append(cursor)

    kind, path = key.split(":", 1)
    if kind == "schema":
        root = config.schemas_root.rstrip("/")
        for node_path, data, _ in _get_many(zk, [f"{path}/{c}" for c in _children(zk, path)]):
            schema_id = node_path[len(root) + 1 :]
            try:
                for ledger_id in schema_ledger_ids(parse_schema_locator(data)):
                    ref(ledger_id, "schema", schema_id)
            except MetadataFormatError:
                ref(-1, "unreadable", schema_id)
        return {REFERENCES: refs}
    ml_root = config.managed_ledgers_root.rstrip("/")
    ml_paths = [f"{path}/{c}" for c in _children(zk, path)]
    cursor_paths: list[str] = []
    for ml_path, children in _children_many(zk, ml_paths):
        cursor_paths.extend(f"{ml_path}/{c}" for c in children)
    for ml_path, data, _ in _get_many(zk, ml_paths):
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
    for cursor_path, data, _ in _get_many(zk, cursor_paths):
        ml_path, cursor = cursor_path.rsplit("/", 1)
        ml_name = ml_path[len(ml_root) + 1 :]
        try:
            ci = parse_managed_cursor_info(data)
        except MetadataFormatError:
            ref(-1, "unreadable", ml_name, cursor)
            continue
        if ci.cursorsLedgerId >= 0 and data:
            ref(ci.cursorsLedgerId, "cursor", ml_name, cursor)
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


def run_unit(config: ExtractConfig, unit: Unit, directory: str) -> dict[str, int]:
    """Scan one unit and write its part file(s); returns rows written per table (runs in a pool process)."""
    out = Path(directory)
    if unit.table == BK_LEDGERS:
        return {BK_LEDGERS: _write_part(out, BK_LEDGERS, unit.part_name, scan_bk_unit(config, unit.key))}
    if unit.table == OFFLOAD_OBJECTS:
        cols = scan_object_unit(config, unit.key)
        return {OFFLOAD_OBJECTS: _write_part(out, OFFLOAD_OBJECTS, unit.part_name, cols)}
    tables = scan_reference_unit(config, unit.key)
    return {table: _write_part(out, table, unit.part_name, cols) for table, cols in tables.items()}


def _empty_table(directory: Path, table: str) -> None:
    """An empty part so that every table can be read even when no unit produced rows."""
    out = directory / table
    out.mkdir(parents=True, exist_ok=True)
    if not any(out.glob("*.parquet")):
        pq.write_table(SCHEMAS[table].empty_table(), out / "part-empty.parquet")


def extract_all(
    config: ExtractConfig,
    directory: Path,
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
) -> ExtractResult:
    """Run the whole extract into ``directory`` (BK ledgers, then objects, then references).

    Raises:
        PulsarMetadataNotFound: right after the BK ledgers, before the (longer) object listing, when Pulsar's
            metadata store has no managed-ledgers root yet Pulsar-tagged ledgers exist.
    """
    directory.mkdir(parents=True, exist_ok=True)
    result = ExtractResult(directory)
    report = progress or (lambda _stage, _done, _total: None)
    stages: list[tuple[str, Callable[[ExtractConfig], list[Unit]], tuple[str, ...]]] = [
        (BK_LEDGERS, list_bk_units, (BK_LEDGERS,)),
        (OFFLOAD_OBJECTS, list_object_units, (OFFLOAD_OBJECTS,)),
        (REFERENCES, list_reference_units, (REFERENCES, OFFLOAD_CONTEXTS)),
    ]
    ctx = get_context("spawn")  # kazoo and the JVM gateway run threads: never fork them
    with ProcessPoolExecutor(max_workers=max(1, config.workers), mp_context=ctx) as pool:
        try:
            for stage, lister, tables in stages:
                started = time.monotonic()
                units = lister(config)
                if stage == REFERENCES:
                    for table in tables:  # always fresh: references must be newer than the listings
                        _clear(directory / table)
                todo = [u for u in units if not (resume and (directory / u.table / u.part_name).exists())]
                if stage != REFERENCES and not resume:
                    _clear(directory / stage)
                result.units[stage] = len(units)
                result.skipped_units[stage] = len(units) - len(todo)
                report(stage, 0, len(todo))
                futures = [pool.submit(run_unit, config, unit, str(directory)) for unit in todo]
                for done, future in enumerate(as_completed(futures), start=1):
                    future.result()
                    report(stage, done, len(todo))
                for table in tables:
                    _empty_table(directory, table)
                    result.rows[table] = pq.ParquetDataset(directory / table).read(columns=[]).num_rows
                result.seconds[stage] = time.monotonic() - started
                if stage == BK_LEDGERS:
                    _refuse_without_pulsar_metadata(config, directory)
        finally:
            _close_clients()
    return result


def _clear(path: Path) -> None:
    if path.exists():
        for part in path.glob("*"):
            part.unlink()


# ---------------------------------------------------------------------------------------------------------
# The alternative measured against the exporter: kazoo inside Spark tasks
# ---------------------------------------------------------------------------------------------------------


def spark_scan_bk_ledgers(spark: Any, config: ExtractConfig, units: Iterable[Unit]) -> Any:
    """The BK ledger scan as Spark tasks (one task per prefix unit) -> a ``bk_ledgers`` DataFrame."""
    from reconcile.transform import BK_LEDGERS_SCHEMA

    keys = [u.key for u in units]

    def scan(partition: Iterator[str]) -> Iterator[tuple[Any, ...]]:
        names = SCHEMAS[BK_LEDGERS].names
        for key in partition:
            cols = scan_bk_unit(config, key)
            for row in zip(*(cols[n] for n in names), strict=True):
                custom = row[names.index("custom")]
                yield tuple(
                    dict(custom) if n == "custom" and custom is not None else v
                    for n, v in zip(names, row, strict=True)
                )

    rdd = spark.sparkContext.parallelize(keys, max(1, len(keys))).mapPartitions(scan)
    return spark.createDataFrame(rdd, BK_LEDGERS_SCHEMA)
