"""Settings that fall back to others when left unset."""

from __future__ import annotations

from pydantic import SecretStr

from ledger_deletion.settings import Settings


def test_pulsars_metadata_store_is_bookkeepers_zookeeper_unless_set() -> None:
    default = Settings(zookeeper="zk-bk:2181", zookeeper_digest=SecretStr("svc:bk-secret"))
    assert default.pulsar_metadata_hosts == "zk-bk:2181"
    assert default.pulsar_metadata_digest_value == "svc:bk-secret"

    apart = default.with_overrides(
        pulsar_metadata_zookeeper="zk-meta:2181,zk-meta-2:2181/pulsar",
        pulsar_metadata_zookeeper_digest=SecretStr("svc:meta-secret"),
    )
    assert apart.pulsar_metadata_hosts == "zk-meta:2181,zk-meta-2:2181/pulsar"
    assert apart.pulsar_metadata_digest_value == "svc:meta-secret"
    assert apart.zookeeper_digest_value == "svc:bk-secret"


def test_the_metadata_store_is_read_from_its_environment_variable(monkeypatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER", "zk-meta:2181/pulsar")
    assert Settings().pulsar_metadata_hosts == "zk-meta:2181/pulsar"
    assert Settings().zookeeper_digest_value is None
