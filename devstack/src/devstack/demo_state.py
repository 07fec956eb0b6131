"""The demo's state of its own on the shared embedded stack, so that it passes whatever ran there before.

Tests, soaks and earlier demos leave ledgers in the stack's ZooKeeper and closed runs in its one Temporal
namespace. The demo must neither meet those ledgers nor read those runs' outcomes as its own, so each of its
steps runs on:

- a ZooKeeper chroot of its own (:func:`own_cluster`), holding what BookKeeper and Pulsar create at a
  cluster's first start, with an admin emulator reading it: the pools, the checks and the simulated cluster
  see nothing another run wrote;
- its own deletion topic and task queues (``devstack.demo_shadow.run_settings`` and the step's settings);
- ledger ids that key no run in Temporal yet (:func:`fresh_ledger_ids`): a workflow id is the ledger's
  type and id, and the demo waits for a run by that id, so an earlier run of the same id would be read as
  the demo's. The ids come from the stack root's id generator, which no two callers share an id of, and each
  is checked against Temporal, which covers whatever wrote ids without it (test sessions, benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from devstack.admin_emulator import AdminEmulator
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.zookeeper import MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT, kazoo_client
from ledger_deletion.contracts import Mode
from ledger_deletion.formats.bk_paths import DEFAULT_LEDGERS_ROOT, HIERARCHICAL_LAYOUT
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.rollout import workflow_id
from ledger_deletion.settings import Settings

__all__ = ["LONG_ID_BASE", "DemoCluster", "LedgerIds", "OwnCluster", "fresh_ledger_ids", "own_cluster"]

# The demo's scenario adds this to some ids (ids past 2^31 live under the long znode layout): those ids are
# checked against Temporal too.
LONG_ID_BASE = 2**32


@dataclass
class OwnCluster:
    """A chroot of the stack's ZooKeeper, its admin emulator, and settings pointed at both."""

    zk: KazooClient  # chrooted
    settings: Settings


@contextlib.contextmanager
def own_cluster(
    endpoints: StackEndpoints, base: Settings, name: str, *, pulsar_metrics: str | None = None
) -> Iterator[OwnCluster]:
    """A fresh chroot ``/<name>-<random>`` of the stack's ZooKeeper and an admin emulator reading it, for
    the block; removed and stopped after it. ``settings`` is ``base`` pointed at them, alone on its
    BookKeeper (no other cluster's metadata store lives in the chroot). ``pulsar_metrics``: pulsar-lite's
    metrics URL, from which the emulator answers topic stats (a subscription's backlog)."""
    chroot = f"/{name}-{uuid.uuid4().hex[:8]}"
    hosts = f"{endpoints.zookeeper}{chroot}"
    with contextlib.ExitStack() as stack:
        root_zk = endpoints.zookeeper_client()
        stack.callback(root_zk.close)
        stack.callback(root_zk.stop)
        # What BookKeeper and Pulsar create at a cluster's first start; the create fails if the chroot is
        # there already, so no other run's znode can be in it.
        root_zk.create(f"{chroot}{DEFAULT_LEDGERS_ROOT}/LAYOUT", HIERARCHICAL_LAYOUT, makepath=True)
        stack.callback(root_zk.delete, chroot, recursive=True)
        for path in (f"{DEFAULT_LEDGERS_ROOT}/idgen", MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT):
            root_zk.ensure_path(f"{chroot}{path}")
        zk = kazoo_client(hosts, 10.0)
        zk.start(timeout=10)
        stack.callback(zk.close)
        stack.callback(zk.stop)
        emulator = AdminEmulator(
            hosts, port=0, owner_port=0, cluster=base.pulsar_cluster, pulsar_metrics=pulsar_metrics
        ).start()
        stack.callback(emulator.stop)
        settings = base.with_overrides(
            zookeeper=hosts,
            pulsar_metadata_zookeeper="",
            pulsar_admin_url=emulator.urls[0],
            admin_trusted_hosts=emulator.urls[1].split("://", 1)[1],  # where broker A's 307s lead
            bookkeeper_shared_with="none",
        )
        yield OwnCluster(zk, settings)


class LedgerIds:
    """Ledger ids handed out from a list checked beforehand (:func:`fresh_ledger_ids`); ``ids(n)``."""

    def __init__(self, ids: list[int]) -> None:
        self._ids = deque(ids)

    def __call__(self, count: int = 1) -> list[int]:
        if count > len(self._ids):
            raise RuntimeError(f"{count} ledger ids asked for, {len(self._ids)} left of those checked")
        return [self._ids.popleft() for _ in range(count)]


class DemoCluster(SimulatedCluster):
    """A simulated cluster whose ledger ids come from ``ids`` rather than its own id generator (a chroot's
    starts at 0, where every demo before would have its runs)."""

    def __init__(self, *args: Any, ids: LedgerIds, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ids = ids

    def new_ledger_ids(self, count: int = 1) -> list[int]:
        return self._ids(count)


async def fresh_ledger_ids(client: Client, allocate: Callable[[int], list[int]], count: int) -> LedgerIds:
    """``count`` ids from ``allocate`` (the demo: the stack root's id generator) of which neither the id nor
    ``LONG_ID_BASE`` + the id keys a run, live or shadow, in Temporal."""
    fresh: list[int] = []
    while len(fresh) < count:
        candidates = await asyncio.to_thread(allocate, count - len(fresh))
        used = await asyncio.gather(*(_keys_a_run(client, i) for i in candidates))
        fresh += [i for i, taken in zip(candidates, used, strict=True) if not taken]
    return LedgerIds(fresh)


async def _keys_a_run(client: Client, ledger_id: int) -> bool:
    """Does a run (any, open or closed) have the workflow id of a BookKeeper ledger ``ledger_id``? (An
    offloaded ledger's workflow id names its offload's uuid, which no earlier run can have.)"""
    for number in (ledger_id, LONG_ID_BASE + ledger_id):
        request = PendingDeleteLedgerInfo("t/n/x", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, number)
        for mode in Mode:
            try:
                await client.get_workflow_handle(workflow_id(request, mode)).describe()
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                continue
            return True
    return False
