"""The suspect's check on real ZooKeeper and S3: still there, and listed by nothing?"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.watch import SuspectActivities
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.object_store import ObjectStore
from ledger_deletion.adapters.zookeeper import LedgerStore, PulsarMetadataStore, kazoo_client
from ledger_deletion.formats.managed_ledger import (
    ledger_info_to_request_context,
    managed_ledger_name,
    serialize_managed_ledger_info,
)
from ledger_deletion.formats.proto import MLDataFormats_pb2 as ml_pb
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)
from ledger_deletion.watch_contracts import CheckSuspectInput, PublishSuspectInput
from tests.integration.watch_support import Corner, corner

pytestmark = pytest.mark.stack

TOPIC = "public/default/checked"


class Published:
    def __init__(self) -> None:
        self.requests: list[PendingDeleteLedgerInfo] = []

    def publish(self, request: PendingDeleteLedgerInfo, properties: dict[str, str] | None = None) -> str:
        self.requests.append(request)
        return f"1:{len(self.requests)}:0"


def data(ledger_id: int, ledger_type: LedgerType = LedgerType.LEDGER, **kw: Any) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        topic_name=TOPIC,
        ledger_component=LedgerComponent.MANAGED_LEDGER,
        ledger_type=ledger_type,
        ledger_id=ledger_id,
        **kw,
    )


def context(c: Corner, ledger_id: int) -> LedgerInfo:
    info = c.cluster.managed_ledger_info(TOPIC)
    assert info is not None
    [li] = [li for li in info.ledgerInfo if li.ledgerId == ledger_id]
    return ledger_info_to_request_context(li)


def test_the_check_finds_what_is_still_there_and_what_still_lists_it(
    stack: StackEndpoints, s3: Any, new_ledger_id: Any
) -> None:
    with corner(stack, s3, new_ledger_id) as c:
        settings = c.settings
        ledgers = LedgerStore(settings.zookeeper, settings.bk_ledgers_root, 10.0)
        metadata = PulsarMetadataStore(settings.pulsar_metadata_hosts, 10.0)
        published = Published()
        checks = SuspectActivities(
            ledgers,
            metadata,
            published,
            ObjectStore(settings.s3_endpoint, settings.s3_region),
            settings.offload_bucket,
        )
        try:
            b = c.broker
            ids = b.create_topic(TOPIC, 6, offloaded=[0, 1, 4], offload_failed=[1])
            offloaded = data(ids[0], LedgerType.OFFLOAD_LEDGER, context=context(c, ids[0]))
            failed_attempt = data(ids[1], LedgerType.OFFLOAD_LEDGER, context=context(c, ids[1]))
            cleaned = data(ids[4], LedgerType.OFFLOAD_LEDGER, context=context(c, ids[4]))
            cursor = b.add_cursor(TOPIC, "sub")
            [schema] = b.add_schema("public/default/checked", 1)

            def check(request: PendingDeleteLedgerInfo) -> tuple[bool, str]:
                result = checks.check_suspect(CheckSuspectInput(request))
                return result.exists, result.referenced_as

            # Listed: each by what lists it.
            assert check(data(ids[2])) == (True, "ledger list of public/default/persistent/checked")
            assert check(offloaded)[1].startswith(f"offload context of ledger {ids[0]}")
            cursor_request = PendingDeleteLedgerInfo(
                topic_name=TOPIC,
                ledger_component=LedgerComponent.MANAGED_CURSOR,
                ledger_type=LedgerType.LEDGER,
                ledger_id=cursor,
                cursor_name="sub",
            )
            assert check(cursor_request) == (True, "cursor sub of public/default/persistent/checked")
            schema_request = PendingDeleteLedgerInfo(
                topic_name="public/default/checked",
                ledger_component=LedgerComponent.SCHEMA_STORAGE,
                ledger_type=LedgerType.LEDGER,
                ledger_id=schema,
                schema_id="public/default/checked",
            )
            assert check(schema_request) == (True, "schema public/default/checked")

            # Dropped, their deletes failing: there, and listed by nothing.
            b.trim(TOPIC, [ids[0], ids[2]], bk_delete_fails=[ids[2]], offload_delete_fails=[ids[0]])
            assert check(data(ids[2])) == (True, "")
            assert check(offloaded) == (True, "")
            b.replace_offload(TOPIC, ids[1], cleanup_fails=True)
            assert check(failed_attempt) == (True, "")
            b.switch_cursor(TOPIC, "sub", delete_fails=True)
            assert check(cursor_request) == (True, "")
            b.delete_schema("public/default/checked", delete_fails=[schema])
            assert check(schema_request) == (True, "")

            # Dropped and deleted: gone.
            b.trim(TOPIC, [ids[3], ids[4]])
            assert check(data(ids[3])) == (False, "")
            assert check(data(ids[4])) == (False, "")
            assert check(cleaned) == (False, "")
            # An offload in a store this process does not reach is not looked at: it counts as there.
            ctx = offloaded.context
            assert ctx is not None and ctx.offload_context is not None
            elsewhere = replace(
                ctx.offload_context,
                driver_metadata=OffloadDriverMetadata("aws-s3", {"serviceEndpoint": "http://other:9000"}),
            )
            result = checks.check_suspect(
                CheckSuspectInput(replace(offloaded, context=replace(ctx, offload_context=elsewhere)))
            )
            assert result.exists and "not looked at" in result.detail

            sent = checks.publish_suspect(PublishSuspectInput(data(ids[2])))
            assert sent.message_id == "1:1:0" and published.requests == [data(ids[2])]
        finally:
            ledgers.close()
            metadata.close()


def test_the_check_refuses_a_store_without_managed_ledgers(
    stack: StackEndpoints, s3: Any, new_ledger_id: Any
) -> None:
    """No record in a store without ``/managed-ledgers`` (a wrong chroot) proves nothing: the check fails,
    to be retried, rather than answer "listed by nothing" (it answered that before)."""
    with corner(stack, s3, new_ledger_id) as c:
        settings = c.settings
        ledgers = LedgerStore(settings.zookeeper, settings.bk_ledgers_root, 10.0)
        metadata = PulsarMetadataStore(settings.pulsar_metadata_hosts, 10.0)
        checks = SuspectActivities(ledgers, metadata, Published(), None, settings.offload_bucket)
        try:
            ids = c.broker.create_topic(TOPIC, 2)
            c.zk.delete("/managed-ledgers", recursive=True)
            cursor_request = PendingDeleteLedgerInfo(
                topic_name=TOPIC,
                ledger_component=LedgerComponent.MANAGED_CURSOR,
                ledger_type=LedgerType.LEDGER,
                ledger_id=ids[1],
                cursor_name="sub",
            )
            for request in (data(ids[0]), cursor_request):
                with pytest.raises(ApplicationError, match="has no /managed-ledgers") as refused:
                    ActivityEnvironment().run(checks.check_suspect, CheckSuspectInput(request))
                assert refused.value.type == "PulsarMetadataNotFound" and not refused.value.non_retryable
        finally:
            ledgers.close()
            metadata.close()


def test_the_check_reads_every_clusters_store(stack: StackEndpoints, s3: Any, new_ledger_id: Any) -> None:
    """With another cluster's store declared: its listing keeps a suspect, and a namespace no store knows
    is not requested (before, both were published)."""
    with corner(stack, s3, new_ledger_id) as c:
        settings = c.settings
        other_chroot = f"{c.chroot}-other"
        root = kazoo_client(stack.zookeeper, 10.0)
        root.start(timeout=10)
        ledgers = LedgerStore(settings.zookeeper, settings.bk_ledgers_root, 10.0)
        metadata = PulsarMetadataStore(settings.pulsar_metadata_hosts, 10.0)
        other = PulsarMetadataStore(f"{stack.zookeeper}{other_chroot}", 10.0)
        checks = SuspectActivities(ledgers, metadata, Published(), None, settings.offload_bucket, (), [other])
        try:
            ids = c.broker.create_topic(TOPIC, 3)
            c.broker.trim(TOPIC, [ids[0]], bk_delete_fails=[ids[0]])
            listed = ml_pb.ManagedLedgerInfo()
            listed.ledgerInfo.add(ledgerId=ids[0])
            name = managed_ledger_name(TOPIC)
            root.create(
                f"{other_chroot}/managed-ledgers/{name}", serialize_managed_ledger_info(listed), makepath=True
            )
            result = checks.check_suspect(CheckSuspectInput(data(ids[0])))
            assert result.exists and "of another cluster" in result.referenced_as
            root.set(
                f"{other_chroot}/managed-ledgers/{name}",
                serialize_managed_ledger_info(ml_pb.ManagedLedgerInfo()),
            )
            assert checks.check_suspect(CheckSuspectInput(data(ids[0]))).referenced_as == ""
            stranger = replace(data(ids[0]), topic_name="nobody/knows/this")
            assert "known to none" in checks.check_suspect(CheckSuspectInput(stranger)).referenced_as
        finally:
            ledgers.close()
            metadata.close()
            other.close()
            with contextlib.suppress(Exception):
                root.delete(other_chroot, recursive=True)
            root.stop()
            root.close()
