"""ZooKeeper over TLS and with SASL (DIGEST-MD5), on private ZooKeepers started for these tests: the
service's adapters read ledger znodes through each, and wrong credentials or files are refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pydantic import SecretStr

from ledger_deletion.adapters.zookeeper import LedgerStore, ZooKeeperSecurity, kazoo_client
from ledger_deletion.connections import zookeeper_security
from ledger_deletion.errors import AuthorizationError, ConfigurationError, MetadataStoreUnavailable
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import Settings
from reconcile.extract import ExtractConfig, _session
from tests.connections.private_zookeeper import PrivateZooKeeper, private_zookeeper
from tests.tls_support import Issued, Pki, make_pki

LEDGER_ID = 4711
METADATA = b"BookieMetadataFormatVersion\t3\n"


def _settings(env: pytest.MonkeyPatch, hosts: str, **variables: str) -> Settings:
    env.setenv("LEDGER_DELETION_ZOOKEEPER", hosts)
    for name, value in variables.items():
        env.setenv(name, value)
    return load_settings(require=("zookeeper",))


def _store(settings: Settings) -> LedgerStore:
    return LedgerStore(settings.zookeeper, timeout_seconds=5, security=zookeeper_security(settings))


def _seed(client: KazooClient) -> None:
    client.start(timeout=10)
    try:
        client.create(ledger_path(LEDGER_ID, "/ledgers"), METADATA, makepath=True)
    finally:
        client.stop()
        client.close()


def test_the_security_becomes_kazoos_options() -> None:
    assert ZooKeeperSecurity().kazoo_options() == {}
    options = ZooKeeperSecurity(
        sasl="svc:pa:ss", tls=True, ca_file="/ca.pem", cert_file="/c.pem", key_file="/k.pem"
    ).kazoo_options()
    assert options == {
        "sasl_options": {"mechanism": "DIGEST-MD5", "username": "svc", "password": "pa:ss"},
        "use_ssl": True,
        "verify_certs": True,
        "check_hostname": True,
        "ca": "/ca.pem",
        "certfile": "/c.pem",
        "keyfile": "/k.pem",
    }


def test_pulsars_metadata_store_has_its_own_sasl_login_else_bookkeepers() -> None:
    settings = Settings(zookeeper_sasl=SecretStr("bk:one"), zookeeper_tls=True)
    assert zookeeper_security(settings, pulsar_metadata=True).sasl == "bk:one"
    apart = settings.with_overrides(pulsar_metadata_zookeeper_sasl=SecretStr("pm:two"))
    assert zookeeper_security(apart, pulsar_metadata=True).sasl == "pm:two"
    assert zookeeper_security(apart).sasl == "bk:one" and zookeeper_security(apart).tls


# --- TLS --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivateZooKeeper, Pki, Issued]]:
    directory = tmp_path_factory.mktemp("zk-tls")
    pki = make_pki(directory / "pki")
    with private_zookeeper(
        directory / "zk", tls=pki.issue("zookeeper", ips=("127.0.0.1",)), client_ca=pki.ca
    ) as zookeeper:
        client = pki.issue("ledger-deletion")
        security = ZooKeeperSecurity(
            tls=True, ca_file=str(pki.ca), cert_file=str(client.cert), key_file=str(client.key)
        )
        _seed(kazoo_client(zookeeper.secure_hosts, 10, security=security))
        yield zookeeper, pki, client


def _tls_variables(pki: Pki, client: Issued) -> dict[str, str]:
    return {
        "LEDGER_DELETION_ZOOKEEPER_TLS": "true",
        "LEDGER_DELETION_ZOOKEEPER_TLS_CA_FILE": str(pki.ca),
        "LEDGER_DELETION_ZOOKEEPER_TLS_CERT_FILE": str(client.cert),
        "LEDGER_DELETION_ZOOKEEPER_TLS_KEY_FILE": str(client.key),
    }


def test_the_ledger_store_reads_over_tls(tls_zookeeper, clean_env: pytest.MonkeyPatch) -> None:
    zookeeper, pki, client = tls_zookeeper
    store = _store(_settings(clean_env, zookeeper.secure_hosts, **_tls_variables(pki, client)))
    try:
        znode = store.read(LEDGER_ID)
        assert znode is not None and znode.data == METADATA
    finally:
        store.close()


def test_reconciles_extract_sessions_connect_over_tls(tls_zookeeper, clean_env: pytest.MonkeyPatch) -> None:
    zookeeper, pki, client = tls_zookeeper
    settings = _settings(clean_env, zookeeper.secure_hosts, **_tls_variables(pki, client))
    config = ExtractConfig(
        zookeeper=settings.zookeeper, zk_timeout=10, zk_security=zookeeper_security(settings)
    )
    reads = _session(config, config.zookeeper, None, config.zk_security)
    try:
        assert "ledgers" in reads.client.get_children("/")
    finally:
        reads.client.stop()
        reads.client.close()


def test_tls_without_the_client_certificate_or_with_another_ca_does_not_connect(
    tls_zookeeper, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    zookeeper, pki, client = tls_zookeeper
    settings = _settings(clean_env, zookeeper.secure_hosts, **_tls_variables(pki, client))
    other = make_pki(tmp_path / "other", "other-ca")
    for wrong in (
        settings.with_overrides(zookeeper_tls_cert_file="", zookeeper_tls_key_file=""),
        settings.with_overrides(zookeeper_tls_ca_file=str(other.ca)),
    ):
        store = _store(wrong)
        with pytest.raises(MetadataStoreUnavailable, match="unreachable over TLS"):
            store.read(LEDGER_ID)
        store.close()


def test_the_certificate_must_name_the_host_unless_the_check_is_off(
    tls_zookeeper, clean_env: pytest.MonkeyPatch
) -> None:
    zookeeper, pki, client = tls_zookeeper
    by_name = f"localhost:{zookeeper.secure_port}"  # the certificate names 127.0.0.1 only
    settings = _settings(clean_env, by_name, **_tls_variables(pki, client))
    store = _store(settings)
    with pytest.raises(MetadataStoreUnavailable, match="unreachable over TLS"):
        store.read(LEDGER_ID)
    store.close()
    store = _store(settings.with_overrides(zookeeper_tls_verify_hostname=False))
    try:
        assert store.read(LEDGER_ID) is not None
    finally:
        store.close()


# --- SASL -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateZooKeeper]:
    with private_zookeeper(tmp_path_factory.mktemp("zk-sasl"), sasl_users={"svc": "pa55word"}) as zookeeper:
        _seed(kazoo_client(zookeeper.hosts, 10, security=ZooKeeperSecurity(sasl="svc:pa55word")))
        yield zookeeper


def test_the_ledger_store_reads_with_a_sasl_login(sasl_zookeeper, clean_env: pytest.MonkeyPatch) -> None:
    settings = _settings(clean_env, sasl_zookeeper.hosts, LEDGER_DELETION_ZOOKEEPER_SASL="svc:pa55word")
    store = _store(settings)
    try:
        znode = store.read(LEDGER_ID)
        assert znode is not None and znode.data == METADATA
    finally:
        store.close()


def test_a_server_that_requires_sasl_refuses_a_client_without_it(
    sasl_zookeeper, clean_env: pytest.MonkeyPatch
) -> None:
    store = _store(_settings(clean_env, sasl_zookeeper.hosts))
    with pytest.raises(AuthorizationError, match="requires a SASL login.*LEDGER_DELETION_ZOOKEEPER_SASL"):
        store.read(LEDGER_ID)
    store.close()


# kazoo's connection thread dies on the server's answer to a refused login (an exception it does not catch);
# what matters here is what the service sees: no session, and an error that names the setting.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_wrong_sasl_password_does_not_get_in(sasl_zookeeper, clean_env: pytest.MonkeyPatch) -> None:
    store = _store(_settings(clean_env, sasl_zookeeper.hosts, LEDGER_DELETION_ZOOKEEPER_SASL="svc:wrong"))
    with pytest.raises(
        MetadataStoreUnavailable, match="SASL login it refused: LEDGER_DELETION_ZOOKEEPER_SASL"
    ):
        store.read(LEDGER_ID)
    store.close()


# --- refused at start --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {
                "LEDGER_DELETION_ZOOKEEPER_TLS": "true",
                "LEDGER_DELETION_ZOOKEEPER_TLS_CA_FILE": "/nonexistent",
            },
            "ZOOKEEPER_TLS_CA_FILE: no such file",
        ),
        (
            {"LEDGER_DELETION_ZOOKEEPER_TLS": "true", "LEDGER_DELETION_ZOOKEEPER_TLS_CERT_FILE": "{cert}"},
            "ZOOKEEPER_TLS_KEY_FILE: needed with LEDGER_DELETION_ZOOKEEPER_TLS_CERT_FILE",
        ),
        ({"LEDGER_DELETION_ZOOKEEPER_TLS_CA_FILE": "{ca}"}, "ZOOKEEPER_TLS is off while ZooKeeper TLS files"),
        (
            {"LEDGER_DELETION_ZOOKEEPER_SASL": "just-a-user"},
            "LEDGER_DELETION_ZOOKEEPER_SASL: not user:password",
        ),
    ],
)
def test_wrong_configuration_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch, pki: Pki, variables: dict[str, str], message: str
) -> None:
    cert = pki.issue("svc").cert
    filled = {k: v.format(cert=cert, ca=pki.ca) for k, v in variables.items()}
    with pytest.raises(ConfigurationError, match=message):
        _settings(clean_env, "zk:2281", **filled)
