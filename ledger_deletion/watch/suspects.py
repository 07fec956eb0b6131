"""A suspect: one ledger (or one offload's objects) that left Pulsar's metadata, and the request it becomes.

A suspect is not yet an orphan: the broker deletes what it drops from its metadata itself, right after
storing the change (``ManagedLedgerImpl#internalTrimLedgers`` deletes once ``asyncUpdateLedgerIds``
succeeded). Only what is still there after the watcher's delay is requested, as a ``PendingDeleteLedgerInfo``
with ``checkLedgerStillInUse`` set, tagged ``source=watcher`` so operators can tell it from the broker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    PendingDeleteLedgerInfo,
    request_from_wire,
    request_to_wire,
)

__all__ = [
    "REASON_PROPERTY",
    "SOURCE",
    "SOURCE_PROPERTY",
    "WORKFLOW_ID_PREFIX",
    "Reason",
    "Suspect",
    "suspect",
]

SOURCE_PROPERTY: Final = "source"  # the key reconcile tags its requests with too
SOURCE: Final = "watcher"
REASON_PROPERTY: Final = "watcher-reason"
WORKFLOW_ID_PREFIX: Final = "ledger-deletion-watch/"


class Reason(StrEnum):
    """What made a ledger a suspect."""

    TRIMMED = "trimmed"  # left its managed ledger's ledger list
    BK_COPY_RELEASED = "bk-copy-released"  # offloaded, and the broker gave up its BookKeeper copy
    OFFLOAD_REPLACED = "offload-replaced"  # another offload attempt (uuid) took its place
    CURSOR_SWITCHED = (
        "cursor-switched"  # its cursor stores another cursor ledger now (or its position inline)
    )
    CURSOR_DELETED = "cursor-deleted"
    SCHEMA_LEDGER_DROPPED = "schema-ledger-dropped"  # left its schema's locator
    SCHEMA_DELETED = "schema-deleted"
    TOPIC_DELETED = "topic-deleted"
    # Found by a resync: a BookKeeper ledger of Pulsar's that nothing references (the watcher was down or
    # disconnected when it left, or it was never watched).
    UNREFERENCED = "unreferenced"


@dataclass(frozen=True)
class Suspect:
    request: PendingDeleteLedgerInfo
    reason: Reason

    @property
    def workflow_id(self) -> str:
        """One suspect workflow per (type, ledger[, offload uuid]), as the service keys its deletions: a
        ledger suspected twice while its run is open (by the diff of one watcher and the resync of the next,
        or by two watchers for a moment) is waited for and requested once. A closed run does not stop a new
        one (the watcher starts them with ``ALLOW_DUPLICATE``): a suspect that ended REFERENCED, or whose
        request ended in use, may be an orphan later.
        """
        return WORKFLOW_ID_PREFIX + self.request.workflow_id.removeprefix("ledger-deletion/")

    @property
    def key(self) -> tuple[LedgerType, int]:
        return self.request.ledger_type, self.request.ledger_id


def suspect(
    reason: Reason,
    *,
    topic_name: str,
    component: LedgerComponent,
    ledger_type: LedgerType,
    ledger_id: int,
    cursor_name: str | None = None,
    schema_id: str | None = None,
    context: LedgerInfo | None = None,
) -> Suspect:
    """The suspect and the request it would become, validated as the service validates requests.

    Raises:
        InvalidRequestError: a name the service would refuse (the request could never be decided).
    """
    request = PendingDeleteLedgerInfo(
        topic_name=topic_name,
        ledger_component=component,
        ledger_type=ledger_type,
        ledger_id=ledger_id,
        cursor_name=cursor_name,
        schema_id=schema_id,
        context=context,
        check_ledger_still_in_use=True,
        properties={SOURCE_PROPERTY: SOURCE, REASON_PROPERTY: reason.value},
    )
    return Suspect(request_from_wire(request_to_wire(request)), reason)
