"""Inputs and outputs of the workflow and of every activity: one dataclass in, one out.

Pure module (no I/O) shared by workflow code and activity code. These dataclasses are what Temporal records
in a workflow's history, so changing them is changing the workflow: the versioning rule in
``workflows/ledger_deletion.py`` applies (from the first release on, a field added to a recorded dataclass
needs a default, which the data converter fills in for histories recorded without it).

No ``from __future__ import annotations`` here or in ``request.py``: the data converter calls
``typing.get_type_hints`` on each dataclass it decodes, and string annotations would be compiled anew on
every decode, on the workflow worker's hot path.
"""

from dataclasses import dataclass, field
from enum import StrEnum

from ledger_deletion.request import LedgerInfo, PendingDeleteLedgerInfo


class Mode(StrEnum):
    """What a run may do: ``live`` deletes what every check allows; ``shadow`` makes the same decision on the
    same checks and deletes nothing, recording what it would have done (``WOULD_DELETE`` and its evidence)."""

    LIVE = "live"
    SHADOW = "shadow"


class Outcome(StrEnum):
    """How a deletion request ended. Every outcome is acked."""

    DELETED = "DELETED"
    ALREADY_DELETED = "ALREADY_DELETED"
    SKIPPED_IN_USE = "SKIPPED_IN_USE"
    SKIPPED_METADATA_MISMATCH = "SKIPPED_METADATA_MISMATCH"
    SKIPPED_NOT_PULSAR = "SKIPPED_NOT_PULSAR"
    # A ledger of a namespace no Pulsar metadata store sharing this BookKeeper has (or, with
    # LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none, while the tripwire is tripped): another cluster's, kept.
    SKIPPED_UNKNOWN_NAMESPACE = "SKIPPED_UNKNOWN_NAMESPACE"
    # A data ledger a broker left OPEN when it died mid-rollover, which nothing will close: reported (the
    # reason says how to recover and close it), not deleted and not re-queued without end.
    SKIPPED_LEFT_OPEN = "SKIPPED_LEFT_OPEN"
    DEAD_LETTERED = "DEAD_LETTERED"
    # Shadow runs only: what a live run would have reached where it changes something. The other outcomes
    # mean the same in both modes (nothing is touched for them).
    WOULD_DELETE = "WOULD_DELETE"
    WOULD_DEAD_LETTER = "WOULD_DEAD_LETTER"


class Step(StrEnum):
    """Workflow steps; the values are the activity names, so operators see the same word everywhere."""

    CHECK_TOPIC = "check_topic"
    ASK_OWNER_BROKER = "ask_owner_broker"
    WAIT_IN_USE = "wait_in_use"
    WAIT_LEDGER_AGE = "wait_ledger_age"
    VERIFY_BK_METADATA = "verify_bk_metadata"
    CHECK_OFFLOAD_SUPERSEDED = "check_offload_superseded"
    CHECK_OFFLOAD_LISTED = "check_offload_listed"
    DELETE_BK_LEDGER = "delete_bk_ledger"
    DELETE_OFFLOAD_SEGMENT = "delete_offload_segment"
    # Shadow's read-only stand-in for delete_offload_segment: the same ownership checks, HEAD only.
    INSPECT_OFFLOAD_SEGMENT = "inspect_offload_segment"
    # A destructive step refused by the kill switch (``ledger-deletion pause``): the run waits for resume.
    PAUSED = "paused"
    PUBLISH_DEAD_LETTER = "publish_dead_letter"
    ACK_MESSAGES = "ack_messages"
    DONE = "done"


@dataclass(frozen=True)
class RetrySpec:
    max_attempts: int = 10
    initial_seconds: float = 1.0
    max_interval_seconds: float = 600.0


@dataclass(frozen=True)
class DeletionPolicy:
    """Everything the workflow needs from settings, carried in its input (workflows cannot read settings)."""

    pulsar_queue: str = "ledger-deletion-pulsar"
    bookkeeper_queue: str = "ledger-deletion-bookkeeper"
    offload_queue: str = "ledger-deletion-offload"
    default_retry: RetrySpec = field(default_factory=RetrySpec)
    step_retry: dict[str, RetrySpec] = field(default_factory=dict)
    activity_timeout_seconds: float = 60.0
    in_use_rechecks: int = 3
    in_use_recheck_seconds: float = 60.0
    # A BookKeeper ledger younger than this (by its metadata's ctime, else its znode's) is decided only once
    # it is this old: what creates a ledger lists it in Pulsar's metadata store a moment later.
    min_ledger_age_seconds: float = 60.0
    ack_schedule_to_start_seconds: float = 120.0
    # Start-to-close timeouts of single steps, by step name; the others get activity_timeout_seconds.
    step_timeout_seconds: dict[str, float] = field(default_factory=dict)
    # A read-only check (a local activity) whose next retry is further off than this waits on a durable timer
    # instead of inside the open workflow task. The SDK heartbeats a workflow task held open past 80 % of its
    # 10 s timeout, and each heartbeat is a workflow task of its own (three events, a Temporal Cloud action);
    # a timer costs one action too, and survives a worker restart. So the short backoffs (1, 2, 4, 8 s) stay
    # in the task, and the long ones of a system that is down become timers.
    local_retry_threshold_seconds: float = 10.0
    # BookKeeper's ledgers root: a shadow run names the znode it would delete.
    bk_ledgers_root: str = "/ledgers"
    # A run whose delete the kill switch refused waits for the ``resume`` signal, and looks again after this
    # long in case the signal never comes (the switch flipped back in the Temporal UI, not by the CLI),
    # doubling up to ``pause_recheck_max_seconds``: each look costs about a dozen history events.
    pause_recheck_seconds: float = 30.0
    pause_recheck_max_seconds: float = 600.0

    def retry_for(self, step: Step) -> RetrySpec:
        return self.step_retry.get(step.value, self.default_retry)

    def timeout_seconds_for(self, step: Step) -> float:
        return self.step_timeout_seconds.get(step.value, self.activity_timeout_seconds)


@dataclass(frozen=True)
class MessageRef:
    """A received, not yet acked deletion message; acked only by the process that received it."""

    message_id: str  # str(pulsar MessageId), the key of that process's pending-ack registry
    ack_queue: str  # task queue of the receiving process's ack worker
    # Where the message came from, for whoever reads the history ("" and 0 when the ingest sweeper hands a
    # held message to a new run: it keeps only the message id).
    topic: str = ""
    redelivery_count: int = 0
    # The message's own request, sent with a message that joins a run; None for the run's first message,
    # whose request is the run's input (not sent twice). A joining request that differs from every request
    # the run has decided is decided on its own before its message is acked: a forged or stale request for
    # the same ledger must not answer for the real one. Its checkLedgerStillInUse counts for the run too.
    request: PendingDeleteLedgerInfo | None = None
    # Read from the system topic, which only the broker writes. Past the run's limit of joined decisions,
    # such a request is still decided: a tenant flooding one ledger id cannot push the broker's out.
    from_system_topic: bool = False
    # Received by a live process for a request outside its live allow-list (or on its deny-list): the run,
    # in shadow, decides it, then dead-letters it with this reason before acking it, so that it can be
    # replayed once the list is widened. Empty for every other message.
    replay_reason: str = ""


# --- workflow ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeletionInput:
    request: PendingDeleteLedgerInfo
    policy: DeletionPolicy
    # The message that started this run, carried in the start rather than signalled (one event fewer per
    # deletion, and the start can be eager). Later messages for the same ledger join by signal.
    first_message: MessageRef
    mode: Mode = Mode.LIVE


@dataclass(frozen=True)
class Decision:
    """What a run decided for one of the requests it was given."""

    request: str  # the request's one-line summary
    topic_name: str
    outcome: Outcome
    reason: str = ""
    failed_step: str = ""
    deleted_keys: list[str] = field(default_factory=list)
    # WOULD_DELETE: the znode path or the s3:// keys a live run would delete.
    would_delete_keys: list[str] = field(default_factory=list)
    # Bytes freed (DELETED) or that would be (WOULD_DELETE): the BookKeeper metadata's ``length``, or the
    # objects' sizes from HEAD; 0 where nothing says.
    bytes: int = 0


@dataclass(frozen=True)
class DeletionResult:
    outcome: Outcome
    ledger_id: int
    ledger_type: str
    reason: str = ""
    failed_step: str = ""
    messages_acked: int = 0
    messages_unacked: int = 0  # holders that went away; those messages are redelivered and end in a new run
    deleted_keys: list[str] = field(default_factory=list)
    # When messages that joined brought requests other than the run's own (another topic, another offload
    # context), each was decided on its own: every decision, the run's own first. The fields above then
    # describe the weightiest of them (see the workflow's _weightiest). Empty for a run with one request.
    decisions: list[Decision] = field(default_factory=list)
    # Joined requests past the workflow's MAX_JOINED_DECISIONS: dead-lettered undecided (step ``join``).
    joined_dead_lettered: int = 0
    mode: Mode = Mode.LIVE
    would_delete_keys: list[str] = field(default_factory=list)
    bytes: int = 0
    # Requests dead-lettered for replay once the live allow-list is widened (``MessageRef.replay_reason``).
    kept_for_replay: int = 0


@dataclass(frozen=True)
class DeletionStatus:
    """Answer of the ``status`` query."""

    step: str
    attempts: int
    last_error: str
    messages_collected: int
    messages_acked: int
    outcome: str = ""


# --- activities -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckTopicInput:
    topic_name: str


@dataclass(frozen=True)
class CheckTopicResult:
    exists: bool
    partitions: int = 0


@dataclass(frozen=True)
class AskOwnerBrokerInput:
    topic_name: str
    ledger_id: int


@dataclass(frozen=True)
class AskOwnerBrokerResult:
    in_use: bool
    topic_exists: bool = True
    referenced_as: str = ""  # "ledgers" | "cursor:<name>" | "schema" | "compacted" when in use
    owner_url: str = ""
    # Listed as a ledger whose offload is complete (internalStats ``offloaded``): the broker reads it from
    # tiered storage, so the listing alone does not show that its BookKeeper copy is in use.
    offloaded: bool = False
    # When listed in ``ledgers``: the fingerprint of the owner's whole ledger list (formats.managed_ledger
    # ``ledger_list_digest``). A ManagedLedgerInfo read from Pulsar's metadata store is trusted to speak for
    # this topic only when its list gives the same: not another cluster's copy, not a stale snapshot.
    listed_digest: str = ""
    # The owner refuses to load the topic (a transaction-internal managed ledger: the coordinator's log, a
    # pending-ack store), so it cannot say what the topic references. ``in_use`` stays True (nothing says
    # the ledger is unused); the workflow lets Pulsar's metadata store decide a BookKeeper ledger, and
    # dead-letters an offloaded one.
    owner_cannot_load: bool = False


class Verdict(StrEnum):
    MATCH = "MATCH"
    NOT_FOUND = "NOT_FOUND"
    MISMATCH = "MISMATCH"
    NOT_PULSAR = "NOT_PULSAR"
    UNKNOWN_NAMESPACE = "UNKNOWN_NAMESPACE"  # its tagged namespace is not known to this BookKeeper's clusters


@dataclass(frozen=True)
class VerifyBkMetadataInput:
    request: PendingDeleteLedgerInfo
    # Also read the ledger's entry in its ManagedLedgerInfo (Pulsar's metadata store): has the broker
    # released the BookKeeper copy of this offloaded ledger?
    check_bk_copy_released: bool = False
    # With ``check_bk_copy_released``: the owner's ``listed_digest``. The ManagedLedgerInfo read must list the
    # same ledgers, or it is not trusted and the copy is kept ("" matches no list).
    owner_listed_digest: str = ""


@dataclass(frozen=True)
class VerifyBkMetadataResult:
    verdict: Verdict
    znode_version: int = -1
    reason: str = ""
    metadata_format_version: int = 0
    length: int = 0
    # A schema ledger the schema registry's locator (``/schemas/<schemaId>``) still lists: in use, whatever
    # the topic's owner says or whether the topic still exists (its schema may outlive it).
    schema_referenced: bool = False
    # Asked with ``check_bk_copy_released``: the managed ledger lists this ledger with an OffloadContext that
    # is ``complete`` and ``bookkeeperDeleted``: the broker reads it from tiered storage and has given up
    # its BookKeeper copy (whose own delete failed, or which it sent here to delete).
    bk_copy_released: bool = False
    # What in Pulsar's metadata store still lists the ledger ("" when nothing does): its managed ledger's
    # ledger list (a BookKeeper copy it has released aside), or, for a cursor ledger, its cursor's
    # ``cursorsLedgerId``. The owner broker answers from memory, which a trim updates before the store; a
    # store write that failed leaves the ledger listed, and the next owner loads it from there.
    metadata_store_listing: str = ""
    # With a MATCH: the ledger's state in BookKeeper (OPEN, IN_RECOVERY, CLOSED); "" otherwise.
    state: str = ""
    # With a MATCH: seconds since the ledger was created (its metadata's ctime, else its znode's ctime), by
    # the activity's clock; None otherwise.
    age_seconds: float | None = None
    # The highest ledger id the ledger's owner lists in Pulsar's metadata store (its managed ledger's ledgers,
    # its cursor's cursorsLedgerId, its schema's locator); -1 when nothing is listed. A ledger above it is
    # newer than anything listed: created, and not yet written to the store. With other clusters' stores, the
    # lowest of their highest (activities.bookkeeper._bound).
    newest_listed: int = -1
    # The ledger's custom metadata (the tags Pulsar writes: application, component, pulsar/managed-ledger,
    # ...), as text, when its metadata parsed: what the verdict rested on, kept in the audit log's evidence.
    tags: dict[str, str] = field(default_factory=dict)
    # With LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none: the ledger's namespace when this cluster does not have
    # it and the tripwire had not tripped (an old orphan of a namespace deleted half-way); "" otherwise.
    unknown_namespace: str = ""


@dataclass(frozen=True)
class OffloadSupersededInput:
    request: PendingDeleteLedgerInfo  # an OFFLOAD_LEDGER request whose ledger its topic still lists
    owner_listed_digest: str  # as in VerifyBkMetadataInput


@dataclass(frozen=True)
class OffloadSupersededResult:
    # The ledger's entry in its ManagedLedgerInfo names another offload uuid than the request's: a later
    # offload attempt replaced the one whose objects the request names, and nothing reads them any more.
    superseded: bool
    reason: str = ""


@dataclass(frozen=True)
class OffloadListedInput:
    request: PendingDeleteLedgerInfo  # an OFFLOAD_LEDGER request


@dataclass(frozen=True)
class OffloadListedResult:
    # What in Pulsar's metadata store still references the request's objects ("" when nothing does): the
    # ledger's entry in its ManagedLedgerInfo under the request's offload uuid (or one of its segments'). A
    # trim whose store write failed leaves that entry, and the next owner reads the objects through it.
    listing: str = ""
    # Why the objects may be another Pulsar cluster's (their namespace is known to none of the stores sharing
    # this BookKeeper and its offload store, or the shared-BookKeeper tripwire is tripped): "" when not. Kept,
    # SKIPPED_UNKNOWN_NAMESPACE, as a BookKeeper ledger of such a namespace is.
    namespace_refusal: str = ""
    # Their namespace when this cluster does not have it and nothing refused it yet (``none``, untripped):
    # the delete asks the tripwire again (DeleteOffloadInput.unknown_namespace).
    unknown_namespace: str = ""


@dataclass(frozen=True)
class DeleteBkLedgerInput:
    ledger_id: int
    expected_version: int
    # The ledger's namespace when this cluster does not have it (VerifyBkMetadataResult.unknown_namespace):
    # the delete refuses it if the shared-BookKeeper tripwire has tripped since it was verified.
    unknown_namespace: str = ""


class DeleteBkLedgerStatus(StrEnum):
    DELETED = "DELETED"
    ALREADY_DELETED = "ALREADY_DELETED"  # no znode at the first attempt: someone else removed it
    # No znode at a retry: the failed attempt's delete may have taken effect before its reply was lost, or
    # something else removed the ledger; which of the two is not known, so it is not reported as deleted.
    GONE_ON_RETRY = "GONE_ON_RETRY"
    VERSION_CHANGED = "VERSION_CHANGED"
    # A ledger of a namespace this cluster does not have, and the shared-BookKeeper tripwire is tripped.
    TRIPPED = "TRIPPED"


@dataclass(frozen=True)
class DeleteBkLedgerResult:
    status: DeleteBkLedgerStatus


@dataclass(frozen=True)
class DeleteOffloadInput:
    ledger_id: int
    managed_ledger_name: str
    context: LedgerInfo
    # As DeleteBkLedgerInput's (OffloadListedResult.unknown_namespace): the delete refuses the objects if the
    # shared-BookKeeper tripwire has tripped since they were checked.
    unknown_namespace: str = ""


@dataclass(frozen=True)
class DeleteOffloadResult:
    outcome: Outcome  # DELETED | ALREADY_DELETED | SKIPPED_METADATA_MISMATCH | SKIPPED_UNKNOWN_NAMESPACE
    deleted_keys: list[str] = field(default_factory=list)
    reason: str = ""
    bytes: int = 0  # the deleted objects' sizes, from HEAD
    # Each deleted object's size and ETag by s3:// URL, as HEAD saw them before the delete: the audit log's
    # evidence of which bytes went.
    sizes: dict[str, int] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InspectOffloadResult:
    """What ``delete_offload_segment`` would do now, found with the same checks and HEAD alone."""

    outcome: Outcome  # WOULD_DELETE | ALREADY_DELETED | SKIPPED_METADATA_MISMATCH
    keys: list[str] = field(default_factory=list)  # s3://bucket/key of each object it would delete
    bytes: int = 0
    reason: str = ""
    sizes: dict[str, int] = field(default_factory=dict)  # as DeleteOffloadResult's
    etags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditNote:
    """What the audit log keeps of one message's decision (``ledger_deletion/audit``), built by the workflow
    from what it decided and sent with the ack: the acking process makes it durable before it acks, so the
    record costs no history event of its own."""

    message_id: str
    request: str  # the request's one-line summary
    ledger_id: int
    ledger_type: str
    component: str
    topic_name: str
    # Who sent the request: the request's ``source`` property (reconcile, watcher, submit), else broker.
    source: str
    outcome: Outcome
    reason: str = ""
    failed_step: str = ""
    mode: Mode = Mode.LIVE
    # The deleted keys (DELETED) or those a live run would delete (WOULD_DELETE), and their bytes.
    keys: list[str] = field(default_factory=list)
    bytes: int = 0
    # What each check and destructive step of the decision answered last, by step name (JSON of its result):
    # the znode's version, state and length, the owner's and the store's answers, the objects' keys and sizes.
    evidence: dict[str, str] = field(default_factory=dict)
    decided_at: str = ""  # ISO 8601, workflow time
    deleted_at: str = ""  # when the destructive step returned (DELETED only)
    message_topic: str = ""
    redelivery_count: int = 0


@dataclass(frozen=True)
class AckMessagesInput:
    message_ids: list[str]
    # One note per message whose decision is recorded before it is acked (``AuditNote``); none for a message
    # acked for another reason.
    audit: list[AuditNote] = field(default_factory=list)


@dataclass(frozen=True)
class AckMessagesResult:
    acked: int
    unknown: int = 0  # not held by this process (already acked)


@dataclass(frozen=True)
class DeadLetterInput:
    request: PendingDeleteLedgerInfo
    reason: str
    failed_step: str
    attempts: int
    workflow_id: str


@dataclass(frozen=True)
class DeadLetterResult:
    message_id: str
