"""The compact form of a managed ledger's references (:mod:`ledger_deletion.watch.compact`), and the
snapshot's in-place resync (:meth:`Snapshot.forget_unlisted`, :meth:`Snapshot.forget_outside`)."""

from __future__ import annotations

import random
from dataclasses import replace

from ledger_deletion.formats.managed_ledger import (
    ManagedLedgerInfo,
    ledger_info_to_request_context,
    parse_managed_ledger_info,
)
from ledger_deletion.formats.offload_keys import java_uuid_parts
from ledger_deletion.watch import compact
from ledger_deletion.watch.diff import managed_ledger_changes
from ledger_deletion.watch.snapshot import Snapshot
from ledger_deletion.watch.suspects import Suspect

from .records import ML, ML_PATH, UUID_A, UUID_B, UUID_C, cursor, locator, managed_ledger

NS_DIR = "/managed-ledgers/public/default/persistent"


def _references(info: ManagedLedgerInfo) -> list[object]:
    """What the diff reads of each listed ledger: its id and its offload context without timestamps."""
    out: list[object] = []
    for li in info.ledgerInfo:
        context = ledger_info_to_request_context(li)
        offload = context.offload_context
        if offload is not None:
            segments = [(s.uid_msb, s.uid_lsb, s.driver_metadata) for s in offload.offload_segment]
            offload_refs = (
                offload.uid_msb,
                offload.uid_lsb,
                offload.complete,
                offload.bookkeeper_deleted,
                offload.driver_metadata,
                segments,
            )
            out.append((context.ledger_id, offload_refs))
        else:
            out.append((context.ledger_id, None))
    return out


def test_every_reference_the_diff_reads_survives_the_round_trip() -> None:
    # Out of order and far apart (negative deltas), classic offloads, segments, released copies.
    data = managed_ledger(
        [3_000_000_000_000, 5, 7, 2**40, 6],
        offloads={5: UUID_A, 2**40: UUID_B},
        segments={7: [UUID_B, UUID_C]},
        released=[5],
    )
    info = parse_managed_ledger_info(data)
    drivers = compact.Drivers()
    blob = compact.encode(info, drivers)
    assert _references(compact.decode(blob, drivers)) == _references(info)
    assert [(r.ledger_id, r.released) for r in compact.ledgers(blob)] == [
        (3_000_000_000_000, False),
        (5, True),
        (7, False),
        (2**40, False),
        (6, False),
    ]
    assert compact.newest(blob) == 3_000_000_000_000
    assert compact.newest(b"") == -1


def test_twenty_ledgers_half_offloaded_fit_in_the_floor() -> None:
    """The issue's shape: ids a cluster-wide sequence apart (200k topics rolling in turn), ten classic
    offloads of one driver. Ten uuids are 160 bytes; the rest must stay near the ids' own few bytes."""
    rnd = random.Random(7)
    ids = [10_000_000 + i * 200_000 + rnd.randrange(1000) for i in range(20)]
    uuids = {ledger_id: f"{rnd.getrandbits(128):032x}" for ledger_id in ids[:10]}
    info = ManagedLedgerInfo()
    for ledger_id in ids:
        li = info.ledgerInfo.add(ledgerId=ledger_id, entries=50_000, size=2**30, timestamp=1_700_000_000_000)
        if ledger_id in uuids:
            hexed = uuids[ledger_id]
            uuid = f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
            li.offloadContext.uidMsb, li.offloadContext.uidLsb = java_uuid_parts(uuid)
            li.offloadContext.complete = True
            li.offloadContext.driverMetadata.name = "aws-s3"
            for key, value in (("bucket", "pulsar-offload"), ("region", "eu-west-1")):
                li.offloadContext.driverMetadata.properties.add(key=key, value=value)
    drivers = compact.Drivers()
    blob = compact.encode(info, drivers)
    assert len(blob) <= 10 * 17 + 20 * 4, len(blob)  # uuid + flag byte each; a varint per id
    assert len(blob) * 4 < info.ByteSize()
    assert compact.encode(info, drivers) == blob  # one driver slot, shared


def test_a_resync_in_place_forgets_what_the_listings_no_longer_name() -> None:
    snapshot = Snapshot()
    snapshot.load(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}))
    snapshot.load(f"{ML_PATH}/sub", cursor(7))
    snapshot.load(f"{ML_PATH}/gone-sub", cursor(8))
    other = f"{NS_DIR}/other"
    snapshot.load(other, managed_ledger([30]))
    elsewhere = "/managed-ledgers/public/removed/persistent/t"
    snapshot.load(elsewhere, managed_ledger([40]))
    snapshot.load(f"{elsewhere}/s", cursor(41))
    snapshot.load("/schemas/public/default/orders", locator([20]))
    snapshot.load("/schemas/public/removed/t", locator([50]))
    assert snapshot.records == 8
    snapshot.apply(f"{NS_DIR}/never-read", b"\xff\xffcorrupt")  # unreadable from its first read
    snapshot.apply(f"{elsewhere}-2", b"\xff\xffcorrupt")
    assert len(snapshot.unreadable) == 2

    # The walk reads the namespace it still finds: ML unchanged, one cursor gone, "other" gone.
    found = snapshot.forget_unlisted(ML_PATH, ["sub"])
    found += snapshot.apply(f"{ML_PATH}/sub", cursor(7))
    found += snapshot.apply(ML_PATH, managed_ledger([1, 2], offloads={1: UUID_A}))
    found += snapshot.forget_unlisted(NS_DIR, {ML.rsplit("/", 1)[1]})
    found += snapshot.forget_unlisted("/schemas/public/default", {"orders"})
    found += snapshot.forget_outside({NS_DIR}, {"/schemas/public/default"})
    assert {(s.request.ledger_id, s.reason.value) for s in found} == {
        (8, "cursor-deleted"),
        (30, "topic-deleted"),
        (41, "cursor-deleted"),
        (40, "topic-deleted"),
        (50, "schema-deleted"),
    }
    assert snapshot.records == 3 and snapshot.unreadable == set()
    assert snapshot.bk_referenced() == {1, 2, 7, 20}
    assert snapshot.cursor_ledger(ML, "sub") == 7 and snapshot.cursor_ledger(ML, "gone-sub") is None


def test_a_catch_up_names_every_record_and_every_directory_it_knows() -> None:
    snapshot = Snapshot()
    snapshot.load(ML_PATH, managed_ledger([1]))
    snapshot.load(f"{ML_PATH}/sub", cursor(7))
    snapshot.load("/schemas/public/default/orders", locator([20]))
    snapshot.apply(f"{NS_DIR}/garbled", b"\xff\xffcorrupt")
    snapshot.directories = {"/managed-ledgers/public", "/managed-ledgers/public/empty", NS_DIR}
    records, parents = (list(paths) for paths in snapshot.watch_paths())
    assert sorted(records) == sorted(
        [f"{ML_PATH}/sub", ML_PATH, "/schemas/public/default/orders", f"{NS_DIR}/garbled"]
    )
    # An empty namespace too: a topic created there while disconnected shows only as its new child.
    assert set(parents) == {
        "/managed-ledgers",
        "/schemas",
        "/managed-ledgers/public",
        "/managed-ledgers/public/empty",
        NS_DIR,
        ML_PATH,
        f"{NS_DIR}/garbled",
    }
    assert snapshot.known_children(NS_DIR) == {ML.rsplit("/", 1)[1], "garbled"}
    assert snapshot.known_children(ML_PATH) == {"sub"}
    assert snapshot.known_children("/managed-ledgers/public") == {"empty", "default"}
    snapshot.directory_event("/managed-ledgers/public", created=False)
    assert snapshot.directories == set()


def _decided(suspects: list[Suspect]) -> list[tuple[object, ...]]:
    """What a request is decided on: its type, ledger, reason, workflow id and offload context (the
    offload's timestamp aside, which no check reads and the snapshot does not keep)."""
    out: list[tuple[object, ...]] = []
    for s in suspects:
        request = s.request
        offload = request.context.offload_context if request.context else None
        kept = None if offload is None else replace(offload, timestamp=0)
        out.append((request.ledger_type, request.ledger_id, s.reason, s.workflow_id, kept))
    return sorted(out, key=repr)


def test_compact_records_leave_the_suspects_whole_records_do() -> None:
    """Random changes of one managed ledger (trims, rollovers, offloads replaced, copies released,
    segments, the topic deleted): the snapshot suspects what the diff of the whole records does."""
    rnd = random.Random(3)
    uuids = [UUID_A, UUID_B, UUID_C, "44444444-5555-4666-8777-888888888888"]
    for _ in range(300):
        ids = sorted(rnd.sample(range(1, 40), rnd.randrange(0, 8)))
        states: list[bytes] = []
        for _ in range(2):
            kept = {i for i in ids if rnd.random() < 0.7} | (
                {40 + rnd.randrange(5)} if rnd.random() < 0.3 else set()
            )
            offloads = {i: rnd.choice(uuids) for i in sorted(kept) if rnd.random() < 0.4}
            segments = {
                i: rnd.sample(uuids, 2) for i in sorted(kept) if i not in offloads and rnd.random() < 0.1
            }
            released = [i for i in offloads if rnd.random() < 0.3]
            states.append(
                managed_ledger(
                    sorted(kept),
                    offloads=offloads,
                    segments=segments,
                    released=released,
                    complete=rnd.random() < 0.7,
                )
            )
        before, after = states[0], None if rnd.random() < 0.1 else states[1]
        whole = managed_ledger_changes(
            ML,
            parse_managed_ledger_info(before),
            None if after is None else parse_managed_ledger_info(after),
            [],
        )
        snapshot = Snapshot()
        snapshot.load(ML_PATH, before)
        assert _decided(snapshot.apply(ML_PATH, after)) == _decided(whole)
