"""BookKeeper's LAYOUT, read from the real ZooKeeper: the service runs only on ledger paths it knows.

On a cluster formatted with another ledger manager every ledger lives elsewhere, and under a root without
LAYOUT there are no BookKeeper ledgers at all (a wrong chroot or root): every request would find no znode and
be acked as already deleted while the orphan stays. The bookkeeper pool refuses to start, and a ledger not
found under a root without LAYOUT is an error (retried, then dead-lettered), not "already deleted".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.bookkeeper import BookKeeperReadActivities
from ledger_deletion.adapters.zookeeper import LedgerStore, PulsarMetadataStore
from ledger_deletion.contracts import Verdict, VerifyBkMetadataInput
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.formats.bk_paths import HIERARCHICAL_LAYOUT
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.support import running_pools

pytestmark = pytest.mark.stack

HIERARCHICAL = HIERARCHICAL_LAYOUT


@pytest.fixture
def root(zk: Any) -> Iterator[str]:
    path = f"/layout-test-{uuid.uuid4().hex[:8]}/ledgers"
    zk.ensure_path(path)
    yield path
    zk.delete(path.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize(
    ("layout", "manager"),
    [
        (HIERARCHICAL, "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"),
        (
            b"2\norg.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory:1",
            "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory",
        ),
    ],
)
def test_the_hierarchical_managers_are_accepted(
    zk: Any, root: str, stack: Any, layout: bytes, manager: str
) -> None:
    zk.create(f"{root}/LAYOUT", layout)
    store = LedgerStore(stack.zookeeper, root)
    try:
        assert store.check_layout() == manager
    finally:
        store.close()


@pytest.mark.parametrize(
    "layout",
    [
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1\n",
        b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1\n",
        b"2\norg.apache.bookkeeper.meta.MSLedgerManagerFactory:1\n",
        b"\xff\xfe not a layout",
    ],
)
def test_any_other_manager_is_refused(zk: Any, root: str, stack: Any, layout: bytes) -> None:
    zk.create(f"{root}/LAYOUT", layout)
    store = LedgerStore(stack.zookeeper, root)
    try:
        with pytest.raises(ConfigurationError, match="only the default hierarchical manager"):
            store.check_layout()
    finally:
        store.close()


async def test_the_bookkeeper_pool_refuses_to_start_on_another_layout(
    zk: Any, root: str, settings: Settings, temporal_client: Client
) -> None:
    zk.create(f"{root}/LAYOUT", b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1\n")
    elsewhere = settings.model_copy(update={"bk_ledgers_root": root})
    with pytest.raises(ConfigurationError, match="FlatLedgerManagerFactory"):
        async with running_pools(elsewhere, temporal_client, ("bookkeeper",)):
            pass


def test_a_root_without_layout_is_refused(root: str, stack: Any) -> None:
    store = LedgerStore(stack.zookeeper, root)
    try:
        with pytest.raises(ConfigurationError, match="not a BookKeeper ledgers root") as refused:
            store.check_layout()
    finally:
        store.close()
    assert root in str(refused.value) and "LEDGER_DELETION_BK_LEDGERS_ROOT" in str(refused.value)


async def test_the_bookkeeper_pool_refuses_to_start_on_a_root_without_layout(
    root: str, settings: Settings, temporal_client: Client
) -> None:
    """A chroot left out, or a root mistyped: it used to start and ack every request as already deleted."""
    elsewhere = settings.model_copy(update={"bk_ledgers_root": root})
    with pytest.raises(ConfigurationError, match="not a BookKeeper ledgers root"):
        async with running_pools(elsewhere, temporal_client, ("bookkeeper",)):
            pass


def test_not_found_under_a_root_without_layout_is_an_error_not_already_deleted(
    zk: Any, root: str, stack: Any, new_ledger_id: Any
) -> None:
    """The pool started while ZooKeeper was out of reach (no check), or the root lost its LAYOUT: a missing
    znode there is no proof the ledger is gone. Retried, then dead-lettered; once LAYOUT is there, the same
    request is "not found" (the ledger really is gone)."""
    store = LedgerStore(stack.zookeeper, root)
    activities = BookKeeperReadActivities(store, PulsarMetadataStore(stack.zookeeper))
    request = PendingDeleteLedgerInfo(
        "layout/ns/t-partition-0", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, new_ledger_id()
    )
    env = ActivityEnvironment()
    try:
        with pytest.raises(ApplicationError, match="not a BookKeeper ledgers root") as raised:
            env.run(activities.verify_bk_metadata, VerifyBkMetadataInput(request))
        assert (raised.value.type, raised.value.non_retryable) == ("LedgersRootNotFound", False)
        zk.create(f"{root}/LAYOUT", HIERARCHICAL)
        verified = env.run(activities.verify_bk_metadata, VerifyBkMetadataInput(request))
        assert verified.verdict is Verdict.NOT_FOUND
    finally:
        store.close()


def test_not_found_under_another_managers_layout_is_an_error_even_without_the_start_check(
    zk: Any, root: str, stack: Any, new_ledger_id: Any
) -> None:
    """The pool started while ZooKeeper was out of reach, so the start-up check was skipped: a LAYOUT of
    another manager must not then be taken as "formatted" (its ledgers are elsewhere)."""
    zk.create(f"{root}/LAYOUT", b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1\n")
    store = LedgerStore(stack.zookeeper, root)
    activities = BookKeeperReadActivities(store, PulsarMetadataStore(stack.zookeeper))
    request = PendingDeleteLedgerInfo(
        "layout/ns/t-partition-0", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, new_ledger_id()
    )
    try:
        for _ in range(2):  # and not cached as formatted after the first refusal
            with pytest.raises(ApplicationError, match="FlatLedgerManagerFactory") as raised:
                ActivityEnvironment().run(activities.verify_bk_metadata, VerifyBkMetadataInput(request))
            assert raised.value.type == "ConfigurationError"
    finally:
        store.close()
