"""Support of the workflow tests: the fake activities (``Fakes``), the harness that runs the workflow on them
(``Harness``, the ``harness`` fixture of ``conftest.py``), the requests the tests start it with. Shared by the
tests and by ``record_histories.py``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

from ledger_deletion.contracts import (
    AckMessagesInput,
    AckMessagesResult,
    AskOwnerBrokerInput,
    AskOwnerBrokerResult,
    CheckTopicInput,
    CheckTopicResult,
    DeadLetterInput,
    DeadLetterResult,
    DeleteBkLedgerInput,
    DeleteBkLedgerResult,
    DeleteBkLedgerStatus,
    DeleteOffloadInput,
    DeleteOffloadResult,
    DeletionInput,
    DeletionPolicy,
    DeletionResult,
    InspectOffloadResult,
    MessageRef,
    Mode,
    OffloadListedInput,
    OffloadListedResult,
    OffloadSupersededInput,
    OffloadSupersededResult,
    Outcome,
    RetrySpec,
    Verdict,
    VerifyBkMetadataInput,
    VerifyBkMetadataResult,
)
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)
from workers.ingest import search_attributes_for
from workflows.ledger_deletion import ADD_MESSAGE_SIGNAL, LedgerDeletionWorkflow

FORGED_TOPIC = "public/default/not-the-owner"


@dataclass
class Fakes:
    """Scriptable stand-ins for the real activities; ``calls`` counts invocations by activity name."""

    topic_exists: bool = True
    first_check_stalls_seconds: float = 0.0  # the first check_topic attempt hangs this long
    topic_failures: int = 0  # the first check_topic attempts that fail: transient unless...
    topic_failure_permanent: bool = False  # ...this says the error is permanent (non-retryable)
    in_use_answers: list[bool] = field(default_factory=lambda: [False])
    owner_lists_offloaded: bool = False  # ask_owner_broker's ``offloaded`` when in use
    owner_cannot_load: bool = False  # the owner refuses to load the topic (transaction-internal)
    bk_copy_released: bool = False  # verify's answer when asked whether the BK copy is released
    offload_superseded: bool = False  # check_offload_superseded's answer
    verdicts: list[Verdict] = field(default_factory=lambda: [Verdict.MATCH])
    verdict_by_topic: dict[str, Verdict] = field(
        default_factory=dict
    )  # before ``verdicts``, by request topic
    schema_listed: list[bool] = field(default_factory=lambda: [False])  # verify's schema_referenced, in turn
    store_listed: list[bool] = field(
        default_factory=lambda: [False]
    )  # verify's metadata store listing, in turn
    offload_listed: list[bool] = field(default_factory=lambda: [False])  # check_offload_listed, in turn
    offload_namespace_refusal: str = ""  # check_offload_listed's namespace_refusal
    offload_unknown_namespace: str = ""  # check_offload_listed's unknown_namespace
    offload_deletes: list[DeleteOffloadInput] = field(default_factory=list)  # each input, in turn
    states: list[str] = field(default_factory=lambda: ["CLOSED"])  # verify's BookKeeper state, in turn
    ages: list[float | None] = field(default_factory=lambda: [None])  # verify's age_seconds, in turn
    newest_listed: int = -1  # verify's newest ledger listed by the ledger's owner in the store
    delete_statuses: list[DeleteBkLedgerStatus] = field(
        default_factory=lambda: [DeleteBkLedgerStatus.DELETED]
    )
    delete_error: str | None = None
    # The first this many deletes (either kind) are refused by the kill switch, as the pools' Watch does.
    paused_deletes: int = 0
    offload_outcome: Outcome = Outcome.DELETED
    calls: Counter[str] = field(default_factory=Counter)
    # Per activity name: (start-to-close timeout in seconds, run as a local activity) of its last call.
    runs_as: dict[str, tuple[float, bool]] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    dead_letters: list[DeadLetterInput] = field(default_factory=list)
    delete_versions: list[int] = field(default_factory=list)

    def call(self, name: str) -> None:
        """Count a call of ``name``, and note how the workflow ran it."""
        self.calls[name] += 1
        info = activity.info()
        timeout = info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else 0.0
        self.runs_as[name] = (timeout, info.is_local)

    def activities(self) -> list[Callable[..., Any]]:
        fakes = self

        @activity.defn(name="check_topic")
        def check_topic(inp: CheckTopicInput) -> CheckTopicResult:
            fakes.call("check_topic")
            if fakes.calls["check_topic"] == 1:  # the run's first check, first attempt
                time.sleep(fakes.first_check_stalls_seconds)
            if fakes.calls["check_topic"] <= fakes.topic_failures:
                permanent = fakes.topic_failure_permanent
                raise ApplicationError(
                    "admin API refused the topic name" if permanent else "admin API unavailable",
                    {"attempt": activity.info().attempt},
                    type="InvalidRequestError" if permanent else "AdminApiUnavailable",
                    non_retryable=permanent,
                )
            return CheckTopicResult(exists=fakes.topic_exists)

        @activity.defn(name="ask_owner_broker")
        def ask_owner_broker(inp: AskOwnerBrokerInput) -> AskOwnerBrokerResult:
            fakes.call("ask_owner_broker")
            if fakes.owner_cannot_load:
                return AskOwnerBrokerResult(in_use=True, referenced_as="unknown", owner_cannot_load=True)
            answer = fakes.in_use_answers.pop(0) if len(fakes.in_use_answers) > 1 else fakes.in_use_answers[0]
            return AskOwnerBrokerResult(
                in_use=answer,
                referenced_as="ledgers" if answer else "",
                offloaded=answer and fakes.owner_lists_offloaded,
            )

        @activity.defn(name="verify_bk_metadata")
        def verify_bk_metadata(inp: VerifyBkMetadataInput) -> VerifyBkMetadataResult:
            fakes.call("verify_bk_metadata")
            verdict = fakes.verdict_by_topic.get(inp.request.topic_name) or (
                fakes.verdicts.pop(0) if len(fakes.verdicts) > 1 else fakes.verdicts[0]
            )
            listed = fakes.schema_listed.pop(0) if len(fakes.schema_listed) > 1 else fakes.schema_listed[0]
            in_store = fakes.store_listed.pop(0) if len(fakes.store_listed) > 1 else fakes.store_listed[0]
            state = fakes.states.pop(0) if len(fakes.states) > 1 else fakes.states[0]
            age = fakes.ages.pop(0) if len(fakes.ages) > 1 else fakes.ages[0]
            return VerifyBkMetadataResult(
                verdict,
                znode_version=fakes.calls["verify_bk_metadata"],
                reason="listed by the schema locator" if listed else verdict.value,
                schema_referenced=listed,
                bk_copy_released=inp.check_bk_copy_released and fakes.bk_copy_released,
                metadata_store_listing="its managed ledger lists it in Pulsar's metadata store"
                if in_store
                else "",
                state=state,
                age_seconds=age,
                newest_listed=fakes.newest_listed,
            )

        @activity.defn(name="check_offload_superseded")
        def check_offload_superseded(inp: OffloadSupersededInput) -> OffloadSupersededResult:
            fakes.call("check_offload_superseded")
            return OffloadSupersededResult(fakes.offload_superseded)

        @activity.defn(name="check_offload_listed")
        def check_offload_listed(inp: OffloadListedInput) -> OffloadListedResult:
            fakes.call("check_offload_listed")
            queue = fakes.offload_listed
            listed = queue.pop(0) if len(queue) > 1 else queue[0]
            return OffloadListedResult(
                "its managed ledger lists it offloaded under its uuid" * listed,
                fakes.offload_namespace_refusal,
                fakes.offload_unknown_namespace,
            )

        def refuse_while_paused() -> None:
            deletes = fakes.calls["delete_bk_ledger"] + fakes.calls["delete_offload_segment"]
            if deletes <= fakes.paused_deletes:
                raise ApplicationError(
                    "paused by sre@host: canary check",
                    {"attempt": activity.info().attempt},
                    type="DeletionPaused",
                    non_retryable=True,
                )

        @activity.defn(name="delete_bk_ledger")
        def delete_bk_ledger(inp: DeleteBkLedgerInput) -> DeleteBkLedgerResult:
            fakes.call("delete_bk_ledger")
            refuse_while_paused()
            fakes.delete_versions.append(inp.expected_version)
            if fakes.delete_error:
                raise ApplicationError(
                    fakes.delete_error, {"attempt": activity.info().attempt}, type="MetadataStoreUnavailable"
                )
            status = (
                fakes.delete_statuses.pop(0) if len(fakes.delete_statuses) > 1 else fakes.delete_statuses[0]
            )
            return DeleteBkLedgerResult(status)

        @activity.defn(name="delete_offload_segment")
        def delete_offload_segment(inp: DeleteOffloadInput) -> DeleteOffloadResult:
            fakes.call("delete_offload_segment")
            fakes.offload_deletes.append(inp)
            refuse_while_paused()
            return DeleteOffloadResult(fakes.offload_outcome, deleted_keys=["s3://b/k"], bytes=10)

        @activity.defn(name="inspect_offload_segment")
        def inspect_offload_segment(inp: DeleteOffloadInput) -> InspectOffloadResult:
            fakes.call("inspect_offload_segment")
            return InspectOffloadResult(
                Outcome.WOULD_DELETE, keys=["s3://b/k", "s3://b/k-index"], bytes=10, reason="would delete 2"
            )

        @activity.defn(name="ack_messages")
        def ack_messages(inp: AckMessagesInput) -> AckMessagesResult:
            fakes.call("ack_messages")
            fakes.acked.extend(inp.message_ids)
            return AckMessagesResult(acked=len(inp.message_ids))

        @activity.defn(name="publish_dead_letter")
        def publish_dead_letter(inp: DeadLetterInput) -> DeadLetterResult:
            fakes.call("publish_dead_letter")
            fakes.dead_letters.append(inp)
            return DeadLetterResult(message_id="dlq-1")

        return [
            check_topic,
            ask_owner_broker,
            verify_bk_metadata,
            check_offload_superseded,
            check_offload_listed,
            delete_bk_ledger,
            delete_offload_segment,
            inspect_offload_segment,
            ack_messages,
            publish_dead_letter,
        ]


@dataclass
class Harness:
    client: Client
    queue: str
    fakes: Fakes

    @property
    def policy(self) -> DeletionPolicy:
        return DeletionPolicy(
            pulsar_queue=self.queue,
            bookkeeper_queue=self.queue,
            offload_queue=self.queue,
            default_retry=RetrySpec(max_attempts=3, initial_seconds=0.05, max_interval_seconds=0.1),
            activity_timeout_seconds=5,
            in_use_rechecks=2,
            in_use_recheck_seconds=0.2,
            ack_schedule_to_start_seconds=2,
        )

    async def run(
        self,
        request: PendingDeleteLedgerInfo,
        refs: list[MessageRef] | None = None,
        policy: DeletionPolicy | None = None,
        *,
        join_in_first_task: bool = False,
        mode: Mode = Mode.LIVE,
    ) -> DeletionResult:
        handle = await self.start(request, refs, policy, join_in_first_task=join_in_first_task, mode=mode)
        return await asyncio.wait_for(handle.result(), timeout=30)

    async def start(
        self,
        request: PendingDeleteLedgerInfo,
        refs: list[MessageRef] | None = None,
        policy: DeletionPolicy | None = None,
        *,
        join_in_first_task: bool = False,
        mode: Mode = Mode.LIVE,
    ) -> WorkflowHandle[Any, DeletionResult]:
        """Start a run with ``refs[0]`` and join the others. With ``join_in_first_task`` the second message
        is signalled with the start, so the run's first workflow task sees it (a message arriving while that
        task runs is seen in the next one, once the first round of checks is over)."""
        refs = refs if refs is not None else [MessageRef(f"m-{uuid.uuid4().hex[:6]}", self.queue)]
        joining = [ref if ref.request is not None else replace(ref, request=request) for ref in refs[1:]]
        with_start = joining[:1] if join_in_first_task else []
        # As the ingest does: the first message rides in the input, later ones join by signal with their
        # request (the run's own unless a test gives another).
        handle = await self.client.start_workflow(
            LedgerDeletionWorkflow.run,
            DeletionInput(request, policy or self.policy, first_message=refs[0], mode=mode),
            id=f"{request.workflow_id}/{uuid.uuid4().hex[:8]}",
            task_queue=self.queue,
            search_attributes=search_attributes_for(request, mode),
            start_signal=ADD_MESSAGE_SIGNAL if with_start else None,
            start_signal_args=with_start,
        )
        for ref in joining[len(with_start) :]:
            await self.join(handle, ref)
        return handle

    async def join(self, handle: WorkflowHandle[Any, DeletionResult], ref: MessageRef) -> None:
        await handle.signal(ADD_MESSAGE_SIGNAL, ref)


def data_request(ledger_id: int = 42, **changes: object) -> PendingDeleteLedgerInfo:
    request = PendingDeleteLedgerInfo(
        topic_name="public/default/orders-partition-0",
        ledger_component=LedgerComponent.MANAGED_LEDGER,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id,
    )
    return replace(request, **changes)  # type: ignore[arg-type]


def offload_request(ledger_id: int = 43) -> PendingDeleteLedgerInfo:
    context = LedgerInfo(
        ledger_id=ledger_id,
        offload_context=OffloadContext(
            uid_msb=1, uid_lsb=2, complete=True, driver_metadata=OffloadDriverMetadata("aws-s3")
        ),
    )
    return data_request(ledger_id, ledger_type=LedgerType.OFFLOAD_LEDGER, context=context)


def schema_request(ledger_id: int = 44) -> PendingDeleteLedgerInfo:
    return data_request(
        ledger_id,
        ledger_component=LedgerComponent.SCHEMA_STORAGE,
        topic_name="t/ns/gone",
        schema_id="t/ns/gone",
    )
