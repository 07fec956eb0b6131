"""A cursor whose position is stored inline (``cursorsLedgerId`` -1) still protects the cursor ledger it may
be creating (issue 39, section 2): ``ManagedCursorImpl.createNewMetadataLedger`` creates the ledger before
``switchToNewLedger`` stores its id, so for a moment nothing lists it."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient
from temporalio.testing import ActivityEnvironment

from activities.bookkeeper import BookKeeperReadActivities
from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.zookeeper import LedgerReader, PulsarMetadataStore
from ledger_deletion.contracts import Verdict, VerifyBkMetadataInput
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, cursor_custom_metadata
from ledger_deletion.formats.bk_paths import ledger_path
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from workflows.rules import unsettled

pytestmark = pytest.mark.stack


def test_a_cursor_ledger_newer_than_every_data_ledger_is_unsettled_while_the_cursor_is_inline(
    cluster: SimulatedCluster, stack: StackEndpoints, zk: KazooClient
) -> None:
    topic = f"inline/ns-{uuid.uuid4().hex[:6]}/orders"
    [orphan] = cluster.new_ledger_ids()  # a cursor ledger left when the cursor went inline at close
    data = cluster.new_ledger_ids(2)  # the topic's load created newer data ledgers
    created = cluster.create_topic(topic, data)
    cluster.add_cursor(topic, "sub", None)  # position stored inline: cursorsLedgerId -1
    [creating] = cluster.new_ledger_ids()  # createNewMetadataLedger under way: not stored yet
    for ledger_id in (orphan, creating):
        zk.create(
            ledger_path(ledger_id),
            build_pulsar_ledger_metadata(
                cursor_custom_metadata(created.managed_ledger_name, "sub"), state="OPEN"
            ),
            makepath=True,
        )
    ledgers, metadata = LedgerReader(stack.zookeeper), PulsarMetadataStore(stack.zookeeper)
    try:
        checks = BookKeeperReadActivities(ledgers, metadata)
        for ledger_id, settled in ((creating, False), (orphan, True)):
            request = PendingDeleteLedgerInfo(
                created.name, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, ledger_id, "sub"
            )
            verified = ActivityEnvironment().run(checks.verify_bk_metadata, VerifyBkMetadataInput(request))
            assert verified.verdict is Verdict.MATCH and not verified.metadata_store_listing, verified
            assert verified.newest_listed == max(data), verified  # was -1: no bound at all
            kept = unsettled(request, verified)
            assert (kept is None) is settled, (ledger_id, kept)
    finally:
        ledgers.close()
        metadata.close()
        for ledger_id in (orphan, creating):
            zk.delete(ledger_path(ledger_id))
