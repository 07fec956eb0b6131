"""BookKeeper's LAYOUT, read from the real ZooKeeper: the service runs only on ledger paths it knows.

On a cluster formatted with another ledger manager every ledger lives elsewhere, so every request would find
no znode and be acked as already deleted while the orphan stays: the bookkeeper pool refuses to start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from ledger_deletion.adapters.zookeeper import LedgerStore
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings
from tests.conftest import running_pools

pytestmark = pytest.mark.stack

HIERARCHICAL = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"


@pytest.fixture
def root(zk: Any) -> Iterator[str]:
    path = f"/layout-test-{uuid.uuid4().hex[:8]}/ledgers"
    zk.ensure_path(path)
    yield path
    zk.delete(path.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize(
    ("layout", "manager"),
    [
        (None, None),  # not formatted yet: nothing to misread
        (HIERARCHICAL, "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"),
        (
            b"2\norg.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory:1",
            "org.apache.pulsar.metadata.bookkeeper.PulsarLedgerManagerFactory",
        ),
    ],
)
def test_the_hierarchical_managers_are_accepted(
    zk: Any, root: str, stack: Any, layout: bytes | None, manager: str | None
) -> None:
    if layout is not None:
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
