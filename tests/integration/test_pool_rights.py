"""Which process runs which steps, and which rights it holds for them.

The workflow pool runs the read-only checks as local activities, with read clients only: nothing it holds can
delete a ledger's metadata. Deleting stays with the bookkeeper pool (and the offload pool), each on its own
task queue; the pulsar pool keeps the dead letters and the acks.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from ledger_deletion.adapters.zookeeper import LedgerReader, LedgerStore
from ledger_deletion.contracts import Mode
from ledger_deletion.settings import Settings
from ledger_deletion.tripwire import View
from tests.support import running_pools

pytestmark = pytest.mark.stack

CHECKS = {
    "check_topic",
    "ask_owner_broker",
    "verify_bk_metadata",
    "check_offload_superseded",
    "check_offload_listed",
}


def _names(activities: Any) -> set[str]:
    return {getattr(fn, "__temporal_activity_definition").name for fn in activities}


def _holders(activities: Any) -> list[object]:
    """Every client the activities' classes hold."""
    return [client for fn in activities for client in vars(fn.__self__).values()]


async def test_each_pool_runs_only_its_own_steps(settings: Settings, temporal_client: Client) -> None:
    custom = settings.with_overrides(task_queue_prefix=f"{settings.task_queue_prefix}-rights")
    # Not the pulsar pool: it would consume the session's deletion topic.
    async with running_pools(custom, temporal_client, pools=("workflow", "bookkeeper", "offload")) as running:
        config = {w.config().get("task_queue"): w.config() for w in running.workers}
        workflow = config[custom.task_queue("workflow")]
        # The checks are the workflow worker's local activities: it polls for no activity task.
        assert _names(workflow.get("activities")) == CHECKS
        assert workflow.get("no_remote_activities") is True
        assert workflow.get("max_concurrent_local_activities") == custom.check_concurrency
        readers = [c for c in _holders(workflow.get("activities")) if isinstance(c, LedgerReader)]
        assert readers and not any(isinstance(c, LedgerStore) for c in readers)
        assert not any(hasattr(c, "delete") for c in readers)
        bookkeeper = config[custom.task_queue("bookkeeper")]
        assert _names(bookkeeper.get("activities")) == {"delete_bk_ledger"}
        store, may_delete, tripwire = _holders(bookkeeper.get("activities"))
        assert type(store) is LedgerStore
        # Each delete asks the kill switch first, as this process reads it.
        assert running.kill_switch is not None and may_delete == running.kill_switch.check
        # And, for a ledger of a namespace no store knows, the shared-BookKeeper tripwire again.
        assert isinstance(tripwire, View)
        # A live process inspects too: it runs a request outside its live allow-list in shadow.
        offload = _names(config[custom.task_queue("offload")].get("activities"))
        assert offload == {"delete_offload_segment", "inspect_offload_segment"}


async def test_a_shadow_process_registers_no_delete(settings: Settings, temporal_client: Client) -> None:
    custom = settings.with_overrides(
        task_queue_prefix=f"{settings.task_queue_prefix}-rights-shadow", mode=Mode.SHADOW
    )
    pools = ("workflow", "bookkeeper", "offload")
    async with running_pools(custom, temporal_client, pools=pools) as running:
        config = {w.config().get("task_queue"): w.config() for w in running.workers}
        # Its own queues; the bookkeeper pool has nothing to run, the offload pool only looks (HEAD).
        assert sorted(config) == sorted(custom.task_queue(p) for p in ("workflow", "offload"))
        assert all("-shadow-" in queue for queue in config)
        assert _names(config[custom.task_queue("offload")].get("activities")) == {"inspect_offload_segment"}
        assert running.kill_switch is None


async def test_the_pulsar_pool_publishes_dead_letters_and_acks_only(
    settings: Settings, temporal_client: Client
) -> None:
    custom = settings.with_overrides(
        topic=f"{settings.topic}-rights", task_queue_prefix=f"{settings.task_queue_prefix}-rights-pulsar"
    )
    async with running_pools(custom, temporal_client, pools=("pulsar",)) as running:
        config = {w.config().get("task_queue"): w.config() for w in running.workers}
        assert _names(config[custom.task_queue("pulsar")].get("activities")) == {"publish_dead_letter"}
        assert _names(config[running.ack_queue].get("activities")) == {"ack_messages"}
