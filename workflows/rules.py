"""The deletion workflow's pure rules: what keeps a ledger, what a verdict or a decision comes to, and the
reasons the workflow gives, in words an operator acts on.

Pure functions and constants over the contracts, so they are deterministic and imported by the workflow
module (:mod:`workflows.ledger_deletion`, which keeps the orchestration: the steps, their order and the
timers) through Temporal's sandbox pass-through. No I/O import, no module state that changes: without the
sandbox every run shares this module's globals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ledger_deletion.contracts import (
    AskOwnerBrokerResult,
    Decision,
    MessageRef,
    Outcome,
    Verdict,
    VerifyBkMetadataResult,
)
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo

MAX_VERSION_RACES = 3  # the znode changed between verify and delete this many times: give up, dead-letter
# Other requests one run decides for its ledger; any further one is dead-lettered undecided (replayable):
# a flood of distinct requests for one ledger id costs each a signal, a dead letter and an ack, not a
# decision. A request from the system topic (the broker's own) is decided past the limit too. A flood long
# enough reaches Temporal's history limit; the run is then terminated and the sweeper hands its held
# messages to a new run.
MAX_JOINED_DECISIONS = 10
JOIN_STEP = "join"  # the failed step of a joined request dead-lettered undecided
GONE_ON_RETRY = (
    "znode gone when a retried delete ran: removed by the failed attempt before its reply was lost, or by "
    "something else; not known which"
)
KEPT_FOR_REPLAY = "KeptForReplay"  # the error type of a request kept in the dead-letter topic to be replayed

# Read-only: the service runs workflows outside the SDK's sandbox, so module state is shared by every run.
VERDICT_OUTCOME: Mapping[Verdict, Outcome] = MappingProxyType(
    {
        Verdict.NOT_FOUND: Outcome.ALREADY_DELETED,
        Verdict.MISMATCH: Outcome.SKIPPED_METADATA_MISMATCH,
        Verdict.NOT_PULSAR: Outcome.SKIPPED_NOT_PULSAR,
        Verdict.UNKNOWN_NAMESPACE: Outcome.SKIPPED_UNKNOWN_NAMESPACE,
    }
)

# Why a request kept past the grace is dead-lettered rather than acked as in use: the broker will not send it
# again, so acking it would lose it.
STORE_AHEAD = (
    "its owner broker does not list it: ManagedLedgerImpl.internalTrimLedgers drops a trimmed ledger from "
    "memory before it writes the store, and a failed write is not rolled back, so the broker will not send "
    "this request again; replay it once the store no longer lists the ledger (the owner's next store write) "
    "or the topic has reloaded (then it is in use again, and trimmed and sent anew)"
)
COPY_RELEASED_IN_MEMORY = (
    "ManagedLedgerImpl marks an offloaded ledger's BookKeeper copy bookkeeperDeleted in memory before it "
    "writes the store, so the broker will not send this request again; replay it once the store says the "
    "copy is released, or the topic has reloaded"
)
STILL_OPEN = (
    "Pulsar trims only closed ledgers (the current one never), so an open data ledger is being written or "
    "was left open by a writer that died mid-rollover; replay it once it is closed or listed nowhere"
)
# Rollover closes the current ledger before it creates the next (ManagedLedgerImpl.rollCurrentLedgerIfFull ->
# ledgerClosed -> createLedgerAfterClosed), and a topic load recovers only the last ledger its list names
# (ManagedLedgerImpl.initialize): an OPEN data ledger older than the newest listed one, listed nowhere, is one
# a broker left when it died mid-rollover, and nothing will ever close it. Re-queueing it would be endless.
LEFT_OPEN = (
    "a broker left it OPEN when it died mid-rollover (it is older than the newest listed ledger, and a topic "
    "load recovers only the last listed one), so nothing will close it; to have it deleted, recover and "
    "close it with `bin/bookkeeper shell readledger --ledgerid {ledger} --force-recovery --firstentryid 0 "
    "--lastentryid 0` (an open with recovery closes it), check that `bin/bookkeeper shell ledgermetadata "
    "--ledgerid {ledger}` says CLOSED, then request it again (reconcile and the watcher's resync find it)"
)
NEWER_THAN_LISTED = (
    "a rollover, a cursor switch or a schema write creates its ledger before it writes the store, and "
    "PIP-186's own consumer defers ids above the highest in use; replay it once the store lists it or a "
    "newer ledger"
)


@dataclass(frozen=True)
class Kept:
    """What keeps a ledger at one check, and whether the broker sends the request again once it lets go."""

    where: str
    resent: bool  # the owner itself still uses it: it trims it later and sends a new request
    replay_when: str = ""  # not resent: why the request is kept (dead-lettered) rather than acked
    # Not resent and nothing will change it: reported with this outcome past the grace, acked (the reason
    # in ``replay_when`` says what an operator does).
    report_as: Outcome | None = None
    owner: str = ""  # the owner broker's URL when it is the broker that still uses the ledger


@dataclass(frozen=True)
class Done:
    """What deciding one request came to (``Decision`` less the request and the failed step)."""

    outcome: Outcome
    reason: str = ""
    deleted_keys: list[str] = field(default_factory=list)
    would_delete_keys: list[str] = field(default_factory=list)
    bytes: int = 0


class Finished(Exception):
    """A step decided the outcome early (not an error): the workflow ends the decision with it."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def finish_unless_match(verified: VerifyBkMetadataResult) -> VerifyBkMetadataResult:
    """The verification, when its ledger is still the one requested; otherwise the decision ends here with
    its verdict's outcome (already deleted, metadata mismatch, not Pulsar's, unknown namespace)."""
    if verified.verdict is not Verdict.MATCH:
        raise Finished(VERDICT_OUTCOME[verified.verdict], verified.reason)
    return verified


def listing_of_an_offloaded_copy(req: PendingDeleteLedgerInfo, answer: AskOwnerBrokerResult) -> bool:
    """The owner lists a data ledger whose offload is complete, and the request is for its BookKeeper copy."""
    return (
        answer.offloaded
        and answer.referenced_as == "ledgers"
        and req.ledger_type is LedgerType.LEDGER
        and req.ledger_component is LedgerComponent.MANAGED_LEDGER
    )


def unsettled(req: PendingDeleteLedgerInfo, verified: VerifyBkMetadataResult) -> Kept | None:
    """A BookKeeper ledger not yet settled enough to delete: a data ledger still open, or a ledger newer than
    everything its owner lists in Pulsar's metadata store. (A cursor ledger is deleted open by Pulsar itself:
    ManagedCursorImpl.switchToNewLedger deletes the old one without closing it.)"""
    data = req.ledger_component is LedgerComponent.MANAGED_LEDGER
    if data and verified.state == "OPEN" and verified.newest_listed > req.ledger_id:
        return Kept(
            f"ledger {req.ledger_id} is OPEN in BookKeeper, older than the newest listed "
            f"({verified.newest_listed})",
            False,
            LEFT_OPEN.format(ledger=req.ledger_id),
            report_as=Outcome.SKIPPED_LEFT_OPEN,
        )
    if data and verified.state in ("OPEN", "IN_RECOVERY"):
        return Kept(f"ledger {req.ledger_id} is {verified.state} in BookKeeper", False, STILL_OPEN)
    if 0 <= verified.newest_listed < req.ledger_id:
        return Kept(
            f"ledger {req.ledger_id} is newer than every ledger its owner lists in Pulsar's metadata store "
            f"(newest {verified.newest_listed})",
            False,
            NEWER_THAN_LISTED,
        )
    return None


WEIGHT: Mapping[Outcome, int] = MappingProxyType(
    {  # what happened to the ledger first, then what needs an operator, then why it was left alone
        Outcome.DELETED: 0,
        Outcome.WOULD_DELETE: 0,
        Outcome.DEAD_LETTERED: 1,
        Outcome.WOULD_DEAD_LETTER: 1,
        Outcome.ALREADY_DELETED: 2,
        Outcome.SKIPPED_IN_USE: 3,
        Outcome.SKIPPED_METADATA_MISMATCH: 4,
        Outcome.SKIPPED_NOT_PULSAR: 5,
        Outcome.SKIPPED_UNKNOWN_NAMESPACE: 6,
        Outcome.SKIPPED_LEFT_OPEN: 7,
    }
)


def weightiest(decisions: list[Decision]) -> Decision:
    """The decision a run reports (result and DeletionOutcome) when it decided more than one request: a
    ledger one request deleted is deleted, whatever a forged one beside it was told."""
    return min(decisions, key=lambda d: WEIGHT[d.outcome])


def ref_key(ref: MessageRef) -> str:
    """A message's identity in a run: Pulsar redelivers a message with the same id to a new holder when the
    old one dies, so the same (holder, id) pair twice is one ack."""
    return f"{ref.ack_queue}|{ref.message_id}"
