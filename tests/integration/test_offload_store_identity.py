"""An offload whose driver metadata names another object store than the service's is refused, not acked.

The keys of such an offload are looked up in the wrong store: every HEAD answers 404 and, the bucket being
there under the same name, the request would end ALREADY_DELETED, acked, with the objects orphaned for good
in the store the metadata names (a namespace offload policy pointing at a second MinIO, another region).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pulsar
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.offload import OffloadActivities
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.contracts import DeleteOffloadInput, Outcome
from ledger_deletion.formats.offload_keys import ledger_object_keys, offload_uuid
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools, wait_for_result, wait_until_all_acked

pytestmark = pytest.mark.stack

ML_NAME = "store-id/ns1/persistent/orders"
OTHER_STORE = "http://minio-b:9000"


@pytest.fixture(scope="module")
def bucket(s3: Any) -> str:
    """A bucket of the service's store with the name the other store's offload went to."""
    name = f"offload-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return name


def context(ledger_id: int, properties: dict[str, str]) -> LedgerInfo:
    driver = OffloadDriverMetadata("aws-s3", {"managedLedgerOffloadDriver": "aws-s3", **properties})
    offload = OffloadContext(uid_msb=23, uid_lsb=ledger_id, complete=True, driver_metadata=driver)
    return LedgerInfo(ledger_id, offload_context=offload)


@pytest.mark.parametrize(
    ("named", "why"),
    [
        ({"serviceEndpoint": OTHER_STORE}, f"serviceEndpoint {OTHER_STORE!r}"),
        ({"region": "eu-west-1"}, "region 'eu-west-1'"),
    ],
)
def test_an_offload_in_another_store_is_refused_not_already_deleted(
    stack: StackEndpoints, bucket: str, new_ledger_id: Any, named: dict[str, str], why: str
) -> None:
    ledger_id = new_ledger_id()
    activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket="not-used")
    inp = DeleteOffloadInput(ledger_id, ML_NAME, context(ledger_id, {"bucket": bucket, **named}))
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert raised.value.type == "UnsupportedOffloadDriver" and raised.value.non_retryable
    assert why in str(raised.value) and stack.s3_endpoint in str(raised.value)


def test_an_alias_of_the_service_endpoint_is_the_same_store(
    stack: StackEndpoints, s3: Any, bucket: str, new_ledger_id: Any
) -> None:
    """Brokers that reach the store under another name (a proxy, another DNS name): deleted as usual."""
    ledger_id = new_ledger_id()
    keys = ledger_object_keys(offload_uuid(23, ledger_id), ledger_id)
    for key, role in zip(keys, ("data", "index"), strict=True):
        s3.put_object(
            Bucket=bucket, Key=key, Body=b"x", Metadata={"ManagedLedgerName": ML_NAME, "role": role}
        )
    alias = "HTTP://Offload-Store.internal:19000/"
    activities = OffloadActivities(
        ObjectStore(stack.s3_endpoint), default_bucket="not-used", endpoint_aliases=[alias.lower()]
    )
    inp = DeleteOffloadInput(
        ledger_id,
        ML_NAME,
        context(ledger_id, {"bucket": bucket, "serviceEndpoint": alias, "region": "US-EAST-1"}),
    )
    result = ActivityEnvironment().run(activities.delete_offload_segment, inp)
    assert result.outcome is Outcome.DELETED
    assert sorted(result.deleted_keys) == sorted(f"s3://{bucket}/{k}" for k in keys)


async def test_the_service_dead_letters_an_offload_in_another_store_at_the_first_attempt(
    settings: Settings, temporal_client: Client, bucket: str, new_ledger_id: Any
) -> None:
    own = settings.with_overrides(
        topic=f"{settings.topic}-otherstore", task_queue_prefix=f"{settings.task_queue_prefix}-otherstore"
    )
    ledger_id = new_ledger_id()
    request = PendingDeleteLedgerInfo(
        f"store-id/ns-{uuid.uuid4().hex[:6]}/orders",
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.OFFLOAD_LEDGER,
        ledger_id,
        context=context(ledger_id, {"bucket": bucket, "serviceEndpoint": OTHER_STORE}),
        check_ledger_still_in_use=False,
    )
    async with running_pools(own, temporal_client) as running:
        with RequestPublisher(own) as publisher:
            publisher.publish(request)
        result = await wait_for_result(temporal_client, request.workflow_id)
        assert result.outcome is Outcome.DEAD_LETTERED, result
        assert result.failed_step == "delete_offload_segment" and "UnsupportedOffloadDriver" in result.reason
        assert result.messages_acked == 1
        await wait_until_all_acked(running)
    props = dead_letter_properties(own, request.workflow_id)
    assert props["ledger-deletion.attempts"] == "1"  # permanent: no retry could reach the other store
    assert OTHER_STORE in props["ledger-deletion.reason"]


def dead_letter_properties(settings: Settings, workflow_id: str, timeout_s: float = 20) -> dict[str, str]:
    client = pulsar.Client(settings.pulsar_url)
    try:
        consumer = client.subscribe(
            settings.dead_letter_topic,
            f"test-reader-{uuid.uuid4().hex[:6]}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(message)
            props: dict[str, str] = message.properties()
            if props.get("ledger-deletion.workflow-id") == workflow_id:
                return props
        raise AssertionError(f"no dead letter for {workflow_id} within {timeout_s} s")
    finally:
        client.close()
