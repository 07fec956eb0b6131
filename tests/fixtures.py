"""The fixtures both test trees share (``tests/``, ``bench/tests/``), registered by the root ``conftest.py``:
one embedded stack per test session, shared by every test that needs it.

The stack is the one ``ledger-deletion stack up`` runs (real Temporal dev server, pulsar-lite, ZooKeeper, moto
S3, admin emulator). Each session uses its own deletion topic and task queues, and every test its own ledger
ids, so sessions and tests never see each other's messages or ledgers. Under pytest-xdist each worker is a
session of its own: nothing here assumes one session per run.
"""

from __future__ import annotations

import itertools
import os
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.stack import Stack, StackEndpoints
from devstack.stack import default_state_dir as _default_state_dir
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import ClusterStore, running_pools
from workers.pools import RunningPools

# Variables of the dev stack and of the tests themselves (state directories, screenshots), not settings of
# the service: kept.
_KEPT_VARIABLES = frozenset({"LEDGER_DELETION_UI_SCREENSHOTS"})


@pytest.fixture(autouse=True)
def _no_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell (``eval "$(ledger-deletion stack env)"``, a Temporal profile for another cluster)
    must not change what a test runs against: every test builds its settings explicitly."""
    for name in list(os.environ):
        kept = name in _KEPT_VARIABLES or name.endswith("_STACK_DIR")
        if name.startswith(("LEDGER_DELETION_", "TEMPORAL_")) and not kept:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def stack() -> StackEndpoints:
    state_dir = Path(os.environ.get("LEDGER_DELETION_STACK_DIR", _default_state_dir()))
    endpoints = Stack(state_dir).up()
    # boto3 inside the service reads credentials from the standard chain: point it at moto's dummy ones.
    for name, value in endpoints.as_env().items():
        if name.startswith("AWS_"):
            os.environ.setdefault(name, value)
    return endpoints


@pytest.fixture(scope="session")
def session_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def settings(stack: StackEndpoints, session_id: str) -> Settings:
    return stack.settings(
        topic=f"persistent://pulsar/system/__ledger_deletion_test_{session_id}",
        task_queue_prefix=f"ld-test-{session_id}",
        max_attempts=4,
        retry_initial_seconds=0.2,
        retry_max_interval_seconds=1.0,
        activity_timeout_seconds=20,
        in_use_rechecks=2,
        in_use_recheck_seconds=1.5,
        ack_schedule_to_start_seconds=10,
        # pulsar-lite can stop feeding a consumer part-way through a big backlog: a fresh one soon takes over.
        ingest_resubscribe_idle_seconds=3,
        shutdown_grace_seconds=2,
        # The stack's audit bucket, under a prefix of the session's own: its records are its own to count.
        audit_prefix=f"test-{session_id}/audit",
    )


@pytest.fixture(scope="session")
async def temporal_client(stack: StackEndpoints) -> Client:
    return await Client.connect(stack.temporal_address)


@pytest.fixture(scope="session")
async def service(settings: Settings, temporal_client: Client) -> AsyncIterator[RunningPools]:
    """All four pools running in this process against the session's topic and task queues."""
    async with running_pools(settings, temporal_client) as running:
        yield running


@pytest.fixture(scope="session")
def publisher(settings: Settings) -> Iterator[RequestPublisher]:
    with RequestPublisher(settings) as publisher:
        yield publisher


@pytest.fixture(scope="session")
def zk(stack: StackEndpoints) -> Iterator[Any]:
    client = stack.zookeeper_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def s3(stack: StackEndpoints) -> Iterator[Any]:
    client = stack.s3_client()
    yield client
    client.close()  # its pooled connections, not left for the garbage collector


@pytest.fixture(scope="session")
def cluster_store(stack: StackEndpoints, zk: Any, s3: Any) -> ClusterStore:
    """Where this tier's simulated clusters write: the shared stack (the fault tier has its own)."""
    return ClusterStore(zk, s3, stack.offload_bucket)


@pytest.fixture
def make_cluster(cluster_store: ClusterStore) -> Iterator[Callable[..., SimulatedCluster]]:
    """Factory of simulated clusters on the tier's store, for a test that needs one unlike ``cluster``: on
    another chroot (``metadata_root``), bucket or client, or two of them. What each wrote is removed after the
    test (unless the store is kept): other sessions share the stack."""
    made: list[SimulatedCluster] = []

    def make(*, zk: Any = None, bucket: str | None = None, metadata_root: str = "") -> SimulatedCluster:
        simulated = SimulatedCluster(
            cluster_store.zk if zk is None else zk,
            cluster_store.s3,
            bucket=cluster_store.bucket if bucket is None else bucket,
            metadata_root=metadata_root,
        )
        made.append(simulated)
        return simulated

    yield make
    if not cluster_store.keep:
        for simulated in made:
            simulated.cleanup()


@pytest.fixture
def cluster(make_cluster: Callable[..., SimulatedCluster]) -> SimulatedCluster:
    """A simulated Pulsar cluster on the tier's store, its writes removed after the test."""
    return make_cluster()


_ids = itertools.count(random.randrange(10**6, 2**31 - 10**8, 1000))
_long_ids = itertools.count(2**32 + random.randrange(0, 2**40, 1000))


@pytest.fixture
def new_ledger_id() -> Any:
    """Allocator of ledger ids nobody else in this session uses (``long=True``: ≥ 2^32, long znode path)."""

    def allocate(long: bool = False) -> int:
        return next(_long_ids) if long else next(_ids)

    return allocate
