"""Pulsar's metadata in a store of its own (``metadataStoreUrl``), apart from BookKeeper's ZooKeeper.

A chroot on the embedded stack's ZooKeeper stands in for the separate store; BookKeeper's ledgers live under a
root (or chroot) of their own on the same server. Every test uses fresh, unique paths, so nothing another
test writes to the shared ZooKeeper is seen, and nothing of ours is seen by others.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_deletion.errors import PulsarMetadataNotFound
from ledger_deletion.formats.bk_metadata import (
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    managed_ledger_custom_metadata,
    schema_custom_metadata,
)
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.formats.managed_ledger import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    SchemaLocator,
    serialize_managed_cursor_info,
    serialize_managed_ledger_info,
    serialize_schema_locator,
)
from reconcile.extract import REFERENCES, ExtractConfig
from reconcile.job import CANDIDATES_AVRO, CANDIDATES_JSONL, JobConfig, run

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

ML_NAME = "public/default/persistent/orders"
SCHEMA_ID = "public/default/orders"
SETTING = "LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER"
FOREIGN_TAGS = {"application": "bookkeeper-table-service", "component": "range"}


@dataclass(frozen=True)
class Store:
    """A place on the shared ZooKeeper: ``hosts`` (with its chroot, if any) as a client is given it."""

    hosts: str
    top: str  # the znode on the real root to remove afterwards


@dataclass(frozen=True)
class PulsarLedgers:
    """Ids of a tiny Pulsar cluster: what its metadata references, and one orphan."""

    data: int
    cursor: int
    schema: int
    orphan: int

    @property
    def referenced(self) -> set[int]:
        return {self.data, self.cursor, self.schema}


@pytest.fixture
def new_store(stack: Any, zk: Any) -> Iterator[Callable[[str], Store]]:
    """Maker of unique chroots (created, empty) on the stack's ZooKeeper; all removed after the test."""
    made: list[Store] = []

    def make(kind: str) -> Store:
        top = f"/{kind}-{uuid.uuid4().hex[:10]}"
        zk.ensure_path(top)
        made.append(Store(stack.zookeeper + top, top))
        return made[-1]

    yield make
    for store in made:
        zk.delete(store.top, recursive=True)


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts)
    client.start()
    return client


def _write_ledger(client: KazooClient, ledgers_root: str, ledger_id: int, custom: dict[str, str]) -> None:
    data = build_pulsar_ledger_metadata(custom, length=100, last_entry_id=9)
    client.create(ledger_path(ledger_id, ledgers_root), data, makepath=True)


def _write_bk_ledgers(hosts: str, ledgers_root: str, ids: PulsarLedgers) -> None:
    client = _client(hosts)
    try:
        _write_ledger(client, ledgers_root, ids.data, managed_ledger_custom_metadata(ML_NAME))
        _write_ledger(client, ledgers_root, ids.cursor, cursor_custom_metadata(ML_NAME, "sub"))
        _write_ledger(client, ledgers_root, ids.schema, schema_custom_metadata(SCHEMA_ID))
        _write_ledger(client, ledgers_root, ids.orphan, managed_ledger_custom_metadata(ML_NAME))
    finally:
        client.stop()
        client.close()


def _write_pulsar_metadata(hosts: str, ids: PulsarLedgers) -> None:
    """What a broker keeps for one topic: its ledger list, a cursor with its ledger, a schema locator."""
    info = ManagedLedgerInfo()
    info.ledgerInfo.add(ledgerId=ids.data, entries=10, size=100, timestamp=1)
    cursor = ManagedCursorInfo(cursorsLedgerId=ids.cursor, markDeleteLedgerId=ids.data, markDeleteEntryId=3)
    locator = SchemaLocator()
    entry = locator.index.add(version=0, hash=b"\x01" * 8)
    entry.position.ledgerId = ids.schema
    entry.position.entryId = 0
    locator.info.CopyFrom(locator.index[-1])
    client = _client(hosts)
    try:
        client.create(f"/managed-ledgers/{ML_NAME}", serialize_managed_ledger_info(info), makepath=True)
        client.create(f"/managed-ledgers/{ML_NAME}/sub", serialize_managed_cursor_info(cursor))
        client.create(f"/schemas/{SCHEMA_ID}", serialize_schema_locator(locator), makepath=True)
    finally:
        client.stop()
        client.close()


def _ledgers(new_ledger_id: Callable[[], int]) -> PulsarLedgers:
    # The orphan first: a ledger trimmed away is older than what its topic lists (a newer one would be kept
    # as newer than listed).
    orphan = new_ledger_id()
    return PulsarLedgers(new_ledger_id(), new_ledger_id(), new_ledger_id(), orphan)


def _job(extract: ExtractConfig, out: Path) -> JobConfig:
    # Cut-off a second after everything was written: every ledger is old enough, none too young.
    now_ms = int(time.time() * 1000) + 1000
    return JobConfig(extract=extract, out=out, now_ms=now_ms, min_age_seconds=0, master="local[2]")


@pytest.mark.spark
def test_references_are_read_from_pulsars_own_store(
    stack: Any,
    spark: Any,
    s3: Any,
    new_store: Callable[[str], Store],
    new_ledger_id: Callable[[], int],
    tmp_path: Path,
) -> None:
    """BK ledgers at the top level of the server, Pulsar's metadata in a chroot: the referenced ledgers are
    kept, the unreferenced one is the only candidate."""
    ids = _ledgers(new_ledger_id)
    bk_root = new_store("reconcile-bk").top + "/ledgers"  # on the real root: no chroot for BookKeeper
    meta = new_store("pulsar-meta")
    _write_bk_ledgers(stack.zookeeper, bk_root, ids)
    _write_pulsar_metadata(meta.hosts, ids)
    extract = ExtractConfig(
        zookeeper=stack.zookeeper, ledgers_root=bk_root, pulsar_metadata_zookeeper=meta.hosts, workers=1
    )

    result = run(_job(extract, tmp_path), spark=spark, s3_client=s3)

    assert {r.ledger_id for r in result.requests} == {ids.orphan}
    references = spark.read.parquet(result.extract.path(REFERENCES)).collect()
    assert {r["ledger_id"] for r in references} == ids.referenced  # every one found in the chroot
    assert (tmp_path / CANDIDATES_JSONL).read_text().count("\n") == 1


def test_pulsar_metadata_missing_from_the_store_read_refuses(
    stack: Any, new_store: Callable[[str], Store], new_ledger_id: Callable[[], int], tmp_path: Path
) -> None:
    """The failure of reading Pulsar's metadata from BookKeeper's ZooKeeper when it lives elsewhere: the store
    read has no managed-ledgers root, so every Pulsar ledger, referenced or not, used to be a candidate. Now
    the job refuses before reconciling, naming the store it read and the setting, and writes no candidates."""
    ids = _ledgers(new_ledger_id)
    bk = new_store("reconcile-bk")
    _write_bk_ledgers(bk.hosts, "/ledgers", ids)
    _write_pulsar_metadata(new_store("pulsar-meta").hosts, ids)  # where the (unconfigured) brokers wrote it
    extract = ExtractConfig(zookeeper=bk.hosts, workers=1)  # no pulsar_metadata_zookeeper: BK's is read

    with pytest.raises(PulsarMetadataNotFound) as refused:
        run(_job(extract, tmp_path))  # no Spark: the refusal comes before the reconcile

    message = str(refused.value)
    assert bk.hosts in message and "/managed-ledgers" in message and SETTING in message
    assert "4 BookKeeper ledgers" in message
    assert not (tmp_path / CANDIDATES_JSONL).exists() and not (tmp_path / CANDIDATES_AVRO).exists()
    assert not (tmp_path / "extract" / REFERENCES).exists()  # stopped before the references were read


def test_cli_refuses_with_exit_code_2(
    stack: Any,
    new_store: Callable[[str], Store],
    new_ledger_id: Callable[[], int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The setting points at a chroot without Pulsar's metadata: exit code 2, the error on stderr."""
    from reconcile.cli import run_from_settings

    bk = new_store("reconcile-bk")
    _write_bk_ledgers(bk.hosts, "/ledgers", _ledgers(new_ledger_id))
    wrong = new_store("pulsar-meta").hosts  # exists, but holds no managed ledgers
    for name, value in stack.as_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER", bk.hosts)
    monkeypatch.setenv(SETTING, wrong)
    out = tmp_path / "out"

    code = run_from_settings(master="local[2]", min_age="0", tenant=None, out=out, submit=True)

    assert code == 2
    stderr = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "refused:" in stderr and wrong in stderr and SETTING in stderr
    assert not (out / CANDIDATES_JSONL).exists()


@pytest.mark.spark
def test_cluster_without_pulsar_ledgers_runs_without_managed_ledgers_root(
    stack: Any,
    spark: Any,
    s3: Any,
    new_store: Callable[[str], Store],
    new_ledger_id: Callable[[], int],
    tmp_path: Path,
) -> None:
    """No Pulsar ledgers and no managed-ledgers root (a new cluster): nothing to protect, the job runs."""
    bk = new_store("reconcile-bk")
    foreign = new_ledger_id()
    client = _client(bk.hosts)
    try:
        _write_ledger(client, "/ledgers", foreign, FOREIGN_TAGS)
    finally:
        client.stop()
        client.close()
    extract = ExtractConfig(zookeeper=bk.hosts, pulsar_metadata_zookeeper=new_store("pulsar-meta").hosts)

    result = run(_job(extract, tmp_path), spark=spark, s3_client=s3)

    assert result.requests == [] and result.rejected == []
    findings = spark.read.parquet(str(tmp_path / "findings.parquet")).collect()
    assert [(r["ledger_id"], r["reason"]) for r in findings] == [(foreign, "not-pulsar")]
    assert (tmp_path / CANDIDATES_JSONL).read_text() == ""


def test_each_store_has_its_own_session(stack: Any, new_store: Callable[[str], Store]) -> None:
    """The per-process sessions are keyed by hosts and digest: BookKeeper's and Pulsar's coexist, and one
    store given twice shares one session."""
    from reconcile.extract import _close_clients, _pulsar_zk, _zk

    meta = new_store("pulsar-meta")
    apart = ExtractConfig(zookeeper=stack.zookeeper, pulsar_metadata_zookeeper=meta.hosts)
    together = ExtractConfig(zookeeper=stack.zookeeper)
    try:
        bk_session = _zk(apart)
        assert _pulsar_zk(apart) is not bk_session
        assert _pulsar_zk(apart).exists("/") and bk_session.exists(meta.top)  # both connected, both usable
        assert _zk(together) is bk_session and _pulsar_zk(together) is bk_session
        assert _pulsar_zk(ExtractConfig(zookeeper=stack.zookeeper, zk_auth_digest="u:p")) is not bk_session
    finally:
        _close_clients()
