"""After a gap in watching: the BookKeeper ledgers of Pulsar's that no record references.

What left Pulsar's metadata while the watcher was down (or disconnected, or before it ever ran) cannot be
diffed: the watcher did not see it go. BookKeeper still holds every ledger whose delete failed, so the
watcher lists BookKeeper's ledger ids, takes away every id a fresh read of Pulsar's metadata references
(:meth:`Snapshot.bk_referenced`), and reads the metadata of the rest: a ledger tagged by Pulsar as data,
cursor or schema ledger is a suspect like any other, and waits out the same delay.

The listing is read before Pulsar's records (as reconcile's extract does), so a ledger its broker created
and stored meanwhile is referenced. One created and not yet stored is newer than anything its owner lists
(a broker creates a ledger, then stores the list naming it: ``ManagedLedgerImpl#createComplete`` ->
``updateLedgersListAfterRollover``): such a ledger is left out while its owner's record exists. The
suspect's check after the delay reads its owner's record again in any case.

Offloaded objects are not listed here (a bucket listing per resync would cost far more than the watch
itself): an offload that left while the watcher was away is for the scheduled reconcile to find.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.bk_metadata import (
    CUSTOM_APPLICATION,
    CUSTOM_COMPONENT,
    CUSTOM_CURSOR,
    CUSTOM_MANAGED_LEDGER,
    CUSTOM_SCHEMA_ID,
    LedgerMetadata,
)
from ledger_deletion.formats.managed_ledger import topic_name_from_managed_ledger
from ledger_deletion.request import LedgerComponent, LedgerType
from ledger_deletion.watch.snapshot import Snapshot
from ledger_deletion.watch.suspects import Reason, Suspect, suspect

__all__ = ["pulsar_tagged", "unreferenced", "unreferenced_suspects"]

PULSAR = "pulsar"
MANAGED_LEDGER_COMPONENT = "managed-ledger"  # LedgerMetadataUtils: data and cursor ledgers
SCHEMA_COMPONENT = "schema"


def unreferenced(listed: Iterable[int], snapshot: Snapshot, others: Sequence[Snapshot] = ()) -> list[int]:
    """The listed ledger ids no record of ``snapshot`` (nor of ``others``: the metadata stores of the other
    Pulsar clusters sharing this BookKeeper; listed in any keeps it) references, in order."""
    referenced = snapshot.bk_referenced()
    for other in others:
        referenced |= other.bk_referenced()
    return sorted(ledger_id for ledger_id in listed if ledger_id not in referenced)


def pulsar_tagged(metadata: Mapping[int, LedgerMetadata]) -> int:
    """How many of these ledgers Pulsar wrote (``application=pulsar``): with no ``/managed-ledgers`` in the
    store read, a count above 0 means the store is the wrong one (reconcile's extract refuses the same way,
    ``_refuse_without_pulsar_metadata``)."""
    return sum(1 for md in metadata.values() if md.custom(CUSTOM_APPLICATION) == PULSAR)


def unreferenced_suspects(
    metadata: Mapping[int, LedgerMetadata],
    snapshot: Snapshot,
    known: Collection[tuple[LedgerType, int]] = (),
    others: Sequence[Snapshot] = (),
) -> list[Suspect]:
    """Suspects of unreferenced ledgers (their metadata by id), but those ``known`` already
    (``(ledger type, id)``: suspects the diff of the same resync found) and those not Pulsar's to request:
    another application's, compacted-topic ledgers (no request names them), or younger than what their
    owner lists (in any store of ``others`` too: the lowest of their newest bounds it). Suspects the service
    would refuse are described in ``snapshot.rejected``."""
    stores = (snapshot, *others)
    out: list[Suspect] = []
    for ledger_id, md in sorted(metadata.items()):
        if (LedgerType.LEDGER, ledger_id) in known or md.custom(CUSTOM_APPLICATION) != PULSAR:
            continue
        component = md.custom(CUSTOM_COMPONENT)
        try:
            if component == MANAGED_LEDGER_COMPONENT:
                found = _managed_ledger_suspect(ledger_id, md, stores)
            elif component == SCHEMA_COMPONENT:
                found = _schema_suspect(ledger_id, md, stores)
            else:
                continue
        except (InvalidRequestError, ValueError) as exc:
            snapshot.rejected.append(f"unreferenced ledger {ledger_id} ({component}): {exc}")
            continue
        if found is not None:
            out.append(found)
    return out


def _bound(newest: Iterable[int | None]) -> int | None:
    """The bound of "newer than listed" across the stores with a record of the owner (None: none has one).

    The lowest, as the service's ``activities/bookkeeper.py`` ``_bound``: a geo-replicated topic's ledger
    may be any of its clusters' rollover under way, settled only once it is below what each of them lists.
    """
    return min((n for n in newest if n is not None), default=None)


def _managed_ledger_suspect(ledger_id: int, md: LedgerMetadata, stores: Sequence[Snapshot]) -> Suspect | None:
    ml_name = md.custom(CUSTOM_MANAGED_LEDGER)
    if not ml_name:
        return None
    cursor = md.custom(CUSTOM_CURSOR)
    # A cursor switching ledgers stores the new one after creating it (ManagedCursorImpl
    # #createNewMetadataLedger -> switchToNewLedger); a cursor with no ledger stored (a new one, or one that
    # keeps its position inline) is judged by its managed ledger's newest ledger, as a data ledger is.
    newest = _bound(_newest_of_cursor(store, ml_name, cursor) for store in stores)
    if newest is not None and ledger_id > newest:
        return None  # newer than anything its owner lists: not stored yet, or being created
    return suspect(
        Reason.UNREFERENCED,
        topic_name=topic_name_from_managed_ledger(ml_name),
        component=LedgerComponent.MANAGED_CURSOR if cursor else LedgerComponent.MANAGED_LEDGER,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
        cursor_name=cursor or None,
    )


def _newest_of_cursor(store: Snapshot, ml_name: str, cursor: str | None) -> int | None:
    stored = store.cursor_ledger(ml_name, cursor) if cursor else None
    return stored if stored is not None and stored >= 0 else store.newest_listed(ml_name)


def _schema_suspect(ledger_id: int, md: LedgerMetadata, stores: Sequence[Snapshot]) -> Suspect | None:
    schema_id = md.custom(CUSTOM_SCHEMA_ID)
    if not schema_id:
        return None
    newest = _bound(store.newest_schema_ledger(schema_id) for store in stores)
    if newest is not None and ledger_id > newest:
        return None  # a new schema version's ledger, written before the locator naming it
    return suspect(
        Reason.UNREFERENCED,
        topic_name=schema_id,
        component=LedgerComponent.SCHEMA_STORAGE,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
        schema_id=schema_id,
    )
