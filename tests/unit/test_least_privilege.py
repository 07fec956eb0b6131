"""Reading and deleting run with separate ZooKeeper logins: each client takes its role's login, and a process
that deletes no ledger refuses to start holding the login that may (docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import SecretStr

from ledger_deletion.connections import zookeeper_digest, zookeeper_security
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import POOLS, Settings, load_settings, pool_deletes

DELETER = "deleter:delete-secret"
READER = "reader:read-secret"
METADATA = "metadata:meta-secret"


def test_each_client_takes_its_roles_digest() -> None:
    apart = Settings(
        zookeeper_digest=SecretStr(DELETER),
        zookeeper_read_digest=SecretStr(READER),
        pulsar_metadata_zookeeper_digest=SecretStr(METADATA),
    )
    assert zookeeper_digest(apart, deletes=True) == DELETER
    assert zookeeper_digest(apart) == READER
    assert zookeeper_digest(apart, pulsar_metadata=True) == METADATA


def test_each_client_takes_its_roles_sasl_login_and_the_same_tls() -> None:
    apart = Settings(
        zookeeper_sasl=SecretStr(DELETER),
        zookeeper_read_sasl=SecretStr(READER),
        pulsar_metadata_zookeeper_sasl=SecretStr(METADATA),
        zookeeper_tls=True,
        zookeeper_tls_ca_file="/ca.pem",
    )
    logins = {
        "delete": zookeeper_security(apart, deletes=True),
        "read": zookeeper_security(apart),
        "metadata": zookeeper_security(apart, pulsar_metadata=True),
    }
    assert {role: s.sasl for role, s in logins.items()} == {
        "delete": DELETER,
        "read": READER,
        "metadata": METADATA,
    }
    assert all(s.tls and s.ca_file == "/ca.pem" for s in logins.values())


def test_the_deleter_never_falls_back_to_the_readers_login() -> None:
    readers_only = Settings(zookeeper_read_digest=SecretStr(READER), zookeeper_read_sasl=SecretStr(READER))
    assert zookeeper_digest(readers_only, deletes=True) is None
    assert zookeeper_security(readers_only, deletes=True).sasl is None


def test_readers_fall_back_to_the_one_login_of_a_process_that_holds_only_it() -> None:
    """One machine running every pool with one login: its readers log in as that one identity."""
    one = Settings(zookeeper_digest=SecretStr(DELETER), zookeeper_sasl=SecretStr(DELETER))
    assert zookeeper_digest(one) == zookeeper_digest(one, pulsar_metadata=True) == DELETER
    assert zookeeper_security(one).sasl == zookeeper_security(one, pulsar_metadata=True).sasl == DELETER


def test_only_the_bookkeeper_pool_deletes_in_zookeeper() -> None:
    assert pool_deletes(["bookkeeper"]) == ("zookeeper",)
    assert pool_deletes(["offload"]) == ("s3",)
    for pool in ("workflow", "pulsar"):
        assert pool_deletes([pool]) == (), pool
    assert set(pool_deletes(POOLS)) == {"zookeeper", "s3"}


@pytest.mark.parametrize("variable", ["LEDGER_DELETION_ZOOKEEPER_DIGEST", "LEDGER_DELETION_ZOOKEEPER_SASL"])
def test_a_process_that_deletes_no_ledger_refuses_the_deleting_login(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, DELETER)
    reader_variable = variable.replace("ZOOKEEPER_", "ZOOKEEPER_READ_")
    for deletes in ((), ("s3",)):  # the workflow, pulsar and watch processes; the offload pool
        with pytest.raises(ConfigurationError) as refused:
            load_settings(deletes=deletes)
        message = str(refused.value)
        assert message.startswith("credentials this process must not hold: ")
        assert variable in message and reader_variable in message
        assert DELETER not in message and "delete-secret" not in message  # named, never shown
    for allowed in (load_settings(deletes=("zookeeper",)), load_settings()):  # bookkeeper pool; an operator
        assert DELETER in (allowed.zookeeper_digest_value, allowed.zookeeper_sasl_value)


def test_a_reader_with_the_reading_login_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER_READ_DIGEST", READER)
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER_READ_SASL", READER)
    settings = load_settings(deletes=())
    assert zookeeper_digest(settings) == READER
    assert zookeeper_digest(settings, deletes=True) is None


def test_a_login_that_is_not_user_and_password_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_ZOOKEEPER_READ_DIGEST", "just-a-user")
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_ZOOKEEPER_READ_DIGEST: not user:password"):
        load_settings(require=("zookeeper",), zookeeper="127.0.0.1:2181")


def _cli(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_DELETION_", "TEMPORAL_"))}
    env.update(
        TEMPORAL_ADDRESS="127.0.0.1:1",  # never reached: the refusal comes first
        LEDGER_DELETION_ZOOKEEPER="127.0.0.1:1",
        LEDGER_DELETION_PULSAR_URL="pulsar://127.0.0.1:1",
        LEDGER_DELETION_PULSAR_ADMIN_URL="http://127.0.0.1:1",
        **variables,
    )
    return subprocess.run(
        [sys.executable, "-c", "from ledger_deletion.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "command", [("worker", "--pool", "workflow"), ("worker", "--pool", "pulsar"), ("watch",)]
)
def test_a_reading_process_holding_the_deleting_login_does_not_start(command: tuple[str, ...]) -> None:
    done = _cli(*command, LEDGER_DELETION_ZOOKEEPER_DIGEST=DELETER)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: credentials this process must not hold: ")
    assert "LEDGER_DELETION_ZOOKEEPER_DIGEST" in done.stderr and "delete-secret" not in done.stderr
