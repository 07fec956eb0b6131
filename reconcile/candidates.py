"""Candidate findings -> ``PendingDeleteLedgerInfo`` requests, and the two files that carry them.

``candidates.jsonl`` holds one request per line in the exact wire shape ``ledger-deletion submit --jsonl``
reads (:func:`ledger_deletion.request.request_to_wire`); ``candidates.avro`` is an Avro container file of the
same records with the deletion topic's schema. Every request is validated with
:func:`~ledger_deletion.request.request_from_wire` before it is written, so a file never carries a request the
service would reject; rejected findings are returned with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import fastavro

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.avro import parsed_schema
from ledger_deletion.formats.offload_keys import (
    BUCKET_PROPERTY,
    MANAGED_LEDGER_NAME_TAG,
    ROLE_TAG,
    java_uuid_parts,
    object_role,
)
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
    request_from_wire,
    request_to_wire,
)

__all__ = [
    "OFFLOAD_DRIVER",
    "Decided",
    "Rejected",
    "RequestsFile",
    "already_decided",
    "build_requests",
    "Written",
    "head_owners",
    "read_requests",
    "request_for_finding",
    "write_requests",
]

OFFLOAD_DRIVER = "aws-s3"
SOURCE_PROPERTY = "source"
SOURCE = "reconcile"


# The objects of a replaced offload attempt: their ledger is listed, only by one managed ledger (its entry,
# its cursors' positions), and that entry stores another classic offload uuid. Each attempt stores a fresh
# uuid before it uploads and the broker reads under the stored one only, so nothing reads these (a failed
# attempt the broker's own cleanup missed). A ``candidate`` with a reason (see transform.py); the deletion
# service checks the stored uuid again (``check_offload_superseded``) before it deletes. Its request says
# the replaced offload was not complete: Pulsar replaces only a failed attempt, and the service refuses a
# complete one.
REPLACED_OFFLOAD_REASON = "replaced-offload-attempt"


@dataclass(frozen=True)
class Rejected:
    finding: Mapping[str, Any]
    reason: str


def request_for_finding(row: Mapping[str, Any]) -> PendingDeleteLedgerInfo:
    """The request for one ``candidate`` finding (a row of the findings table).

    Raises:
        InvalidRequestError: the finding does not make a valid request (e.g. a name Pulsar would not write).
    """
    ledger_type = LedgerType(row["ledger_type"])
    properties = {SOURCE_PROPERTY: SOURCE}
    context = None
    if ledger_type is LedgerType.OFFLOAD_LEDGER:
        msb, lsb = java_uuid_parts(str(row["uuid"]))
        context = LedgerInfo(
            ledger_id=int(row["ledger_id"]),
            size=int(row["bytes"] or 0),
            offload_context=OffloadContext(
                uid_msb=msb,
                uid_lsb=lsb,
                complete=row.get("reason") != REPLACED_OFFLOAD_REASON,
                driver_metadata=OffloadDriverMetadata(OFFLOAD_DRIVER, {BUCKET_PROPERTY: str(row["bucket"])}),
            ),
        )
    request = PendingDeleteLedgerInfo(
        topic_name=str(row["topic_name"]),
        ledger_component=LedgerComponent(row["ledger_component"]),
        ledger_type=ledger_type,
        ledger_id=int(row["ledger_id"]),
        cursor_name=row.get("cursor_name") if row["ledger_component"] == "MANAGED_CURSOR" else None,
        schema_id=row.get("schema_id") if row["ledger_component"] == "SCHEMA_STORAGE" else None,
        context=context,
        check_ledger_still_in_use=True,
        properties=properties,
    )
    # Round-trip through the service's own validation: what we write is what it accepts.
    return request_from_wire(request_to_wire(request))


def build_requests(
    rows: Iterable[Mapping[str, Any]],
) -> tuple[list[PendingDeleteLedgerInfo], list[Rejected]]:
    requests: list[PendingDeleteLedgerInfo] = []
    rejected: list[Rejected] = []
    for row in rows:
        try:
            requests.append(request_for_finding(row))
        except (InvalidRequestError, ValueError, TypeError, KeyError) as exc:
            rejected.append(Rejected(row, str(exc)))
    requests.sort(key=lambda r: (r.ledger_type.value, r.ledger_id))
    return requests, rejected


@dataclass(frozen=True)
class Decided:
    """A candidate the service has decided before, as its audit log says (its latest live decision)."""

    ledger_type: str
    ledger_id: int
    outcome: str
    reason: str
    decided_at: str

    def as_json(self) -> dict[str, Any]:
        return {
            "ledger_type": self.ledger_type,
            "ledger_id": self.ledger_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "decided_at": self.decided_at,
        }


def already_decided(
    requests: Iterable[PendingDeleteLedgerInfo], decided: Mapping[tuple[str, int], Decided]
) -> list[Decided]:
    """The candidates the audit log shows decided already, joined on (request type, ledger id): a ledger kept
    on purpose (SKIPPED_*, DEAD_LETTERED) is still an orphan to the scan, and is requested again only with
    the report saying how it was decided; one deleted and still found means it came back or the delete did
    not take."""
    return [d for r in requests if (d := decided.get((r.ledger_type.value, r.ledger_id))) is not None]


@dataclass
class Written:
    """What :func:`write_requests` wrote: the number of requests, the findings it left out and why, and the
    requests the audit log shows decided before."""

    requests: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    decided: list[Decided] = field(default_factory=list)


def write_requests(
    rows: Iterable[Mapping[str, Any]],
    jsonl: Path,
    avro: Path,
    decided: Mapping[tuple[str, int], Decided],
) -> Written:
    """Both candidate files in one pass over ``rows`` (candidate findings, in the order the files should
    have): each row becomes its request and is written at once, so memory stays that of one row however
    many candidates there are (the rows come from Spark's ``toLocalIterator``, a partition at a time). Only
    the rejected findings and the decided candidates are kept, both few."""
    written = Written()
    jsonl_tmp, avro_tmp = jsonl.with_suffix(".jsonl.tmp"), avro.with_suffix(".avro.tmp")
    with jsonl_tmp.open("w", encoding="utf-8") as text, avro_tmp.open("wb") as binary:
        container = fastavro.write.Writer(binary, parsed_schema(), codec="deflate")
        for row in rows:
            try:
                request = request_for_finding(row)
            except (InvalidRequestError, ValueError, TypeError, KeyError) as exc:
                written.rejected.append(Rejected(row, str(exc)))
                continue
            wire = request_to_wire(request)
            text.write(json.dumps(wire, separators=(",", ":")) + "\n")
            container.write(wire)
            written.requests += 1
            if (seen := decided.get((request.ledger_type.value, request.ledger_id))) is not None:
                written.decided.append(seen)
        container.flush()
    jsonl_tmp.replace(jsonl)
    avro_tmp.replace(avro)
    return written


class RequestsFile(Sequence[PendingDeleteLedgerInfo]):
    """The requests of a ``candidates.jsonl`` as a sequence that reads the file each time it is iterated:
    what the job hands its ``publish`` (a sequence, with its length) without holding every request."""

    def __init__(self, path: Path, count: int) -> None:
        self._path, self._count = path, count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[PendingDeleteLedgerInfo]:
        return read_requests(self._path)

    @overload
    def __getitem__(self, index: int) -> PendingDeleteLedgerInfo: ...
    @overload
    def __getitem__(self, index: slice) -> list[PendingDeleteLedgerInfo]: ...
    def __getitem__(self, index: int | slice) -> PendingDeleteLedgerInfo | list[PendingDeleteLedgerInfo]:
        return list(self)[index]  # reads the whole file: for the odd caller that indexes


def read_requests(path: Path) -> Iterator[PendingDeleteLedgerInfo]:
    """The requests of a ``candidates.jsonl`` this module wrote, one at a time (each line was validated
    when it was written)."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield request_from_wire(json.loads(line))


def head_owners(
    s3: Any, groups: Sequence[tuple[str, str, int | None, Sequence[str]]], threads: int = 16
) -> list[tuple[str, str, int | None, str | None, bool, bool]]:
    """One owners row (:data:`reconcile.transform.OFFLOAD_OWNERS_SCHEMA`) per (bucket, uuid, ledger id, keys)
    group: bucket, uuid, ledger id, ``managed_ledger``, ``untagged``, ``conflicting``.

    The listing carries no user metadata, so the offload candidates are HEADed here, every object of a group:
    the deletion service (``activities/offload.py``, ``_ownership_problem``) deletes the pair only when each
    object that still exists carries ``ManagedLedgerName`` equal to the request's managed ledger and the
    ``role`` its key calls for, and a group that fails that would only come back SKIPPED_METADATA_MISMATCH.

    * ``managed_ledger``: the data object's ManagedLedgerName, else another object's; ``None`` when no object
      has one (or all vanished meanwhile);
    * ``untagged``: an object has no ManagedLedgerName, or not the role its key calls for (``data`` for
      ``…-ledger-<id>``, ``index`` for ``…-index``) — as objects offloaded before apache/pulsar#14907 are;
    * ``conflicting``: the objects name different managed ledgers.

    An object that vanished meanwhile counts for nothing, as for the service (it deletes those that exist).
    """
    from botocore.exceptions import ClientError

    def one(
        group: tuple[str, str, int | None, Sequence[str]],
    ) -> tuple[str, str, int | None, str | None, bool, bool]:
        bucket, uid, ledger_id, keys = group
        names: list[str] = []
        untagged = False
        for key in sorted(keys, key=lambda k: k.endswith("-index")):  # data first: its name is the owner
            try:
                head = s3.head_object(Bucket=bucket, Key=key)
            except ClientError:
                continue
            meta = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
            name = meta.get(MANAGED_LEDGER_NAME_TAG)
            if name:
                names.append(str(name))
            if not name or meta.get(ROLE_TAG) != object_role(key):
                untagged = True
        return bucket, uid, ledger_id, (names[0] if names else None), untagged, len(set(names)) > 1

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, groups))
