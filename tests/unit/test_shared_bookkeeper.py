"""LEDGER_DELETION_BOOKKEEPER_SHARED_WITH: parsed into stores, required by every process that deletes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from ledger_deletion import tripwire
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import POOLS, WATCH_REQUIRES, Settings, pool_endpoints
from ledger_deletion.shared_bookkeeper import SharedBookKeeper, namespace_of

ENV = "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH"
STACK = {
    "TEMPORAL_ADDRESS": "temporal:7233",
    "LEDGER_DELETION_PULSAR_URL": "pulsar://broker:6650",
    "LEDGER_DELETION_PULSAR_ADMIN_URL": "http://broker:8080",
    "LEDGER_DELETION_ZOOKEEPER": "zk:2181",
    "LEDGER_DELETION_S3_ENDPOINT": "http://s3:9000",
}


def test_none_means_this_cluster_alone() -> None:
    assert SharedBookKeeper.parse("none") == SharedBookKeeper(alone=True)
    assert SharedBookKeeper.parse(" none ") == SharedBookKeeper(alone=True)


@pytest.mark.parametrize(
    ("value", "stores"),
    [
        ("zkb:2181/", ("zkb:2181/",)),
        ("zk1:2181,zk2:2181/pulsar-b", ("zk1:2181,zk2:2181/pulsar-b",)),
        (
            "zk1:2181,zk2:2181/pulsar-b,zkc:2181/,zkd/a/b",
            ("zk1:2181,zk2:2181/pulsar-b", "zkc:2181/", "zkd/a/b"),
        ),
        (" zk1:2181 , zk2:2181/b ", ("zk1:2181,zk2:2181/b",)),
    ],
)
def test_an_entry_ends_at_the_host_carrying_its_chroot(value: str, stores: tuple[str, ...]) -> None:
    assert SharedBookKeeper.parse(value) == SharedBookKeeper(alone=False, other_stores=stores)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("zk1:2181,zk2:2181", "ends without a chroot"),  # would swallow the next store's hosts
        ("zkb:2181/b,zkc:2181", "ends without a chroot"),
        ("none,zkb:2181/", "cannot be listed with stores"),
        ("zkb:2181/b,,zkc:2181/", "is not host:port"),
        ("zkb:port/b", "is not host:port"),
        ("zkb:2181/b/", "not a ZooKeeper path"),
        ("zkb:2181//b", "not a ZooKeeper path"),
        ("zkb:2181/b,zkb:2181/b", "listed twice"),
        ("None", "ends without a chroot"),  # a host named None, not the word
    ],
)
def test_anything_else_is_refused_naming_the_rule(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as refused:
        SharedBookKeeper.parse(value)
    assert "whose last host carries the store's chroot" in str(refused.value)


def test_a_bad_value_is_refused_at_start_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "zk1:2181,zk2:2181")
    with pytest.raises(ConfigurationError, match=f"{ENV}: .*ends without a chroot"):
        load_settings()


def _every_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in STACK.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("pools", [["workflow"], ["bookkeeper"], ["offload"], list(POOLS)])
def test_a_deleting_pool_unset_refuses_to_start_naming_the_setting_and_its_docs(
    pools: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _every_endpoint(monkeypatch)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(require=pool_endpoints(pools))
    assert f"missing settings: {ENV} (" in str(refused.value)
    assert "docs/deployment.md#shared-bookkeeper" in str(refused.value)
    monkeypatch.setenv(ENV, "none")
    assert load_settings(require=pool_endpoints(pools)).shared_bookkeeper.alone


def test_the_pulsar_pool_which_deletes_nothing_needs_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    _every_endpoint(monkeypatch)
    assert load_settings(require=pool_endpoints(["pulsar"])).bookkeeper_shared_with == ""


def test_watch_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _every_endpoint(monkeypatch)
    with pytest.raises(ConfigurationError, match=f"missing settings: {ENV} "):
        load_settings(require=WATCH_REQUIRES)
    monkeypatch.setenv(ENV, "zkb:2181/pulsar-b")
    shared = load_settings(require=WATCH_REQUIRES).shared_bookkeeper
    assert shared == SharedBookKeeper(alone=False, other_stores=("zkb:2181/pulsar-b",))


def test_reading_it_unset_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=ENV):
        assert Settings().shared_bookkeeper


@pytest.mark.parametrize(
    ("name", "namespace"),
    [
        ("public/default/persistent/orders", "public/default"),
        ("public/default/persistent/orders/sub%20a", "public/default"),  # a cursor's
        ("t/c/ns/persistent/orders", "t/c/ns"),  # v1's tenant/cluster/namespace
        ("public/default/orders", "public/default"),  # a schema id
        ("public/default/persistent", "public/default"),  # a schema id of a topic named so
        ("orders", None),
        ("/default/persistent/orders", None),
    ],
)
def test_the_namespace_of_a_managed_ledger_or_schema(name: str, namespace: str | None) -> None:
    assert namespace_of(name) == namespace


def _started(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``ledger-deletion`` process, with every endpoint set and the shared-BookKeeper answer not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGER_DELETION_", "TEMPORAL_"))}
    env.update(STACK)
    return subprocess.run(
        [sys.executable, "-c", "from ledger_deletion.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "command",
    [
        ("worker", "--pool", "workflow"),
        ("worker", "--pool", "bookkeeper"),
        ("worker", "--pool", "offload"),
        ("worker", "--pool", "all"),
        ("watch",),
        pytest.param(
            ("reconcile", "--submit"),
            marks=pytest.mark.skipif(
                importlib.util.find_spec("pyspark") is None, reason="reconcile needs the spark extra"
            ),
        ),
    ],
)
def test_every_process_that_deletes_or_requests_refuses_to_start_unset(command: tuple[str, ...]) -> None:
    done = _started(*command)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: missing settings: {ENV} ("), done.stderr
    assert "docs/deployment.md#shared-bookkeeper" in done.stderr


def test_the_tripwires_window_and_evidence() -> None:
    now = 1_800_000_000.0
    window_ms = tripwire.WINDOW.total_seconds() * 1000
    assert tripwire.WINDOW.total_seconds() == 6 * 3600  # the 4 h rollover defaults plus 2 h to decide
    assert tripwire.is_evidence(now * 1000 - window_ms + 1000, now)
    assert tripwire.is_evidence(now * 1000 + 60_000, now)  # a clock ahead of ours: recent
    assert not tripwire.is_evidence(now * 1000 - window_ms - 1000, now)
    evidence = tripwire.Evidence("t/ns", 42, int(now * 1000), "the watcher")
    note = f"paused by x at y: another writer shares this BookKeeper: {evidence.describe()}"
    assert tripwire.TripState(True, note).namespaces == ("t/ns",)
    assert tripwire.TripState(False, note).namespaces == ()


def test_the_embedded_stacks_env_says_none() -> None:
    from devstack.stack import StackEndpoints, StackPorts

    endpoints = StackEndpoints.for_ports(StackPorts())
    assert endpoints.as_env()[ENV] == "none"
    assert endpoints.settings().shared_bookkeeper.alone
