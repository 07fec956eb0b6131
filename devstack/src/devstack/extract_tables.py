"""Synthetic extract tables: the Parquet ``reconcile.extract`` writes, made directly (no ZooKeeper, no S3).

The reconcile benchmark's Spark-only mode measures the reconcile on clusters of 1M to 10M ledgers, sizes the
ZooKeeper generator (``devstack.generator``, one znode at a time) cannot reach in minutes. Every column is
built with numpy and pyarrow compute over whole arrays (no Python loop per row), so 10M ledgers are written in
seconds, in the exact schemas of ``reconcile.extract.SCHEMAS``, one directory per table.

The cluster: topics of :data:`BLOCK` consecutive ledger ids, each the managed ledger
``tenant-<t % 10>/ns-<t % 100>/persistent/topic-<t>`` with one cursor ``sub``. Offsets 0-5 and 7 of a block
are its data ledgers (7 the newest), offset 6 its cursor's ledger. Every topic's ledgers are in the id
listing; the references list the data ledgers and the cursor's, except where a rule of topic number ``t``
below leaves one out (an orphan) or marks it offloaded. Like the extract, ``bk_ledgers`` holds the metadata
of the listed ledgers no reference keeps (any kind but ``offloaded-bk-deleted``) only.

=============  ==============================================================  ===========================
t              what                                                            reconcile's verdict
=============  ==============================================================  ===========================
t % 4 == 0     data ledger at offset 2 not listed, old, CLOSED                 candidate (LEDGER data)
t % 16 == 1    data ledger at offset 3 not listed, created after the cut-off   excluded ``too-young``
t % 16 == 2    ledger at offset 4 not listed, ``application=other``            excluded ``not-pulsar``
t % 32 == 3    cursor ledger at offset 5 (below the stored one), not listed    candidate (LEDGER cursor)
t % 8 == 5     data ledger at offset 0 offloaded (context, two objects)        not a finding
t % 16 == 13   ... and its BK copy released (``offloaded-bk-deleted``), gone   not a finding
t % 64 == 13   ... but the BK copy still there                                 candidate (bk-copy reason)
t % 8 == 7     two objects of ledger ``ORPHAN_OFFLOAD_BASE + t``, no context   candidate (OFFLOAD_LEDGER)
=============  ==============================================================  ===========================

The offloaded objects' user metadata (what the job HEADs) is, for every orphan, ``ManagedLedgerName`` = its
topic's managed ledger and the role its key calls for: :func:`owner_of_orphan_offload` tells it from the
ledger id, which is what the benchmark's HEAD stand-in answers. :func:`truth` is the exact set of requests
the job must write.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reconcile.extract import SCHEMAS

__all__ = [
    "BLOCK",
    "ORPHAN_OFFLOAD_BASE",
    "ExtractTables",
    "head_owners",
    "owner_of_orphan_offload",
    "truth",
    "write_extract_tables",
]

BLOCK = 8  # ledger ids per topic
CURSOR_OFFSET = 6
ORPHAN_OFFLOAD_BASE = 1 << 40  # ledger ids of orphaned objects: above every listed id, no BK ledger
STORE = "127.0.0.1:2181"
BUCKET = "offload"
CURSOR = "sub"
# Ages, relative to ``now_ms``: old enough for any minimum age the benchmark uses, or newer than its cut-off.
OLD_MS = 30 * 86_400_000
YOUNG_MS = 60_000
PART_ROWS = 2_000_000  # rows per Parquet part file: the extract writes many parts; so does this

# The tables' schemas are the extract's own: what this writes must read as what the extract writes.


@dataclass(frozen=True)
class ExtractTables:
    """What was written: the directory (one sub-directory per table) and the rows of each table."""

    directory: Path
    rows: dict[str, int]
    topics: int


def _topics(ledgers: int) -> int:
    return max(1, ledgers // BLOCK)


def _ml(t: np.ndarray) -> pa.Array:
    """The managed-ledger name of each topic number."""
    return pc.binary_join_element_wise(
        "tenant-",
        pc.cast(pa.array(t % 10), pa.string()),
        "/ns-",
        pc.cast(pa.array(t % 100), pa.string()),
        "/persistent/topic-",
        pc.cast(pa.array(t), pa.string()),
        "",
    )


def _uuids(rng: np.random.Generator, n: int) -> pa.Array:
    """``n`` random version-4 uuids as text, formatted over the whole array at once."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    hexdigits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    nibbles = np.empty((n, 32), dtype=np.uint8)
    nibbles[:, 0::2], nibbles[:, 1::2] = hexdigits[raw >> 4], hexdigits[raw & 0x0F]
    dash = np.full((n, 1), ord("-"), dtype=np.uint8)
    text = np.hstack(
        [nibbles[:, :8], dash, nibbles[:, 8:12], dash, nibbles[:, 12:16], dash, nibbles[:, 16:20]]
    )
    text = np.hstack([text, dash, nibbles[:, 20:]])
    return pa.array(text.reshape(-1).view("S36").astype(str) if n else np.array([], dtype=str), pa.string())


def _write(directory: Path, table: pa.Table) -> int:
    shutil.rmtree(directory, ignore_errors=True)  # no part file of an earlier, other cluster left beside
    directory.mkdir(parents=True)
    for index, start in enumerate(range(0, max(table.num_rows, 1), PART_ROWS)):
        pq.write_table(table.slice(start, PART_ROWS), directory / f"part-{index:05d}.parquet")
    return int(table.num_rows)


def _column(value: object, n: int, kind: pa.DataType) -> pa.Array:
    """A constant column (pyarrow fills it natively; a numpy array of strings would cost seconds at 10M)."""
    return pa.repeat(pa.scalar(value, kind), n)


def _pick(choices: list[str], index: np.ndarray) -> pa.Array:
    """``choices[index[i]]`` for every i, as a pyarrow take (no numpy array of strings)."""
    return pc.take(pa.array(choices, pa.string()), pa.array(index.astype(np.int32)))


def write_extract_tables(directory: Path, ledgers: int, *, now_ms: int, seed: int = 1) -> ExtractTables:
    """The six extract tables of a cluster of about ``ledgers`` BK ledgers (whole topics of :data:`BLOCK`)
    under ``directory``; ``now_ms`` is the clock the ages are taken from."""
    rng = np.random.default_rng(seed)
    topics = _topics(ledgers)
    t = np.arange(topics, dtype=np.int64)
    base = t * BLOCK + 1
    ml = _ml(t)
    offset = np.tile(np.arange(BLOCK, dtype=np.int64), topics)
    ids = np.repeat(base, BLOCK) + offset
    tt = np.repeat(t, BLOCK)
    orphan = (
        ((tt % 4 == 0) & (offset == 2))
        | ((tt % 16 == 1) & (offset == 3))
        | ((tt % 16 == 2) & (offset == 4))
        | ((tt % 32 == 3) & (offset == 5))
    )
    offloaded = (tt % 8 == 5) & (offset == 0)
    released = (tt % 16 == 13) & (offset == 0)
    copy_left = (tt % 64 == 13) & (offset == 0)
    listed = ~released | copy_left
    rows: dict[str, int] = {}

    rows["bk_ledger_ids"] = _write(
        directory / "bk_ledger_ids", pa.table({"ledger_id": pa.array(ids[listed])}, SCHEMAS["bk_ledger_ids"])
    )

    # References: every ledger of a topic but its orphans, by kind; then the cursor's position.
    referenced = ~orphan
    is_cursor = offset == CURSOR_OFFSET
    kind = np.where(is_cursor, 1, np.where(released, 2, 0))  # data, cursor, offloaded-bk-deleted
    ref_t = tt[referenced]
    ref_owner = pc.take(ml, pa.array(ref_t))
    n_ref = int(referenced.sum())
    refs = pa.table(
        {
            "ledger_id": pa.array(ids[referenced]),
            "kind": _pick(["data", "cursor", "offloaded-bk-deleted"], kind[referenced]),
            "owner": ref_owner,
            "cursor_name": pc.if_else(pa.array(is_cursor[referenced]), CURSOR, pa.nulls(n_ref, pa.string())),
            "store": _column(STORE, n_ref, pa.string()),
        },
        SCHEMAS["references"],
    )
    # The cursor's mark-delete position, in the newest data ledger.
    positions = pa.table(
        {
            "ledger_id": pa.array(base + BLOCK - 1),
            "kind": _column("position", topics, pa.string()),
            "owner": ml,
            "cursor_name": _column(CURSOR, topics, pa.string()),
            "store": _column(STORE, topics, pa.string()),
        },
        SCHEMAS["references"],
    )
    rows["references"] = _write(directory / "references", pa.concat_tables([refs, positions]))

    namespaces = np.unique(np.stack([t % 10, t % 100], axis=1), axis=0)
    ns = pc.binary_join_element_wise(
        "tenant-",
        pc.cast(pa.array(namespaces[:, 0]), pa.string()),
        "/ns-",
        pc.cast(pa.array(namespaces[:, 1]), pa.string()),
        "",
    )
    rows["namespaces"] = _write(
        directory / "namespaces",
        pa.table({"store": _column(STORE, len(ns), pa.string()), "namespace": ns}, SCHEMAS["namespaces"]),
    )

    # Offloads: the contexts and objects of the offloaded ledgers, and the orphaned objects.
    off_t = tt[offloaded]
    off_ids = ids[offloaded]
    off_uuid = _uuids(rng, len(off_ids))
    contexts = pa.table(
        {
            "ledger_id": pa.array(off_ids),
            "uuid": off_uuid,
            "variant": _column("ledger", len(off_ids), pa.string()),
            "managed_ledger": pc.take(ml, pa.array(off_t)),
            "bucket": _column(BUCKET, len(off_ids), pa.string()),
            "complete": _column(True, len(off_ids), pa.bool_()),
        },
        SCHEMAS["offload_contexts"],
    )
    rows["offload_contexts"] = _write(directory / "offload_contexts", contexts)
    orphan_t = t[t % 8 == 7]
    orphan_ids = ORPHAN_OFFLOAD_BASE + orphan_t
    orphan_uuid = _uuids(rng, len(orphan_ids))

    def objects(uuids: pa.Array, ledger_ids: np.ndarray) -> pa.Table:
        data = pc.binary_join_element_wise(uuids, "-ledger-", pc.cast(pa.array(ledger_ids), pa.string()), "")
        index = pc.binary_join_element_wise(data, "-index", "")
        n = len(ledger_ids)
        return pa.table(
            {
                "bucket": _column(BUCKET, 2 * n, pa.string()),
                "key": pa.concat_arrays([data, index]),
                "size": pa.array(np.concatenate([np.full(n, 64 << 20), np.full(n, 4096)]), pa.int64()),
                "last_modified_ms": _column(now_ms - OLD_MS, 2 * n, pa.int64()),
            },
            SCHEMAS["offload_objects"],
        )

    rows["offload_objects"] = _write(
        directory / "offload_objects",
        pa.concat_tables([objects(off_uuid, off_ids), objects(orphan_uuid, orphan_ids)]),
    )

    # bk_ledgers: the metadata of the listed ledgers no reference keeps, as the extract reads it.
    unkept = (orphan | copy_left) & listed
    u_ids, u_t, u_off = ids[unkept], tt[unkept], offset[unkept]
    n = len(u_ids)
    u_ml = pc.take(ml, pa.array(u_t))
    cursor = u_off == 5
    pulsar = ~((u_t % 16 == 2) & (u_off == 4))
    created = np.where((u_t % 16 == 1) & (u_off == 3), now_ms - YOUNG_MS, now_ms - OLD_MS)
    application = _pick(["other", "pulsar"], pulsar.astype(np.int32))
    component = _column("managed-ledger", n, pa.string())
    cursor_name = pc.if_else(pa.array(cursor), CURSOR, pa.nulls(n, pa.string()))
    keys = _pick(["application", "component", "pulsar/managed-ledger"], np.tile(np.arange(3), n))
    # Each ledger's three tag values, interleaved: value i of tag k is at k * n + i of the concatenation.
    order = (np.arange(3, dtype=np.int64)[None, :] * n + np.arange(n, dtype=np.int64)[:, None]).reshape(-1)
    values = pc.take(pa.concat_arrays([application, component, u_ml]), pa.array(order))
    custom = pa.MapArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)), keys, values)
    path = pc.binary_join_element_wise("/ledgers/L", pc.cast(pa.array(u_ids), pa.string()), "")
    bk = pa.table(
        {
            "ledger_id": pa.array(u_ids),
            "path": path,
            "format_version": _column(3, n, pa.int32()),
            "application": application,
            "component": component,
            "managed_ledger": u_ml,
            "cursor_name": cursor_name,
            "schema_id": pa.nulls(n, pa.string()),
            "compacted_topic": pa.nulls(n, pa.string()),
            "custom": custom,
            "length": pa.array(u_ids % 1000 * 1024, pa.int64()),
            "state": _column("CLOSED", n, pa.string()),
            "ctime_ms": pa.array(created, pa.int64()),
            "mtime_ms": pa.array(created, pa.int64()),
            "md_ctime_ms": pa.nulls(n, pa.int64()),
            "parse_error": pa.nulls(n, pa.string()),
        },
        SCHEMAS["bk_ledgers"],
    )
    rows["bk_ledgers"] = _write(directory / "bk_ledgers", bk)
    return ExtractTables(directory, rows, topics)


def owner_of_orphan_offload(ledger_id: int) -> str:
    """The ``ManagedLedgerName`` the orphaned objects of this ledger id carry (the generator's tagging)."""
    t = ledger_id - ORPHAN_OFFLOAD_BASE
    return f"tenant-{t % 10}/ns-{t % 100}/persistent/topic-{t}"


def truth(ledgers: int) -> dict[str, np.ndarray]:
    """The requests the reconcile must write for :func:`write_extract_tables` of ``ledgers``: ledger ids by
    request kind (``data``, ``cursor``, ``offload``), each sorted."""
    t = np.arange(_topics(ledgers), dtype=np.int64)
    base = t * BLOCK + 1
    data = np.concatenate([base[t % 4 == 0] + 2, base[t % 64 == 13]])
    return {
        "data": np.sort(data),
        "cursor": base[t % 32 == 3] + 5,
        "offload": ORPHAN_OFFLOAD_BASE + t[t % 8 == 7],
    }


def head_owners(
    groups: Sequence[tuple[str, str, int | None, Sequence[str]]],
) -> list[tuple[str, str, int | None, str | None, bool, bool]]:
    """What ``reconcile.candidates.head_owners`` finds HEADing these groups' objects, had the generator put
    them in a bucket: every orphaned object carries its topic's ``ManagedLedgerName`` and the role of its
    key, so each group is owned, tagged and without conflict. The benchmark's Spark-only mode answers the
    HEADs with it (S3 is estimated apart, as requests x latency / concurrency: docs/reconcile.md)."""
    return [
        (
            bucket,
            uid,
            ledger_id,
            None if ledger_id is None else owner_of_orphan_offload(ledger_id),
            False,
            False,
        )
        for bucket, uid, ledger_id, _keys in groups
    ]
