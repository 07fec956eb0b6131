"""Reading and deleting run with separate ZooKeeper logins: each client takes its role's login, and a process
that deletes no ledger refuses to start holding the login that may (docs/security.md)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from ledger_deletion.connections import zookeeper_digest, zookeeper_security
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import POOLS, Settings, pool_deletes

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
        LEDGER_DELETION_BOOKKEEPER_SHARED_WITH="none",
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


# --- which client takes which login, read from the code ----------------------------------------------------

PRODUCT = ("ledger_deletion", "workflows", "activities", "workers", "reconcile")
ROOT = Path(__file__).resolve().parents[2]


def _calls() -> list[tuple[str, ast.Call]]:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    found.append((str(path.relative_to(ROOT)), node))
    return found


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _deletes(call: ast.Call) -> bool:
    return any(
        k.arg == "deletes" and isinstance(k.value, ast.Constant) and k.value.value for k in call.keywords
    )


def test_only_the_bookkeeper_pools_ledger_store_asks_for_the_deleting_login() -> None:
    calls = _calls()
    stores = [(path, call) for path, call in calls if _name(call) == "LedgerStore"]
    assert [path for path, _ in stores] == ["workers/pools.py"]
    (store,) = (call for _, call in stores)
    # Its digest and its SASL/TLS, both the deleting identity's.
    assert sorted(_name(arg) for arg in store.args if isinstance(arg, ast.Call) and _deletes(arg)) == [
        "zookeeper_digest",
        "zookeeper_security",
    ]
    login_calls = [(p, c) for p, c in calls if _name(c) in ("zookeeper_digest", "zookeeper_security")]
    assert len(login_calls) > 10  # the readers' clients: workflow pool, watcher, reconcile
    deleting = [c for _, c in login_calls if _deletes(c)]
    assert len(deleting) == 2 and all(any(c is arg for arg in store.args) for c in deleting)


def test_no_client_reads_the_deleting_login_but_through_connections() -> None:
    """``settings.zookeeper_digest_value`` and ``_sasl_value`` are the deleter's: only
    ``ledger_deletion.connections`` (and the readers' fall-back in settings) may pick them."""
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative in ("ledger_deletion/connections.py", "ledger_deletion/settings.py"):
                continue
            text = path.read_text()
            for attribute in (
                "zookeeper_digest_value",
                "zookeeper_sasl_value",
                "zookeeper_digest.",
                "zookeeper_sasl.",
            ):
                assert f"settings.{attribute}" not in text, (relative, attribute)
