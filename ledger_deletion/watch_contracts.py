"""Inputs and outputs of the watcher's workflows and activities: one dataclass in, one out.

Pure module (no I/O) shared by workflow and activity code; what Temporal records in the suspect and
reconcile workflows' histories, so the versioning rule of ``ledger_deletion/contracts.py`` applies here too.
No ``from __future__ import annotations``, for the reason given there.
"""

from dataclasses import dataclass, field
from enum import StrEnum

from ledger_deletion.contracts import RetrySpec
from ledger_deletion.request import PendingDeleteLedgerInfo


class SuspectStep(StrEnum):
    """The suspect workflow's activities, by name."""

    CHECK = "check_suspect"
    PUBLISH = "publish_suspect"


class SuspectOutcome(StrEnum):
    PUBLISHED = "PUBLISHED"  # still there after the delay: requested on the deletion topic
    GONE = "GONE"  # its owner's own delete finished (no BookKeeper znode, no offloaded object)
    REFERENCED = "REFERENCED"  # something in Pulsar's metadata lists it (again, or still): not requested


@dataclass(frozen=True)
class SuspectPolicy:
    """What a suspect workflow needs from settings (workflows cannot read them)."""

    delay_seconds: float = 300.0
    # Retried until it succeeds (max_attempts 0: unlimited): a suspect waiting for ZooKeeper, S3 or Pulsar
    # to come back is still a suspect, not a failure.
    retry: RetrySpec = field(
        default_factory=lambda: RetrySpec(max_attempts=0, initial_seconds=1.0, max_interval_seconds=300.0)
    )
    activity_timeout_seconds: float = 60.0


@dataclass(frozen=True)
class SuspectInput:
    request: PendingDeleteLedgerInfo  # the request it becomes; properties say source=watcher and why
    policy: SuspectPolicy = field(default_factory=SuspectPolicy)


@dataclass(frozen=True)
class SuspectResult:
    outcome: SuspectOutcome
    ledger_id: int
    ledger_type: str
    reason: str = ""  # what the check found (the listing that references it, the keys that exist)
    message_id: str = ""  # of the published request


@dataclass(frozen=True)
class CheckSuspectInput:
    request: PendingDeleteLedgerInfo


@dataclass(frozen=True)
class CheckSuspectResult:
    # The BookKeeper znode, or any of the offloaded objects, still exists (True too when the objects'
    # store is not one this process can look in: the service decides, as for any request).
    exists: bool
    # What in Pulsar's metadata store lists it ("" when nothing does).
    referenced_as: str = ""
    detail: str = ""


@dataclass(frozen=True)
class PublishSuspectInput:
    request: PendingDeleteLedgerInfo


@dataclass(frozen=True)
class PublishSuspectResult:
    message_id: str


RUN_RECONCILE = "run_reconcile"  # the scheduled reconcile's one activity


@dataclass(frozen=True)
class ReconcileRunInput:
    """One scheduled reconcile: the command line to run (``ledger-deletion reconcile --submit`` or a
    ``spark-submit`` of the job) and how long it may take."""

    argv: list[str]
    timeout_seconds: float = 6 * 3600.0


@dataclass(frozen=True)
class ReconcileRunResult:
    exit_code: int
    output_tail: str = ""  # the last lines it printed, for whoever reads the history
