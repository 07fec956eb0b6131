"""ZooKeeper's ACLs enforce least privilege (docs/security.md): on a private ZooKeeper whose znodes carry the
digest ACLs that page prescribes, the reading identity does every check the workflow pool and the watcher do
through the service's own adapters, and is refused a ledger delete; the deleting identity deletes. The same
with SASL logins on a ZooKeeper that requires them.

ZooKeeper checks DELETE on the *parent* of the znode being deleted (PrepRequestProcessor, OpCode.delete:
``checkACL(..., parentRecord.acl, ZooDefs.Perms.DELETE, ...)``; the Programmer's Guide: "DELETE: you can
delete a child node"), and ACLs are not inherited: each znode carries its own. So the deleter's DELETE goes on
the ledgers root and on every intermediate znode of the hierarchical layout (``<root>/00/0000`` holds
``L4711``), READ on every znode it reads; the ledger znodes themselves need no DELETE for anyone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, make_acl, make_digest_acl

from ledger_deletion.adapters.zookeeper import (
    LedgerReader,
    LedgerStore,
    PulsarMetadataStore,
    ZooKeeperSecurity,
    kazoo_client,
)
from ledger_deletion.connections import zookeeper_digest, zookeeper_security
from ledger_deletion.errors import AuthorizationError
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import Settings
from tests.connections.private_zookeeper import PrivateZooKeeper, private_zookeeper

ROOT = "/ledgers"
LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"
METADATA = b"BookieMetadataFormatVersion\t3\n"
MANAGED_LEDGER = "public/default/persistent/t1"
SCHEMA = "public/default/t1"
ADMIN = ("admin", "admin-secret")  # creates the tree, as BookKeeper and Pulsar would
READER = ("ledger-deletion-reader", "read-secret")
DELETER = ("ledger-deletion-deleter", "delete-secret")


def _grants(*, deleter_deletes: bool) -> list[ACL]:
    """A znode's ACL: everything for its creator, READ for the reader, READ (and DELETE of its children with
    ``deleter_deletes``) for the deleter; nothing for anyone else (no world:anyone entry)."""
    return [
        make_digest_acl(*ADMIN, all=True),
        make_digest_acl(*READER, read=True),
        make_digest_acl(*DELETER, read=True, delete=deleter_deletes),
    ]


def _reader_only() -> list[ACL]:
    return [make_digest_acl(*ADMIN, all=True), make_digest_acl(*READER, read=True)]


def _admin(zookeeper: PrivateZooKeeper) -> KazooClient:
    return kazoo_client(zookeeper.hosts, 10, [("digest", ":".join(ADMIN))])


def _seed(zk: KazooClient, ledger_id: int) -> str:
    """Create a ledger znode and its intermediate znodes with the deleter's DELETE on every parent."""
    path = ledger_path(ledger_id, ROOT)
    parts = path[len(ROOT) + 1 :].split("/")
    parent = ROOT
    for part in parts[:-1]:
        parent = f"{parent}/{part}"
        if not zk.exists(parent):
            zk.create(parent, b"", acl=_grants(deleter_deletes=True))
    zk.create(path, METADATA, acl=_grants(deleter_deletes=False))
    return path


@pytest.fixture(scope="module")
def acl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateZooKeeper]:
    with private_zookeeper(tmp_path_factory.mktemp("zk-acl")) as zookeeper:
        zk = _admin(zookeeper)
        zk.start(timeout=10)
        try:
            # Ledgers root: the deleter may delete its children (the top intermediate znodes it prunes).
            zk.create(ROOT, b"", acl=_grants(deleter_deletes=True))
            zk.create(f"{ROOT}/LAYOUT", LAYOUT, acl=_grants(deleter_deletes=False))
            # Pulsar's metadata: READ for the reader only; the deleter never reads it.
            for root in ("/managed-ledgers", "/schemas"):
                zk.create(root, b"", acl=_reader_only())
            parent = "/managed-ledgers"
            for part in MANAGED_LEDGER.split("/"):
                parent = f"{parent}/{part}"
                zk.create(parent, b"ml-info" if parent.endswith("/t1") else b"", acl=_reader_only())
            zk.create(f"{parent}/sub", b"cursor-info", acl=_reader_only())
            parent = "/schemas"
            for part in SCHEMA.split("/"):
                parent = f"{parent}/{part}"
                zk.create(parent, b"locator" if parent.endswith("/t1") else b"", acl=_reader_only())
        finally:
            zk.stop()
            zk.close()
        yield zookeeper


def _settings(env: pytest.MonkeyPatch, zookeeper: PrivateZooKeeper, **variables: str) -> Settings:
    env.setenv("LEDGER_DELETION_ZOOKEEPER", zookeeper.hosts)
    for name, value in variables.items():
        env.setenv(name, value)
    return load_settings(require=("zookeeper",))


def _seeded(zookeeper: PrivateZooKeeper, ledger_id: int) -> str:
    zk = _admin(zookeeper)
    zk.start(timeout=10)
    try:
        return _seed(zk, ledger_id)
    finally:
        zk.stop()
        zk.close()


def _exists(zookeeper: PrivateZooKeeper, path: str) -> bool:
    zk = _admin(zookeeper)
    zk.start(timeout=10)
    try:
        return zk.exists(path) is not None
    finally:
        zk.stop()
        zk.close()


def _store(settings: Settings, *, deletes: bool) -> LedgerStore:
    """The bookkeeper pool's adapter, logged in as ``connections`` picks for a client that deletes or not."""
    return LedgerStore(
        settings.zookeeper,
        ROOT,
        5,
        zookeeper_digest(settings, deletes=deletes),
        zookeeper_security(settings, deletes=deletes),
    )


def test_the_reader_does_every_check_and_is_refused_a_delete(
    acl_zookeeper: PrivateZooKeeper, clean_env: pytest.MonkeyPatch
) -> None:
    path = _seeded(acl_zookeeper, 4711)
    settings = _settings(clean_env, acl_zookeeper, LEDGER_DELETION_ZOOKEEPER_READ_DIGEST=":".join(READER))
    # The workflow pool's and the watcher's read clients, built as workers/pools.py builds them.
    ledgers = LedgerReader(
        settings.zookeeper, ROOT, 5, zookeeper_digest(settings), zookeeper_security(settings)
    )
    metadata = PulsarMetadataStore(
        settings.pulsar_metadata_hosts,
        5,
        zookeeper_digest(settings, pulsar_metadata=True),
        zookeeper_security(settings, pulsar_metadata=True),
    )
    try:
        assert ledgers.check_layout() == "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
        found = ledgers.read(4711)
        assert found is not None and found.data == METADATA
        assert ledgers.read(4712) is None
        metadata.confirm_managed_ledgers_root()
        assert metadata.read_managed_ledger(MANAGED_LEDGER) == b"ml-info"
        assert metadata.read_managed_cursor(MANAGED_LEDGER, "sub") == b"cursor-info"
        assert metadata.read_schema_locator(SCHEMA) == b"locator"
    finally:
        ledgers.close()
        metadata.close()

    # A reader's process has no LedgerStore; were a bug to build one, ZooKeeper still refuses its delete.
    store = _store(settings, deletes=False)
    try:
        version = store.read(4711)
        assert version is not None
        with pytest.raises(AuthorizationError, match="NoAuth"):
            store.delete(4711, version.version)
    finally:
        store.close()
    assert _exists(acl_zookeeper, path)


def test_the_deleter_deletes_the_ledger_and_prunes_its_empty_parents(
    acl_zookeeper: PrivateZooKeeper, clean_env: pytest.MonkeyPatch
) -> None:
    path = _seeded(acl_zookeeper, 2**31 + 5)  # the long layout: four intermediate znodes, all pruned
    top = f"{ROOT}/{path[len(ROOT) + 1 :].split('/')[0]}"
    settings = _settings(
        clean_env,
        acl_zookeeper,
        LEDGER_DELETION_ZOOKEEPER_DIGEST=":".join(DELETER),
        LEDGER_DELETION_ZOOKEEPER_READ_DIGEST=":".join(READER),
    )
    store = _store(settings, deletes=True)
    try:
        assert store.check_layout()
        found = store.read(2**31 + 5)
        assert found is not None
        assert store.delete(2**31 + 5, found.version) is True
    finally:
        store.close()
    assert not _exists(acl_zookeeper, path)
    assert not _exists(
        acl_zookeeper, top
    )  # pruned up to, not including, the root: DELETE on the root is what allows it
    assert _exists(acl_zookeeper, f"{ROOT}/LAYOUT")


def test_delete_on_the_ledger_znode_itself_does_not_let_anyone_delete_it(
    acl_zookeeper: PrivateZooKeeper, clean_env: pytest.MonkeyPatch
) -> None:
    """ZooKeeper checks the parent's ACL: a DELETE grant on the znode is not what counts."""
    ledger_id = 2**31 + 77
    path = ledger_path(ledger_id, ROOT)
    zk = _admin(acl_zookeeper)
    zk.start(timeout=10)
    try:
        _seed(zk, ledger_id)
        zk.set_acls(
            path, [make_digest_acl(*ADMIN, all=True), make_digest_acl(*READER, read=True, delete=True)]
        )
    finally:
        zk.stop()
        zk.close()
    settings = _settings(clean_env, acl_zookeeper, LEDGER_DELETION_ZOOKEEPER_READ_DIGEST=":".join(READER))
    store = _store(settings, deletes=False)
    try:
        found = store.read(ledger_id)
        assert found is not None
        with pytest.raises(AuthorizationError):
            store.delete(ledger_id, found.version)
    finally:
        store.close()
    assert _exists(acl_zookeeper, path)


def test_without_a_login_nothing_is_readable(
    acl_zookeeper: PrivateZooKeeper, clean_env: pytest.MonkeyPatch
) -> None:
    """The ACLs grant no world:anyone: a process without the reading login reads nothing."""
    _seeded(acl_zookeeper, 4713)
    settings = _settings(clean_env, acl_zookeeper)
    ledgers = LedgerReader(
        settings.zookeeper, ROOT, 5, zookeeper_digest(settings), zookeeper_security(settings)
    )
    try:
        with pytest.raises(AuthorizationError):
            ledgers.read(4713)
    finally:
        ledgers.close()


# --- SASL: the same split, with sasl:<user> ids ----------------------------------------------------------


def _sasl_grants(*, deleter_deletes: bool) -> list[ACL]:
    return [
        make_acl("sasl", ADMIN[0], all=True),
        make_acl("sasl", READER[0], read=True),
        make_acl("sasl", DELETER[0], read=True, delete=deleter_deletes),
    ]


@pytest.fixture(scope="module")
def sasl_acl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateZooKeeper]:
    users = dict([ADMIN, READER, DELETER])
    with private_zookeeper(tmp_path_factory.mktemp("zk-sasl-acl"), sasl_users=users) as zookeeper:
        zk = kazoo_client(zookeeper.hosts, 10, security=ZooKeeperSecurity(sasl=":".join(ADMIN)))
        zk.start(timeout=10)
        try:
            zk.create(ROOT, b"", acl=_sasl_grants(deleter_deletes=True))
            parent = ledger_path(4711, ROOT).rsplit("/", 1)[0]  # L4711 and L4712 share it
            zk.create(parent.rsplit("/", 1)[0], b"", acl=_sasl_grants(deleter_deletes=True))
            zk.create(parent, b"", acl=_sasl_grants(deleter_deletes=True))
            for ledger_id in (4711, 4712):
                zk.create(ledger_path(ledger_id, ROOT), METADATA, acl=_sasl_grants(deleter_deletes=False))
        finally:
            zk.stop()
            zk.close()
        yield zookeeper


def test_with_sasl_logins_the_reader_is_refused_and_the_deleter_deletes(
    sasl_acl_zookeeper: PrivateZooKeeper, clean_env: pytest.MonkeyPatch
) -> None:
    settings = _settings(
        clean_env,
        sasl_acl_zookeeper,
        LEDGER_DELETION_ZOOKEEPER_READ_SASL=":".join(READER),
        LEDGER_DELETION_ZOOKEEPER_SASL=":".join(DELETER),
    )
    reader, deleter = _store(settings, deletes=False), _store(settings, deletes=True)
    try:
        found = reader.read(4711)
        assert found is not None and found.data == METADATA
        with pytest.raises(AuthorizationError, match="NoAuth"):
            reader.delete(4711, found.version)
        assert deleter.delete(4711, found.version) is True
        assert deleter.read(4711) is None
        assert reader.read(4712) is not None  # its sibling, and so the shared parent, are still there
    finally:
        reader.close()
        deleter.close()
