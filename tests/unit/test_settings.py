"""Settings that fall back to others when left unset, and endpoints that have no default at all."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import (
    DELETING_POOLS,
    ENDPOINTS,
    POOLS,
    Settings,
    missing_endpoints,
    pool_endpoints,
)


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


ENDPOINT_ENV = {
    "temporal_address": "TEMPORAL_ADDRESS",
    "pulsar_url": "LEDGER_DELETION_PULSAR_URL",
    "pulsar_admin_url": "LEDGER_DELETION_PULSAR_ADMIN_URL",
    "zookeeper": "LEDGER_DELETION_ZOOKEEPER",
    "s3_endpoint": "LEDGER_DELETION_S3_ENDPOINT",
}


@pytest.fixture
def no_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment that sets no endpoint (as a pod that forgot them)."""
    for field in ENDPOINTS:
        for name in (ENDPOINT_ENV[field], f"LEDGER_DELETION_{field.upper()}"):
            monkeypatch.delenv(name, raising=False)


def test_endpoints_have_no_defaults(no_endpoints: None) -> None:
    assert set(ENDPOINT_ENV) == set(ENDPOINTS)
    assert missing_endpoints(Settings(), ENDPOINTS) == list(ENDPOINTS)


def test_a_command_is_refused_naming_each_missing_endpoint_and_what_it_is(
    no_endpoints: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    with pytest.raises(ConfigurationError) as refused:
        load_settings(require=pool_endpoints(POOLS))
    message = str(refused.value)
    assert message.startswith("missing settings: LEDGER_DELETION_PULSAR_URL (Pulsar service URL")
    for field in ("pulsar_url", "pulsar_admin_url", "zookeeper", "s3_endpoint"):
        assert f"{ENDPOINT_ENV[field]} ({Settings.model_fields[field].title})" in message
    assert "TEMPORAL_ADDRESS" not in message  # set, so not named
    assert message.endswith('for the embedded stack run: eval "$(ledger-deletion stack env)"')


@pytest.mark.parametrize(
    ("pool", "needs"),
    [
        ("workflow", {"temporal_address", "pulsar_admin_url", "zookeeper"}),  # its read-only checks
        ("pulsar", {"temporal_address", "pulsar_url", "pulsar_admin_url"}),
        ("bookkeeper", {"temporal_address", "zookeeper"}),
        ("offload", {"temporal_address", "s3_endpoint"}),
    ],
)
def test_each_pool_needs_only_the_endpoints_it_connects_to(
    pool: str, needs: set[str], no_endpoints: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pool in DELETING_POOLS:  # and, deciding or doing deletes, whether the BookKeeper is shared
        monkeypatch.setenv("LEDGER_DELETION_BOOKKEEPER_SHARED_WITH", "none")
    for field in needs:
        monkeypatch.setenv(ENDPOINT_ENV[field], "http://somewhere:1" if field == "s3_endpoint" else "host:1")
    assert load_settings(require=pool_endpoints([pool])).task_queue(pool)
    for field in needs:  # and each of them is needed
        monkeypatch.delenv(ENDPOINT_ENV[field])
        with pytest.raises(ConfigurationError, match=f"missing settings: {ENDPOINT_ENV[field]} "):
            load_settings(require=pool_endpoints([pool]))
        monkeypatch.setenv(ENDPOINT_ENV[field], "host:1")


def test_aws_is_chosen_by_an_empty_s3_endpoint_not_by_leaving_it_unset(
    no_endpoints: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_S3_ENDPOINT"):
        load_settings(require=("s3_endpoint",))
    monkeypatch.setenv("LEDGER_DELETION_S3_ENDPOINT", "")
    assert load_settings(require=("s3_endpoint",)).s3_endpoint == ""
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER", "")  # for the others, empty is as good as unset
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_ZOOKEEPER"):
        load_settings(require=("zookeeper",))


def test_only_endpoints_can_be_required() -> None:
    with pytest.raises(ValueError, match="not endpoints: topic"):
        missing_endpoints(Settings(), ["topic"])


def test_every_setting_says_what_it_is_and_every_endpoint_how_it_is_named() -> None:
    # The settings reference is generated from these descriptions.
    for name, field in Settings.model_fields.items():
        assert field.description and field.description.endswith("."), name
    for name in ENDPOINTS:
        assert Settings.model_fields[name].title, name


def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_MAX_ATTEMPTS", "0")
    monkeypatch.setenv("TEMPORAL_TLS", "maybe")
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_MAX_ATTEMPTS") as info:
        load_settings()
    assert "TEMPORAL_TLS" in str(info.value)
