"""After a gap: the BookKeeper ledgers of Pulsar's that no record references become suspects."""

from __future__ import annotations

from ledger_deletion.formats.bk_metadata import (
    LedgerMetadata,
    build_pulsar_ledger_metadata,
    cursor_custom_metadata,
    managed_ledger_custom_metadata,
    parse_ledger_metadata,
    schema_custom_metadata,
)
from ledger_deletion.request import LedgerComponent, LedgerType
from ledger_deletion.watch.resync import pulsar_tagged, unreferenced, unreferenced_suspects
from ledger_deletion.watch.snapshot import Snapshot

from .records import ML, ML_PATH, UUID_A, cursor, locator, managed_ledger

SCHEMA = "public/default/orders"
GONE_ML = "public/default/persistent/deleted-topic"


def md(tags: dict[str, str]) -> LedgerMetadata:
    return parse_ledger_metadata(build_pulsar_ledger_metadata(tags))


def cluster() -> Snapshot:
    snapshot = Snapshot()
    snapshot.load(ML_PATH, managed_ledger([10, 11, 20], offloads={10: UUID_A}, released=[10]))
    snapshot.load(f"{ML_PATH}/sub", cursor(15))
    snapshot.load(f"/schemas/{SCHEMA}", locator([12]))
    return snapshot


def test_unreferenced_ledgers_are_the_listed_ones_no_record_names() -> None:
    # 10 is listed only as an offload whose BookKeeper copy was given up: its BK ledger is unreferenced.
    assert unreferenced([9, 10, 11, 12, 13, 15, 20, 21], cluster()) == [9, 10, 13, 21]


def test_pulsar_ledgers_become_suspects_of_their_component() -> None:
    snapshot = cluster()
    found = unreferenced_suspects(
        {
            9: md(managed_ledger_custom_metadata(ML)),  # trimmed while the watcher was away
            10: md(managed_ledger_custom_metadata(ML)),  # the BK copy left behind
            13: md(cursor_custom_metadata(ML, "sub")),  # the cursor's previous ledger
            14: md(schema_custom_metadata(SCHEMA)),  # dropped from the locator... but newer than it: kept
            5: md(schema_custom_metadata(SCHEMA)),  # dropped from the locator
            30: md(managed_ledger_custom_metadata(GONE_ML)),  # its topic is gone
            31: md(cursor_custom_metadata(GONE_ML, "s")),
        },
        snapshot,
    )
    got = {(s.request.ledger_component, s.request.ledger_id) for s in found}
    assert got == {
        (LedgerComponent.MANAGED_LEDGER, 9),
        (LedgerComponent.MANAGED_LEDGER, 10),
        (LedgerComponent.MANAGED_CURSOR, 13),
        (LedgerComponent.SCHEMA_STORAGE, 5),
        (LedgerComponent.MANAGED_LEDGER, 30),
        (LedgerComponent.MANAGED_CURSOR, 31),
    }
    assert {s.workflow_id for s in found} >= {
        "ledger-deletion-watch/LEDGER/9",
        "ledger-deletion-watch/LEDGER/31",
    }
    assert next(s for s in found if s.request.ledger_id == 31).request.topic_name == (
        "public/default/deleted-topic"
    )


def test_ledgers_newer_than_what_their_owner_lists_are_left_alone() -> None:
    snapshot = cluster()
    found = unreferenced_suspects(
        {
            21: md(managed_ledger_custom_metadata(ML)),  # a rollover's ledger, not stored yet
            16: md(cursor_custom_metadata(ML, "sub")),  # a cursor's next ledger, not stored yet
            13: md(schema_custom_metadata(SCHEMA)),  # a new schema version's ledger
        },
        snapshot,
    )
    assert found == []


def test_foreign_compacted_known_and_untagged_ledgers_are_not_suspects() -> None:
    found = unreferenced_suspects(
        {
            1: md({"application": "distributedlog"}),
            2: md({}),
            3: md({"application": "pulsar", "component": "compacted-ledger"}),
            4: md(managed_ledger_custom_metadata(ML)),
            6: md({"application": "pulsar", "component": "managed-ledger"}),
        },
        cluster(),
        known={(LedgerType.LEDGER, 4)},
    )
    assert found == []


def test_a_tag_the_service_refuses_is_reported() -> None:
    snapshot = cluster()
    found = unreferenced_suspects({7: md(managed_ledger_custom_metadata("not a name"))}, snapshot)
    assert found == [] and "ledger 7" in snapshot.rejected[0]


def test_another_clusters_store_keeps_what_it_lists_and_bounds_its_geo_topics() -> None:
    """A BookKeeper shared with another cluster (issue 39): what its store lists is referenced, and a
    geo-replicated topic's ledger is settled only below the lowest newest of the stores with the owner."""
    ours = cluster()  # ML lists 10, 11, 20
    other = Snapshot()
    other.load(ML_PATH, managed_ledger([7, 16]))  # the same managed ledger in the other cluster
    other.load("/schemas/public/default/other", locator([40]))
    assert unreferenced([7, 9, 16, 40], ours) == [7, 9, 16, 40]
    assert unreferenced([7, 9, 16, 40], ours, [other]) == [9]
    found = unreferenced_suspects(
        {9: md(managed_ledger_custom_metadata(ML)), 18: md(managed_ledger_custom_metadata(ML))},
        ours,
        others=[other],
    )
    # 18 is below our newest (20) but above the other cluster's (16): maybe its rollover under way.
    assert [s.request.ledger_id for s in found] == [9]
    assert [
        s.request.ledger_id for s in unreferenced_suspects({18: md(managed_ledger_custom_metadata(ML))}, ours)
    ] == [18]


def test_pulsar_tagged_counts_pulsars_ledgers() -> None:
    tagged = {1: md(managed_ledger_custom_metadata(ML)), 2: md({"application": "other"}), 3: md({})}
    assert pulsar_tagged(tagged) == 1
