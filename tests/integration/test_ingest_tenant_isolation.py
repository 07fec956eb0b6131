"""Tenant isolation in the ingest: a namespace's own deletion topic may name only that namespace and never
skips the in-use check; only the system topic is the broker's. Real Pulsar messages through a real consumer
on both topics, real Temporal dev server (no worker polls the workflow queue: a started run stays there).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion.contracts import DeletionInput
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from tests.integration.ingest_loop import Loop, running_loop
from tests.support import eventually

pytestmark = pytest.mark.stack


@dataclass
class TenancyLoop(Loop):
    """An ingest loop over a system topic and one namespace's deletion topic, both its own."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def system_topic(self) -> str:
        return self.full_topic

    @property
    def tenant_namespace(self) -> str:
        return f"acme-{self.run}/orders"

    @property
    def tenant_topic(self) -> str:
        return f"persistent://{self.tenant_namespace}/__ledger_deletion"

    def topics(self) -> list[str]:
        return [self.system_topic, self.tenant_topic]

    def request(self, topic_name: str, ledger_id: int) -> PendingDeleteLedgerInfo:
        """A request that asks to skip the in-use check, as the broker may."""
        made = PendingDeleteLedgerInfo(
            topic_name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id
        )
        made = replace(made, check_ledger_still_in_use=False)
        self.workflow_ids.append(made.workflow_id)
        return made


@pytest.fixture
async def loop(settings: Settings, temporal_client: Client) -> AsyncIterator[TenancyLoop]:
    async with running_loop(TenancyLoop, settings, temporal_client) as made:
        yield made


async def started_input(client: Client, workflow_id: str) -> DeletionInput:
    """The input the ingest started the run with, waiting until it has started it."""

    async def history() -> Any:
        return await client.get_workflow_handle(workflow_id).fetch_history()

    found: list[Any] = []

    async def started() -> None:
        try:
            found[:] = [await history()]
        except RPCError as exc:
            raise AssertionError(f"{workflow_id} not started yet: {exc}") from exc

    await eventually(started)
    event = found[0].events[0]
    assert event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    payloads = list(event.workflow_execution_started_event_attributes.input.payloads)
    [value] = await client.data_converter.decode(payloads, [DeletionInput])
    assert isinstance(value, DeletionInput)
    return value


async def test_tenant_topic_request_naming_another_namespace_is_dead_lettered_never_started(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    """The attack: a role that may produce on acme's namespace names globex's live ledger, check off."""
    ingestor = loop.start()
    victim = f"globex-{loop.run}/payments"
    forged = loop.request(f"{victim}/ledger-partition-0", new_ledger_id())
    payload = encode_request(forged)
    loop.send(payload, loop.tenant_topic)

    letter = await loop.dead_letter()
    props = letter.properties()
    assert letter.data() == payload  # the payload as sent, for the operator to look at
    assert props["ledger-deletion.failed-step"] == "tenant"
    assert (
        victim in props["ledger-deletion.reason"] and loop.tenant_namespace in props["ledger-deletion.reason"]
    )
    assert props["ledger-deletion.origin-topic"].startswith(loop.tenant_topic)  # where a replay sends it

    def settled() -> None:
        assert ingestor.stats.dead_lettered == 1 and ingestor.stats.started_or_joined == 0
        assert len(ingestor.pending) == 0  # acked once the dead letter was durable

    await eventually(settled)
    with pytest.raises(RPCError) as refused:
        await temporal_client.get_workflow_handle(forged.workflow_id).describe()
    assert refused.value.status == RPCStatusCode.NOT_FOUND


async def test_tenant_topic_request_of_its_own_namespace_always_gets_the_in_use_check(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    ingestor = loop.start()
    own = loop.request(f"{loop.tenant_namespace}/ledger-partition-0", new_ledger_id())
    loop.send(encode_request(own), loop.tenant_topic)

    started = await started_input(temporal_client, own.workflow_id)
    assert started.request == replace(own, check_ledger_still_in_use=True)
    first = started.first_message
    assert first.request is None  # the first message's request is the input's, checked
    assert first.topic.startswith(loop.tenant_topic)
    assert first.from_system_topic is False  # not the broker's: past a run's joined limit, not decided
    # What the sweeper would start again, should this run end without a decision: the same, checked.
    [(_, handoff)] = ingestor.pending.bound_before(float("inf"))
    assert handoff.request.check_ledger_still_in_use is True and handoff.from_system_topic is False
    assert ingestor.stats.dead_lettered == 0


async def test_system_topic_request_is_taken_as_sent(
    loop: TenancyLoop, temporal_client: Client, new_ledger_id
) -> None:
    """The broker's topic may name any namespace and skip the in-use check (ledgers it already dropped)."""
    ingestor = loop.start()
    sent = loop.request(f"globex-{loop.run}/payments/ledger-partition-0", new_ledger_id())
    loop.send(encode_request(sent), loop.system_topic)

    started = await started_input(temporal_client, sent.workflow_id)
    assert started.request == sent and started.request.check_ledger_still_in_use is False
    first = started.first_message
    assert first.request is None  # the first message's request is the input's, as sent
    assert first.topic.startswith(loop.system_topic)
    assert first.from_system_topic is True  # the broker's: decided even past a run's joined limit
    [(_, handoff)] = ingestor.pending.bound_before(float("inf"))
    assert handoff.from_system_topic is True  # and so is the sweeper's new run of it
    assert ingestor.stats.dead_lettered == 0
