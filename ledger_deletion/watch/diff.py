"""One record's content before and after a change -> the suspects it leaves.

Ledger ids are never reused (BookKeeper hands them out from a ZooKeeper sequence), and an offload uuid is
fresh for every attempt, so what leaves a record never comes back to it: a ledger that was listed before
and is not now has been dropped by its owner. What the owner drops it deletes itself, after storing the
change; the suspect waits out the watcher's delay for that before anything is requested.

* Managed ledger (``ManagedLedgerInfo``): a ledger gone from the list (trimmed, or every ledger of a deleted
  topic) leaves its BookKeeper ledger and, when it was offloaded, its offloaded objects; a listed ledger
  whose offload uuid (or a segment's) changed leaves the replaced attempt's objects
  (``ManagedLedgerImpl#prepareLedgerInfoForOffloaded`` cleans them, "Previous failed offload"); a listed
  ledger newly marked ``bookkeeperDeleted`` leaves its BookKeeper copy, which the broker deletes once after
  storing the flag and never again (``ManagedLedgerImpl#cleanupOffloaded``).
* Cursor (``ManagedCursorInfo``): the previous ``cursorsLedgerId`` after a switch to a new cursor ledger, a
  close (position stored inline, -1) or the cursor's deletion (``ManagedCursorImpl#asyncDeleteCursorLedger``).
* Schema locator: every ledger its index no longer lists (``BookkeeperSchemaStorage#getSchemaLedgerList``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.managed_ledger import (
    ManagedLedgerInfo,
    PbLedgerInfo,
    ledger_info_to_request_context,
    topic_name_from_managed_ledger,
)
from ledger_deletion.request import LedgerComponent, LedgerInfo, LedgerType, OffloadContext
from ledger_deletion.watch.suspects import Reason, Suspect, suspect

__all__ = [
    "bk_copy_released",
    "cursor_changes",
    "managed_ledger_changes",
    "replaced_offload",
    "schema_changes",
]


def bk_copy_released(info: PbLedgerInfo) -> bool:
    """The ledger is read from tiered storage and its BookKeeper copy given up (``bookkeeperDeleted``)."""
    if not info.HasField("offloadContext"):
        return False
    ctx = info.offloadContext
    return bool(ctx.complete and ctx.bookkeeperDeleted)


def managed_ledger_changes(
    ml_name: str,
    old: ManagedLedgerInfo | None,
    new: ManagedLedgerInfo | None,
    rejected: list[str],
) -> list[Suspect]:
    """Suspects of one managed ledger's change; ``new`` None: its znode was deleted (the topic with it).

    A suspect whose request the service would refuse (a name it does not accept) is described in
    ``rejected`` instead, as in every function here.
    """
    if old is None:
        return []
    topic = topic_name_from_managed_ledger(ml_name)
    after = {} if new is None else {info.ledgerId: info for info in new.ledgerInfo}
    gone_reason = Reason.TOPIC_DELETED if new is None else Reason.TRIMMED
    out: list[Suspect] = []
    for info in old.ledgerInfo:
        now = after.get(info.ledgerId)
        context = ledger_info_to_request_context(info)
        if now is None:
            # Its BookKeeper ledger even when marked deleted: the broker's one delete of it may have failed.
            _add(out, rejected, topic, LedgerType.LEDGER, gone_reason, context)
            offload = context.offload_context
            if offload is not None and (offload.has_uid or offload.offload_segment):
                _add(out, rejected, topic, LedgerType.OFFLOAD_LEDGER, gone_reason, context)
            continue
        if bk_copy_released(now) and not bk_copy_released(info):
            released = ledger_info_to_request_context(now)
            _add(out, rejected, topic, LedgerType.LEDGER, Reason.BK_COPY_RELEASED, released)
        if context.offload_context is not None:
            now_offload = ledger_info_to_request_context(now).offload_context
            left = replaced_offload(context.offload_context, now_offload)
            if left is not None:
                replaced = replace(context, offload_context=left)
                _add(out, rejected, topic, LedgerType.OFFLOAD_LEDGER, Reason.OFFLOAD_REPLACED, replaced)
    return out


def replaced_offload(old: OffloadContext, new: OffloadContext | None) -> OffloadContext | None:
    """The part of ``old`` that ``new`` no longer names (its uid, segments), or None when nothing left.

    The result names only what left: the delete of a request covers every key its context names, and a
    segment still listed must not be among them.
    """
    new_uid = (new.uid_msb, new.uid_lsb) if new is not None and new.has_uid else None
    uid_left = old.has_uid and (old.uid_msb, old.uid_lsb) != new_uid
    kept = {(s.uid_msb, s.uid_lsb) for s in new.offload_segment} if new is not None else set()
    segments_left = [s for s in old.offload_segment if (s.uid_msb, s.uid_lsb) not in kept]
    if not uid_left and not segments_left:
        return None
    return replace(
        old,
        uid_msb=old.uid_msb if uid_left else 0,
        uid_lsb=old.uid_lsb if uid_left else 0,
        offload_segment=segments_left,
    )


def cursor_changes(
    ml_name: str, cursor: str, old: int | None, new: int | None, rejected: list[str]
) -> list[Suspect]:
    """Suspects of one cursor's change: ``old``/``new`` are its ``cursorsLedgerId`` (-1: none), None when
    the cursor's znode did not / does no longer exist."""
    if old is None or old < 0 or old == new:
        return []
    reason = Reason.CURSOR_DELETED if new is None else Reason.CURSOR_SWITCHED
    out: list[Suspect] = []
    _try(
        out,
        rejected,
        reason,
        topic_name=topic_name_from_managed_ledger(ml_name),
        component=LedgerComponent.MANAGED_CURSOR,
        ledger_type=LedgerType.LEDGER,
        ledger_id=old,
        cursor_name=cursor,
    )
    return out


def schema_changes(
    schema_id: str, old: Iterable[int] | None, new: Iterable[int] | None, rejected: list[str]
) -> list[Suspect]:
    """Suspects of one schema locator's change; ``new`` None: the locator was deleted."""
    if old is None:
        return []
    kept = set(new or ())
    reason = Reason.SCHEMA_DELETED if new is None else Reason.SCHEMA_LEDGER_DROPPED
    out: list[Suspect] = []
    for ledger_id in sorted(set(old) - kept):
        _try(
            out,
            rejected,
            reason,
            topic_name=schema_id,  # tenant/ns/topic: the base topic, whose partitions share the schema
            component=LedgerComponent.SCHEMA_STORAGE,
            ledger_type=LedgerType.LEDGER,
            ledger_id=ledger_id,
            schema_id=schema_id,
        )
    return out


def _add(
    out: list[Suspect],
    rejected: list[str],
    topic: str,
    ledger_type: LedgerType,
    reason: Reason,
    context: LedgerInfo,
) -> None:
    _try(
        out,
        rejected,
        reason,
        topic_name=topic,
        component=LedgerComponent.MANAGED_LEDGER,
        ledger_type=ledger_type,
        ledger_id=context.ledger_id,
        context=context,
    )


def _try(out: list[Suspect], rejected: list[str], reason: Reason, **request: Any) -> None:
    try:
        out.append(suspect(reason, **request))
    except InvalidRequestError as exc:
        rejected.append(f"{reason.value} ledger {request['ledger_id']} of {request['topic_name']}: {exc}")
