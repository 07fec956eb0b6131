"""The pulsar pool's ingest loop: every message on the deletion topic joins (or starts) its ledger's workflow.

Messages are not acked here: the workflow acks them through this process's ack queue when it is done, so
Pulsar's unacked-message limits are the backpressure and a crash only causes redelivery. Payloads that cannot
be a valid request go straight to the dead-letter topic with the reason, then are acked: the loop never
crashes on input. So do valid requests Temporal can never take (too large once encoded, or refused with
INVALID_ARGUMENT), and messages whose handling failed with an error nobody foresaw: every message held here
ends bound to its workflow or in the dead-letter topic, never held with nothing left to settle it.

An end-to-end encrypted message (the service holds no private key) is dead-lettered unread, failed step
``decrypt``, with its encryption context in the dead letter's properties: never decoded, since ciphertext can
pass for a valid request now and then.

Only the system topic is the broker's alone. A message from any other deletion topic (a namespace's own,
tenant isolation) may name only that namespace and always gets the in-use check
(``tenancy.confine_to_topic``); one naming another namespace is dead-lettered (failed step ``tenant``) and no
workflow starts for it.

A process in shadow mode starts every request's run in shadow (``ledger-deletion-shadow/…``, deleting
nothing); a live process starts in shadow, and has dead-lettered for replay, each request outside its live
allow-list (``ledger_deletion.rollout``).

A consumer that the broker stops feeding would strand the backlog while looking idle, so after
``resubscribe_idle_seconds`` without a message, and holding none (only the consumer that delivered a message
can ack it), the loop closes its consumer and subscribes a fresh one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pulsar
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import (
    RawValue,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ledger_deletion import explain, rollout
from ledger_deletion import search_attributes as sa
from ledger_deletion.adapters.messaging import Handoff, PendingAcks, Publisher, dead_letter_properties
from ledger_deletion.audit.record import AuditRecord, from_note, ingest_record
from ledger_deletion.audit.writer import AuditWriter, written_at
from ledger_deletion.contracts import AckMessagesInput, DeletionInput, DeletionPolicy, MessageRef, Mode, Step
from ledger_deletion.errors import (
    InvalidRequestError,
    LedgerDeletionError,
    MessagingUnavailable,
    ObjectStoreUnavailable,
    WorkflowStartRejected,
)
from ledger_deletion.formats.avro import decode_request, encode_request
from ledger_deletion.observability import ingest as observability
from ledger_deletion.observability import metrics, tracing
from ledger_deletion.observability.ingest import observe_receive
from ledger_deletion.request import PendingDeleteLedgerInfo, same_decision
from ledger_deletion.tenancy import confine_to_topic, is_system_topic
from workflows.ledger_deletion import ADD_MESSAGE_SIGNAL, WORKFLOW_NAME

log = logging.getLogger(__name__)

RECEIVE_TIMEOUT_MILLIS = 200
START_RETRY_MAX_SECONDS = 30.0
# Temporal refuses a payload above its blob size limit (2 MiB by default, also on Temporal Cloud) with
# INVALID_ARGUMENT, but a request above gRPC's 4 MiB with RESOURCE_EXHAUSTED, which reads as transient: the
# start would be retried for ever. So the input is measured before it is sent. A valid Avro payload of up to
# 1 MiB (formats/avro.py) grows several-fold in JSON: a control character becomes six bytes (\u0001), a
# non-ASCII one up to twelve. Half the server's limit, because the request travels again in activity inputs
# (verify_bk_metadata, publish_dead_letter) that must fit the same limit; a real request's input is ~1 KB.
MAX_WORKFLOW_INPUT_BYTES = 1024 * 1024
# Statuses with which Temporal refuses the request itself, so that retrying it cannot help: INVALID_ARGUMENT
# is what it answers for a request's content (blob size, search attribute values, ids). The other statuses
# are about the server or this service's setup, not the message, and are retried with backoff while the
# message stays held (nothing is lost, and it resumes by itself once fixed): UNAVAILABLE, DEADLINE_EXCEEDED,
# RESOURCE_EXHAUSTED (rate limits), FAILED_PRECONDITION (namespace not active during a failover, client
# version), NOT_FOUND on a start (namespace), PERMISSION_DENIED/UNAUTHENTICATED (credentials), UNIMPLEMENTED.
REJECTING_STATUSES = frozenset({RPCStatusCode.INVALID_ARGUMENT})
# Dead-letter properties recording how an undecryptable payload was encrypted (``_encryption_properties``).
ENCRYPTION_PROPERTY = "ledger-deletion.encryption."


def _refuses_the_request(exc: RPCError) -> bool:
    """Does Temporal refuse this request for good (dead-letter it), rather than our setup (hold and retry)?

    One INVALID_ARGUMENT is about the setup: search attributes the namespace does not have (``ledger-deletion
    setup`` not run). Every message would be dead-lettered until someone noticed; held, they resume by
    themselves once the attributes are registered.
    """
    return exc.status in REJECTING_STATUSES and "search attribute" not in exc.message.lower()


@dataclass
class IngestStats:
    received: int = 0
    started_or_joined: int = 0
    dead_lettered: int = 0
    resubscribed: int = 0
    started_eagerly: int = 0  # first workflow task handed back in the start reply (this process's worker)


@dataclass
class Ingestor:
    temporal: Client
    consumer: Any  # pulsar.Consumer (multi-topic over the partitions)
    pending: PendingAcks
    dead_letters: Publisher
    policy: DeletionPolicy
    workflow_queue: str
    ack_queue: str
    # The broker's deletion topic (settings.topic): requests on it or its partitions are taken as sent; any
    # other topic is a namespace's own and is confined to it (tenancy.confine_to_topic).
    system_topic: str
    max_inflight: int = 1000
    concurrency: int = 32
    # A fresh consumer on the same subscription, and how long without a message before asking for one.
    resubscribe: Callable[[], Any] | None = None
    resubscribe_idle_seconds: float = 0.0
    # This process also runs the workflow worker on ``workflow_queue`` with the same client: ask the server
    # to hand the first workflow task back in the start reply (eager workflow start).
    eager_start: bool = False
    # The process's mode, and in live mode the tenants and namespaces it deletes in (the rest: shadow).
    mode: Mode = Mode.LIVE
    live_scope: rollout.LiveScope = field(default_factory=rollout.LiveScope)
    stats: IngestStats = field(default_factory=IngestStats)
    # The audit log: what the ingest acks itself (its own dead letters, the sweeper's acks) is recorded
    # first, as the ack activity records what the workflows ack. ``worker``: this process, in each record.
    audit: AuditWriter | None = None
    worker: str = ""
    # Dead letters whose record is not durable yet: the sweeper writes it before it retries their ack.
    _unrecorded: dict[str, AuditRecord] = field(default_factory=dict)
    _recoveries: set[asyncio.Task[None]] = field(default_factory=set)  # _record_lost_ack under way

    async def run(self, stop: asyncio.Event) -> None:
        """Receive until ``stop`` is set; hand-offs in flight finish before returning."""
        slots = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        last_message = time.monotonic()
        while not stop.is_set():
            if len(self.pending) >= self.max_inflight:
                await asyncio.sleep(0.05)  # backpressure: wait for workflows to ack
                last_message = time.monotonic()  # not receiving on purpose: that is no stall
                continue
            consumer = self.consumer
            message = await asyncio.to_thread(self._receive, consumer)
            if message is None:
                if self._stalled(last_message):
                    await self._resubscribe()
                    last_message = time.monotonic()
                continue
            last_message = time.monotonic()
            self.stats.received += 1
            # Held before anything else, with the consumer that delivered it: only that one can ack it.
            key = str(message.message_id())
            self.pending.hold(key, consumer, message.message_id())
            await slots.acquire()
            task = asyncio.create_task(self._handle(message, key))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: slots.release())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close_consumer(self) -> None:
        """At shutdown, after the last ack: Pulsar hands anything still unacked to the next consumer."""
        self._close(self.consumer)

    @staticmethod
    def _close(consumer: Any) -> None:
        try:
            consumer.close()
        except Exception:  # closing against a dead broker: Pulsar redelivers unacked messages anyway
            log.debug("consumer close failed", exc_info=True)

    def _receive(self, consumer: Any) -> Any:
        try:
            return consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MILLIS)
        except pulsar.Timeout:
            return None
        except Exception as exc:  # a closed/reconnecting consumer: keep the loop alive
            log.warning("receive failed: %s", exc)
            return None

    def _stalled(self, last_message: float) -> bool:
        return (
            self.resubscribe is not None
            and self.resubscribe_idle_seconds > 0
            and time.monotonic() - last_message >= self.resubscribe_idle_seconds
            # A held message can only be acked through the consumer that delivered it; and while one is
            # held, the old consumer would keep taking new messages (Shared) that nobody reads.
            and len(self.pending) == 0
        )

    async def _resubscribe(self) -> None:
        """Replace the consumer with a fresh one on the same subscription.

        On a quiet topic this only costs a subscribe. On a stuck one (a dispatcher that stopped feeding this
        consumer, as pulsar-lite does part-way through large backlogs) the new consumer gets the backlog.
        Closing hands anything prefetched but not yet received back to the subscription: nothing is lost.
        """
        assert self.resubscribe is not None
        try:
            fresh = await asyncio.to_thread(self.resubscribe)
        except Exception as exc:  # broker unreachable: keep the current consumer and try again later
            log.warning("resubscribe failed (%s: %s); keeping the current consumer", type(exc).__name__, exc)
            return
        stale, self.consumer = self.consumer, fresh
        await asyncio.to_thread(self._close, stale)
        self.stats.resubscribed += 1
        log.info("no message for %.0f s: subscribed a fresh consumer", self.resubscribe_idle_seconds)

    async def _handle(self, message: Any, key: str) -> None:
        """Hand one held message over; it ends bound to its workflow or in the dead-letter topic.

        Only the sweeper settles held messages, and only those bound to a workflow or dead-lettered: a task
        that ended with its message in neither state would leave it held for ever (and block resubscribing).
        """
        try:
            if _undecryptable(message):
                await self._dead_letter_undecryptable(message, key)
            else:
                await self._hand_off(message, key)
        except Exception as exc:  # a bug or a failure nobody foresaw: retrying the same input would repeat it
            reason = f"unexpected error in the ingest: {type(exc).__name__}: {exc}"
            log.exception("message %s: %s; dead-lettering it", key, reason)
            try:
                await self._dead_letter(
                    key,
                    message.data(),
                    _origin(message, key),
                    reason=reason,
                    step="ingest",
                    message_topic=message.topic_name(),
                )
                observability.dead_lettered("ingest")
            except Exception:  # the last resort: Pulsar redelivers it, to this or another consumer
                log.exception("message %s: dead-lettering failed too; released for Pulsar to redeliver", key)
                await asyncio.to_thread(self.pending.release, key)

    async def _dead_letter_undecryptable(self, message: Any, key: str) -> None:
        """An end-to-end encrypted message this service has no key for: dead-lettered as it came, unread.

        Never decoded: ciphertext can decode as a valid Avro request now and then, which would start a
        deletion nobody asked for. The dead letter keeps the ciphertext and the encryption context
        (``_origin``), so whoever holds the private key can decrypt it and send the request again.
        """
        # A list (not a dict's keys): the data key, sealed once for each named public key.
        data_keys = message.encryption_context().keys()
        names = ", ".join(k.key for k in data_keys)
        with observe_receive(message, key) as observed:
            # Counted as received too, as an undecodable message is: PIP-186's "received" is every message.
            metrics.current().request_received(metrics.Labels(observability.POOL))
            observability.dead_lettered("decrypt")
            observed.span.set_attribute(tracing.ATTR_OUTCOME, "DEAD_LETTERED")
            await self._dead_letter(
                key,
                message.data(),
                _origin(message, key),
                reason=f"the payload is encrypted end to end (keys: {names}) and this service has no key",
                step="decrypt",
                message_topic=message.topic_name(),
            )

    async def _hand_off(self, message: Any, key: str) -> None:
        # One span per message (continuing a traceparent in its properties); Temporal's spans nest under it.
        with observe_receive(message, key) as observed:
            try:
                request = decode_request(message.data())
            except InvalidRequestError as exc:
                observed.undecodable()
                await self._dead_letter(
                    key,
                    message.data(),
                    _origin(message, key),
                    reason=str(exc),
                    step="decode",
                    message_topic=message.topic_name(),
                )
                return
            observed.decoded(request)
            try:
                request = confine_to_topic(request, message.topic_name(), self.system_topic)
            except InvalidRequestError as exc:
                # A namespace's topic naming another namespace: never started, whatever else it asks.
                observability.dead_lettered("tenant", request)
                await self._dead_letter(
                    key,
                    message.data(),
                    _origin(message, key),
                    reason=str(exc),
                    step="tenant",
                    request=request,
                    message_topic=message.topic_name(),
                )
                return
            ref = MessageRef(
                message_id=key,
                ack_queue=self.ack_queue,
                topic=message.topic_name(),
                redelivery_count=message.redelivery_count(),
                from_system_topic=is_system_topic(message.topic_name(), self.system_topic),
                replay_reason=self._run_of(request)[1],
            )
            try:
                await self._start_or_join(request, ref)
            except WorkflowStartRejected as exc:
                observed.rejected(request)
                await self._dead_letter(
                    key,
                    message.data(),
                    _origin(message, key),
                    reason=str(exc),
                    step="start",
                    workflow_id=self._workflow_id(request),
                    request=request,
                    message_topic=message.topic_name(),
                )
                return
        workflow_id = self._workflow_id(request)
        self.pending.bind(key, Handoff(workflow_id, request, time.monotonic(), ref.from_system_topic))
        self.stats.started_or_joined += 1

    async def sweep(self, *, held_for: float) -> int:
        """Settle held messages whose workflow ended without acking them; returns how many were settled.

        A workflow acks through this process's ack queue, but gives an ack up when it cannot start within
        ``ack_schedule_to_start_seconds`` (meant for a holder that died; it also happens when Temporal was
        down that long). A live holder is not redelivered by Pulsar, so without this the message would stay
        unacked for ever. Only the latest run's state matters: a message joined some run up to the latest,
        so a closed latest run means its run is closed too. Completed with the message's own request as its
        input: that request was decided, ack it. Completed with another request (the message joined an
        earlier run that ended undecided, or was decided beside the input and its ack failed), terminated,
        failed, timed out, cancelled, or gone (deleted, past retention): hand it to a new run, which decides
        it (again: every step is idempotent).
        """
        settled = 0
        # In the dead-letter topic already, but their ack failed: no workflow will ack them.
        for key in self.pending.dead_lettered():
            try:
                await self._record(key)
                acked, _ = await asyncio.to_thread(self.pending.ack, [key])
            except MessagingUnavailable as exc:
                log.warning("sweep: ack of dead-lettered %s failed again: %s", key, exc)
                continue
            settled += acked
        for key, handoff in self.pending.bound_before(time.monotonic() - held_for):
            try:
                description = await self.temporal.get_workflow_handle(handoff.workflow_id).describe()
                status = description.status
            except RPCError as exc:
                # NOT_FOUND of the namespace, not of the execution, is our setup: a start would fail as well.
                if exc.status != RPCStatusCode.NOT_FOUND or "namespace" in exc.message.lower():
                    log.debug("sweep: cannot describe %s: %s", handoff.workflow_id, exc)
                    continue
                # No execution at all any more (deleted by an operator, past retention, a restored store):
                # nothing can have decided the request, so it is handed to a new run like a terminated one.
                status, description = None, None
            if status == WorkflowExecutionStatus.RUNNING:
                continue
            if description is not None and status == WorkflowExecutionStatus.COMPLETED:
                try:
                    decided = await self._decided_by(handoff, description.run_id)
                except RPCError as exc:
                    log.debug("sweep: cannot read the input of %s: %s", handoff.workflow_id, exc)
                    continue
                except Exception:  # an input that does not decode: no reason to stop sweeping the others
                    log.exception("sweep: cannot read the input of %s; next sweep", handoff.workflow_id)
                    continue
                if decided:
                    try:
                        # The run could not ack it, so its record is not written: the ack it scheduled,
                        # in its history, carries the note.
                        await self._record_from_history(key, handoff.workflow_id, description.run_id)
                        acked, _ = await asyncio.to_thread(self.pending.ack, [key])
                    except (MessagingUnavailable, ObjectStoreUnavailable) as exc:  # try the others
                        log.warning("sweep: ack of %s failed: %s; next sweep", key, exc)
                        continue
                    settled += acked
                    continue
            log.warning(
                "workflow %s ended %s without deciding the request of %s; starting it again",
                handoff.workflow_id,
                status.name if status else "(no execution found)",
                key,
            )
            try:
                await self._start_or_join(
                    handoff.request,
                    MessageRef(
                        key,
                        self.ack_queue,
                        from_system_topic=handoff.from_system_topic,
                        replay_reason=self._run_of(handoff.request)[1],
                    ),
                )
            except WorkflowStartRejected as exc:
                # Taken once, refused now (a search attribute removed, a lower size limit). The original
                # payload is gone by now: the dead letter carries the request, encoded again. As confined
                # by the ingest (own namespace, in-use check on): replayed to the system topic (no origin
                # topic here), it asks for nothing its own topic would not have allowed.
                await self._dead_letter(
                    key,
                    encode_request(handoff.request),
                    {"ledger-deletion.origin-message-id": key},
                    reason=str(exc),
                    step="start",
                    workflow_id=handoff.workflow_id,
                    request=handoff.request,
                )
                observability.dead_lettered("start", handoff.request)
                settled += 1
                continue
            self.pending.bind(key, replace(handoff, since=time.monotonic()))
            settled += 1
        return settled

    async def _decided_by(self, handoff: Handoff, run_id: str | None) -> bool:
        """Did this completed run have the held message's request as its own input (so decided it)?"""
        handle = self.temporal.get_workflow_handle(handoff.workflow_id, run_id=run_id)
        async for event in handle.fetch_history_events():
            payloads = list(event.workflow_execution_started_event_attributes.input.payloads)
            if not payloads:
                return False
            [started] = await self.temporal.data_converter.decode(payloads, [DeletionInput])
            return isinstance(started, DeletionInput) and same_decision(handoff.request, started.request)
        return False

    async def _record(self, key: str) -> None:
        """Make a held message's pending record durable (raises ``ObjectStoreUnavailable`` if it is not)."""
        record = self._unrecorded.get(key)
        if record is not None and self.audit is not None:
            await asyncio.to_thread(self.audit.write, [record])
        self._unrecorded.pop(key, None)

    async def _record_from_history(self, key: str, workflow_id: str, run_id: str | None) -> None:
        """The audit record of a message a completed run decided but could not ack: its note is in the input
        of the ack the run scheduled (the latest, if it scheduled several)."""
        if self.audit is None:
            return
        handle = self.temporal.get_workflow_handle(workflow_id, run_id=run_id)
        notes = []
        async for event in handle.fetch_history_events():
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name != Step.ACK_MESSAGES.value:
                continue
            [ack] = await self.temporal.data_converter.decode(
                list(scheduled.input.payloads), [AckMessagesInput]
            )
            notes += [note for note in ack.audit if note.message_id == key]
        if not notes:
            log.info("audit: no note for %s in %s (run %s)", key, workflow_id, run_id)
            return
        record = from_note(
            notes[-1],
            workflow_id=workflow_id,
            run_id=run_id or "",
            worker=self.worker,
            written_at=written_at(),
        )
        await asyncio.to_thread(self.audit.write, [record])

    async def sweep_forever(self, stop: asyncio.Event, interval: float) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
            if stop.is_set():
                return
            try:
                if settled := await self.sweep(held_for=interval):
                    log.info("settled %d held message(s) whose workflow could not ack them", settled)
            except LedgerDeletionError as exc:  # an ack that failed now is retried on the next sweep
                log.warning("sweep failed: %s", exc)
            except Exception:  # a bug must not end the sweeps: every held message waits on them
                log.exception("sweep failed; next sweep in %.0f s", interval)

    async def _start_or_join(self, request: PendingDeleteLedgerInfo, ref: MessageRef) -> None:
        """Start the ledger's workflow with this message, or signal the message to the run already going.

        Not signal-with-start: a plain start carries the message in its input, which saves the server a
        signal event per deletion and can be eager (the first workflow task comes back in the start reply
        when this process runs the workflow worker). Duplicates take the second round trip instead.
        """
        backoff = _Backoff()
        while True:
            try:
                if await self._hand_over(request, ref):
                    return
                # The run closed between our start and our signal: start a new one straight away.
                log.debug("%s closed before it could be joined; starting again", request.workflow_id)
            except RPCError as exc:
                if _refuses_the_request(exc):
                    raise WorkflowStartRejected(
                        f"Temporal refused {request.workflow_id}: {exc.status.name}: {exc.message}"
                    ) from exc
                # Temporal unavailable: the message stays unacked and held; keep trying (never drop it).
                log.warning(
                    "start of %s failed (%s); retrying in %.1fs", request.workflow_id, exc, backoff.delay
                )
                await backoff.wait()

    async def _hand_over(self, request: PendingDeleteLedgerInfo, ref: MessageRef) -> bool:
        """One attempt: start the run with the message, or signal the run going; False if that run closed."""
        try:
            handle = await self._start(request, ref)
        except WorkflowAlreadyStartedError:
            # The joining message brings its request: the run decides it on its own if it is not the run's.
            return await self._join(self._workflow_id(request), replace(ref, request=request))
        # Set by the SDK on the handle when the first workflow task came back in the reply.
        self.stats.started_eagerly += bool(getattr(handle, "__temporal_eagerly_started", False))
        if ref.redelivery_count and self.audit is not None:
            recovery = asyncio.create_task(
                self._record_lost_ack(handle.id, handle.result_run_id, ref.message_id)
            )
            self._recoveries.add(recovery)
            recovery.add_done_callback(self._recoveries.discard)
        return True

    async def _record_lost_ack(self, workflow_id: str, new_run: str | None, key: str) -> None:
        """A redelivered message started a new run: the run before it may have decided the request and lost
        its ack with the process that held the message (which then wrote no record). Its decision, a
        deletion as often as not, is in the ack it scheduled; recorded here, the new run's own decision
        (usually ALREADY_DELETED) is not the only trace. A record the old process did write is written
        again under the same id, which readers keep once."""
        try:
            runs = [
                execution
                async for execution in self.temporal.list_workflows(f'WorkflowId = "{workflow_id}"', limit=20)
                if execution.run_id != new_run and execution.status != WorkflowExecutionStatus.RUNNING
            ]
            if runs:
                latest = max(runs, key=lambda execution: execution.start_time)
                await self._record_from_history(key, workflow_id, latest.run_id)
        except Exception:  # the new run records its own decision whatever happens here
            log.exception("audit: the previous run of %s not read for %s", workflow_id, key)

    async def _join(self, workflow_id: str, ref: MessageRef) -> bool:
        """Signal the message to the running run; False if no run is running any more."""
        try:
            await self.temporal.get_workflow_handle(workflow_id).signal(ADD_MESSAGE_SIGNAL, ref)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    def _run_of(self, request: PendingDeleteLedgerInfo) -> tuple[Mode, str]:
        """The mode of the request's run here, and why its message is dead-lettered for replay ("": not)."""
        return rollout.run_mode(self.mode, self.live_scope, request)

    def _workflow_id(self, request: PendingDeleteLedgerInfo) -> str:
        return rollout.workflow_id(request, self._run_of(request)[0])

    async def _start(self, request: PendingDeleteLedgerInfo, ref: MessageRef) -> WorkflowHandle[Any, Any]:
        mode = self._run_of(request)[0]
        return await self.temporal.start_workflow(
            WORKFLOW_NAME,
            self._input(request, ref, mode),
            id=rollout.workflow_id(request, mode),
            task_queue=self.workflow_queue,
            # A closed run of the same ledger does not block a new one: the new run finds the ledger already
            # deleted (every step is idempotent) and acks.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            search_attributes=search_attributes_for(request, mode),
            # What the Temporal UI shows above the history: no event of its own, kept with the start.
            static_summary=explain.summary(request, mode),
            static_details=explain.details(request, mode, ref),
            execution_timeout=None,
            request_eager_start=self.eager_start,
        )

    def _input(self, request: PendingDeleteLedgerInfo, ref: MessageRef, mode: Mode) -> RawValue:
        """The start's input, encoded here once so that its size is checked on the bytes that are sent.

        A payload codec, if the client has one, still runs on it (compression only makes it smaller).
        """
        value = DeletionInput(request, self.policy, first_message=ref, mode=mode)
        [payload] = self.temporal.data_converter.payload_converter.to_payloads([value])
        if (size := payload.ByteSize()) > MAX_WORKFLOW_INPUT_BYTES:
            raise WorkflowStartRejected(
                f"workflow input of {size} bytes exceeds {MAX_WORKFLOW_INPUT_BYTES}: too large for Temporal"
            )
        return RawValue(payload)

    async def _dead_letter(
        self,
        key: str,
        payload: bytes,
        origin: dict[str, str],
        *,
        reason: str,
        step: str,
        workflow_id: str = "",
        request: PendingDeleteLedgerInfo | None = None,
        message_topic: str = "",
    ) -> None:
        """Publish the message to the dead-letter topic, then ack it; ``step`` says where it failed.

        A shadow process only acks it (on its own subscription): the live deployment reads the same message
        on the live subscription and dead-letters it then, so publishing here too would put it in the
        dead-letter topic twice, and a replay would send it twice.
        """
        if self.mode is Mode.SHADOW:
            log.info("shadow: message %s (%s) not dead-lettered, left to live mode: %s", key, step, reason)
        else:
            properties = dead_letter_properties(
                reason=reason, failed_step=step, attempts=1, workflow_id=workflow_id, original=origin
            )
            backoff = _Backoff()
            while True:
                try:
                    await asyncio.to_thread(self.dead_letters.send, payload, properties)
                    break
                except LedgerDeletionError as exc:
                    log.warning("dead-lettering %s failed (%s); retrying", key, exc)
                    await backoff.wait()
            log.info("dead-lettered message %s (%s): %s", key, step, reason)
        self.stats.dead_lettered += 1
        if self.audit is not None:
            self._unrecorded[key] = ingest_record(
                key,
                request=request,
                message_topic=message_topic,
                reason=reason,
                step=step,
                shadow=self.mode is Mode.SHADOW,
                workflow_id=workflow_id,
                worker=self.worker,
                now=written_at(),
            )
        # Marked first: if the ack fails, the sweeper retries it (no workflow will ever ack this message).
        self.pending.mark_dead_lettered(key)
        try:
            await self._record(key)
            await asyncio.to_thread(self.pending.ack, [key])
        except (MessagingUnavailable, ObjectStoreUnavailable) as exc:
            log.warning("ack of dead-lettered %s failed (%s); the sweeper retries it", key, exc)


@dataclass
class _Backoff:
    """The wait between two tries of something the ingest never gives up on (a start, a dead letter): the
    message stays held meanwhile, so it doubles up to ``START_RETRY_MAX_SECONDS`` rather than fail."""

    delay: float = 0.5  # the next wait, in seconds

    async def wait(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, START_RETRY_MAX_SECONDS)


def _origin(message: Any, key: str) -> dict[str, str]:
    """A dead letter keeps the message's properties and says where it came from and how it was written."""
    # Only the ingest writes encryption properties: a sender's own would pass for the ingest's record.
    kept = {k: v for k, v in dict(message.properties()).items() if not k.startswith(ENCRYPTION_PROPERTY)}
    return {
        **kept,
        "ledger-deletion.origin-topic": message.topic_name(),
        "ledger-deletion.origin-message-id": key,
        "ledger-deletion.origin-schema-version": _writer_schema_version(message),
        **_encryption_properties(message.encryption_context()),
    }


def _writer_schema_version(message: Any) -> str:
    """The version of the schema the producer registered, empty if it had none.

    As a number, the one Pulsar's schema registry knows it by (``pulsar-admin schemas get --version``), read
    as the client's own AvroSchema reads it to find a writer schema. The public ``Message.schema_version()``
    returns the version's 8 raw bytes decoded as UTF-8 text, which raises for any version with a byte of 128
    or more, and would take the dead letter down with it.
    """
    try:
        version = int(message._message.int_schema_version())
    except Exception:  # a client without that accessor: the dead letter matters more than its version
        return ""
    return str(version) if version >= 0 else ""


def _undecryptable(message: Any) -> bool:
    """End-to-end encrypted, and the client could not decrypt it (this service has no key reader)."""
    context = message.encryption_context()
    return context is not None and bool(context.is_decryption_failed())


def _encryption_properties(context: Any) -> dict[str, str]:
    """What Pulsar's message metadata says about an encrypted payload, as dead-letter properties (bytes in
    base64): with the private key this decrypts the dead letter's payload. Empty for a plain message."""
    if context is None:
        return {}
    data_keys = context.keys()  # a list of EncryptionKey, not a dict's keys
    keys = [
        {"name": k.key, "value": base64.b64encode(k.value).decode(), "metadata": dict(k.metadata)}
        for k in data_keys
    ]
    return {
        f"{ENCRYPTION_PROPERTY}algorithm": context.algorithm(),
        f"{ENCRYPTION_PROPERTY}param": base64.b64encode(context.param()).decode(),
        f"{ENCRYPTION_PROPERTY}compression-type": context.compression_type().name,
        f"{ENCRYPTION_PROPERTY}uncompressed-size": str(context.uncompressed_message_size()),
        f"{ENCRYPTION_PROPERTY}batch-size": str(context.batch_size()),
        f"{ENCRYPTION_PROPERTY}keys": json.dumps(keys, sort_keys=True),
    }


def search_attributes_for(request: PendingDeleteLedgerInfo, mode: Mode = Mode.LIVE) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(sa.DELETION_MODE, mode.value),
            SearchAttributePair(sa.LEDGER_ID, request.ledger_id),
            SearchAttributePair(sa.LEDGER_TYPE, request.ledger_type.value),
            SearchAttributePair(sa.LEDGER_COMPONENT, request.ledger_component.value),
            SearchAttributePair(sa.PULSAR_TOPIC, request.topic_name),
            SearchAttributePair(sa.PULSAR_TENANT, request.tenant),
            SearchAttributePair(sa.PULSAR_NAMESPACE, request.namespace),
            SearchAttributePair(sa.DELETION_STEP, "started"),
        ]
    )
