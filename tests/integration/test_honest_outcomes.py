"""An outcome says what happened, on the real stores: a delete whose bytes stay in a versioned bucket says so,
and a znode someone else removed is not reported as deleted by this service."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.offload import OffloadActivities
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.contracts import DeleteOffloadInput, Outcome

pytestmark = pytest.mark.stack


@pytest.fixture
def versioned_bucket(s3: Any) -> Iterator[str]:
    name = f"versioned-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    yield name
    listing = s3.list_object_versions(Bucket=name)
    for version in listing.get("Versions", []) + listing.get("DeleteMarkers", []):
        s3.delete_object(Bucket=name, Key=version["Key"], VersionId=version["VersionId"])
    s3.delete_bucket(Bucket=name)


def test_a_delete_in_a_versioned_bucket_says_the_bytes_stay(
    stack: StackEndpoints, s3: Any, versioned_bucket: str, make_cluster: Callable[..., SimulatedCluster]
) -> None:
    """DeleteObjects there writes delete markers: the objects read as gone, their versions keep the bytes.
    DELETED (as Pulsar's own delete would leave it), with a reason that says the bytes stay."""
    cluster = make_cluster(bucket=versioned_bucket)
    try:
        [ledger_id] = cluster.new_ledger_ids()
        name = f"honest/ns-{uuid.uuid4().hex[:6]}/t"
        topic = cluster.create_topic(name, [ledger_id], offloaded=[ledger_id])
        keys = [key for _, key in cluster.offload_keys(topic.name, ledger_id)]
        store = ObjectStore(stack.s3_endpoint)
        activities = OffloadActivities(store, default_bucket=versioned_bucket)
        result = ActivityEnvironment().run(
            activities.delete_offload_segment,
            DeleteOffloadInput(ledger_id, topic.managed_ledger_name, topic.ledgers[ledger_id]),
        )
        assert result.outcome is Outcome.DELETED
        assert sorted(result.deleted_keys) == sorted(f"s3://{versioned_bucket}/{k}" for k in keys)
        assert not any(cluster.object_exists(k) for k in keys)  # read as gone ...
        versions = s3.list_object_versions(Bucket=versioned_bucket).get("Versions", [])
        assert sorted(v["Key"] for v in versions) == sorted(keys)  # ... yet the bytes are all there
        assert "versioned" in result.reason and "2 object(s) keep their bytes" in result.reason
    finally:
        cluster.cleanup()


def test_a_delete_in_a_plain_bucket_has_no_such_reason(
    stack: StackEndpoints, s3: Any, make_cluster: Callable[..., SimulatedCluster]
) -> None:
    bucket = f"plain-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    cluster = make_cluster(bucket=bucket)
    try:
        [ledger_id] = cluster.new_ledger_ids()
        name = f"honest/ns-{uuid.uuid4().hex[:6]}/t"
        topic = cluster.create_topic(name, [ledger_id], offloaded=[ledger_id])
        activities = OffloadActivities(ObjectStore(stack.s3_endpoint), default_bucket=bucket)
        result = ActivityEnvironment().run(
            activities.delete_offload_segment,
            DeleteOffloadInput(ledger_id, topic.managed_ledger_name, topic.ledgers[ledger_id]),
        )
        assert result.outcome is Outcome.DELETED and result.reason == ""
        assert s3.list_object_versions(Bucket=bucket).get("Versions", []) == []
    finally:
        cluster.cleanup()
        s3.delete_bucket(Bucket=bucket)
