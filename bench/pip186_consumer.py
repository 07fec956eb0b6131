"""Baseline B: a PIP-186 consumer without Temporal that decides as the service does.

It makes the service's checks through the same adapters (``ledger_deletion.adapters``) and the same activity
bodies (called directly, undecorated, so ``activities.bookkeeper`` decides), with the rules of
``workflows/ledger_deletion.py``:

1. receive from the deletion topic and its RETRY topic (Shared subscription);
2. LEDGER: check the topic exists (admin REST) and verify the ledger's znode: its metadata judged (not found
   / mismatch / not pulsar → ack); a ledger younger than ``min_ledger_age_seconds`` is reconsumed once it is
   that old; a schema ledger its locator lists is in use; when the topic exists and
   ``checkLedgerStillInUse``, the owner broker is asked (its listing of an offloaded copy keeps the BK copy),
   and what the store said is read again after its answer; Pulsar's metadata-store listing (the managed
   ledger's ledger list, a cursor's ``cursorsLedgerId``), a data ledger still open, or a ledger newer than
   everything its owner lists keep it. Then compare-and-delete the znode;
   OFFLOAD_LEDGER: check the topic; when it exists, ask the owner broker as above (one that cannot load the
   topic: dead letter) and whether Pulsar's metadata store still lists the objects; then delete and confirm
   the objects of the offload context;
3. the in-use grace: a kept ledger's message is reconsumed after ``in_use_recheck_seconds`` and every check
   made again, up to ``in_use_rechecks`` times (the service's settings). Still kept after the last: acked as
   SKIPPED_IN_USE when the broker sends the request again once it lets go (its owner or the schema locator
   still references it), dead-lettered to be replayed otherwise (the store, an open or new ledger), as the
   service does. Each time, the request's workflow id is written to ``--in-use-report`` (the benchmark
   releases its late requests from there);
4. success → ack. Transient failure, or the znode changed between verify and delete → ``reconsumeLater``:
   publish the message to the RETRY topic with ``deliver_after`` and ``RECONSUMETIMES`` + 1, ack the
   original; after ``--max-reconsume`` (10) the message goes to the DLQ and is acked. Undecodable or
   permanently invalid → DLQ, ack.

Where it decides otherwise than the service, it keeps what the service would delete, never the reverse:

* the BookKeeper copy of an offloaded ledger the owner lists: the service deletes it once the store says
  the broker released it (``bookkeeperDeleted``); B keeps it, and dead-letters it after the grace;
* the objects of an offload attempt a later attempt replaced while the owner still lists the ledger: the
  service deletes them; B keeps them as in use;
* messages for one ledger are decided one by one, each on its own (the service decides a joining message's
  request in the run already going): a duplicate's second message finds the znode gone (ALREADY_DELETED);
* a re-check (a retry, the grace, a version race) makes every check again, where the service makes again
  only the step that failed or what kept the ledger.

pulsar-lite ignores ``deliver_after`` (a message sent with a 3 s delay arrives at once), so the consumer
also honours the due time it writes into the ``DELAY_UNTIL_MS`` property, holding a retried message
(unacked) until then, as the broker's delayed-delivery tracker would.

Runs as its own process (so the benchmark can measure its CPU and RSS) until ``--expect`` messages reached a
terminal state, then writes a JSON summary (per message: workflow id, outcome, deliveries, publish → ack
latency).

pulsar-lite sometimes stops dispatching to a consumer part-way through a large backlog. The service's ingest
resubscribes when that happens (``workers/ingest.py``); so does this consumer, on the same rule: after
``--resubscribe-idle-seconds`` without a message while it holds none (nothing being handled, nothing waiting
for its due time: an ack must go through the consumer that received the message), it closes its consumer and
subscribes a fresh one. Without it a stalled run would sit until ``--timeout`` (an hour).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar  # noqa: E402

from activities.bookkeeper import BookKeeperReadActivities  # noqa: E402
from activities.offload import OffloadActivities  # noqa: E402
from activities.pulsar_admin import PulsarAdminActivities  # noqa: E402
from bench import faults  # noqa: E402
from ledger_deletion.adapters import messaging  # noqa: E402
from ledger_deletion.adapters.zookeeper import LedgerStore, PulsarMetadataStore  # noqa: E402
from ledger_deletion.contracts import (  # noqa: E402
    AskOwnerBrokerInput,
    AskOwnerBrokerResult,
    CheckTopicInput,
    DeleteOffloadInput,
    OffloadListedInput,
    Outcome,
    Verdict,
    VerifyBkMetadataInput,
    VerifyBkMetadataResult,
)
from ledger_deletion.errors import InvalidRequestError, PermanentError, TransientError  # noqa: E402
from ledger_deletion.formats.avro import decode_request  # noqa: E402
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo  # noqa: E402
from ledger_deletion.settings import Settings  # noqa: E402
from workers.pools import admin_client, object_store  # noqa: E402

RECONSUMETIMES = "RECONSUMETIMES"
IN_USE_CHECKS = "IN_USE_CHECKS"  # in-use answers so far: the grace's count, apart from the retry budget
AGE_WAITED = "AGE_WAITED"  # the one wait for a ledger younger than min_ledger_age_seconds is over
DELAY_UNTIL = "DELAY_UNTIL_MS"
ORIGIN_PUBLISH = "ORIGIN_PUBLISH_MS"  # first publish time, kept across reconsumes for the latency
_VERDICT = {
    Verdict.NOT_FOUND: Outcome.ALREADY_DELETED,
    Verdict.MISMATCH: Outcome.SKIPPED_METADATA_MISMATCH,
    Verdict.NOT_PULSAR: Outcome.SKIPPED_NOT_PULSAR,
}


def _raw(method: Any) -> Any:
    """An activity method without its Temporal error translation (plain ``LedgerDeletionError`` s)."""
    return method.__wrapped__


class Pip186Consumer:
    def __init__(
        self,
        settings: Settings,
        reconsume_seconds: float,
        max_reconsume: int,
        concurrency: int,
        resubscribe_idle_seconds: float = 10.0,
        in_use_report: Path | None = None,
    ) -> None:
        self.settings = settings
        self.in_use_report = in_use_report
        self.retry_topic = f"{settings.topic}-RETRY"
        self.reconsume_seconds = reconsume_seconds
        self.max_reconsume = max_reconsume
        self.client = messaging.connect(settings.pulsar_url, settings.pulsar_token_value)
        # Its own producer: ``Publisher`` has no ``deliver_after``.
        self.retry = self.client.create_producer(self.retry_topic, batching_enabled=False)
        self.dlq = messaging.Publisher(self.client, settings.dead_letter_topic)
        # The service's clients, with connection pools as large as this consumer's thread pool.
        admin = admin_client(settings, concurrency)
        store = LedgerStore(settings.zookeeper, settings.bk_ledgers_root, settings.zookeeper_timeout_seconds)
        self.admin = PulsarAdminActivities(admin)
        pulsar_metadata = PulsarMetadataStore(
            settings.pulsar_metadata_hosts, settings.zookeeper_timeout_seconds
        )
        self.store = store
        self._clients = (admin, store, pulsar_metadata)  # closed by close(): their sockets are its own
        self.bk = BookKeeperReadActivities(store, pulsar_metadata)
        self.offload = OffloadActivities(
            object_store(settings, concurrency), settings.offload_bucket, settings.s3_endpoint_alias_list
        )
        self.resubscribe_idle_seconds = resubscribe_idle_seconds
        self.resubscribed = 0
        self.handling = 0  # messages submitted and not yet acked, reconsumed or dead-lettered
        self.consumer = self._subscribe()
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="pip186")
        self.slots = threading.Semaphore(concurrency * 4)
        self.lock = threading.Lock()
        self.delayed: list[tuple[float, int, Any]] = []
        self.seq = 0
        self.outcomes: Counter[str] = Counter()
        self.messages: list[dict[str, Any]] = []  # per terminal message: id, outcome, deliveries, latency
        self.reconsumed = 0
        self.done = 0
        self.first_receive = 0.0
        self.last_ack = 0.0

    # --- the consumer loop --------------------------------------------------------------------------------

    def _subscribe(self) -> Any:
        return self.client.subscribe(
            [self.settings.topic, self.retry_topic],
            self.settings.subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )

    def run(self, expect: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_message = time.monotonic()
        while self.done < expect and time.monotonic() < deadline:
            self._release_due()
            try:
                message = self.consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                if self._stalled(last_message):
                    self._resubscribe()
                    last_message = time.monotonic()
                continue
            last_message = time.monotonic()
            if not self.first_receive:
                self.first_receive = time.time()
            due = float(message.properties().get(DELAY_UNTIL, 0)) / 1000
            if due > time.time():
                with self.lock:  # the broker would not have delivered it yet: hold it until it is due
                    self.seq += 1
                    heapq.heappush(self.delayed, (due, self.seq, message))
                continue
            self._submit(message)
        self.pool.shutdown(wait=True)

    def _release_due(self) -> None:
        now = time.time()
        while True:
            with self.lock:
                if not self.delayed or self.delayed[0][0] > now:
                    return
                _, _, message = heapq.heappop(self.delayed)
            self._submit(message)

    def _stalled(self, last_message: float) -> bool:
        with self.lock:
            holding = self.handling > 0 or bool(self.delayed)
        idle = time.monotonic() - last_message
        return self.resubscribe_idle_seconds > 0 and idle >= self.resubscribe_idle_seconds and not holding

    def _resubscribe(self) -> None:
        """Closing hands anything prefetched but not received back to the subscription: nothing is lost."""
        with contextlib.suppress(Exception):  # pulsar's own error classes: the broker drops it anyway
            self.consumer.close()
        self.consumer = self._subscribe()
        self.resubscribed += 1
        print(f"pip186 consumer resubscribed after a stall ({self.done} done)", flush=True)

    def _submit(self, message: Any) -> None:
        self.slots.acquire()
        with self.lock:
            self.handling += 1
        future = self.pool.submit(self._handle, message)
        future.add_done_callback(lambda _: self._handled())

    def _handled(self) -> None:
        with self.lock:
            self.handling -= 1
        self.slots.release()

    # --- one message --------------------------------------------------------------------------------------

    def _handle(self, message: Any) -> None:
        try:
            request = decode_request(message.data())
        except InvalidRequestError as exc:
            self._dead_letter(message, str(exc))
            return
        try:
            outcome = self._decide(request, aged=AGE_WAITED in message.properties())
        except _Decided as decided:
            outcome = decided.outcome
        except _TooYoung as young:
            self._send_to_retry(message, {AGE_WAITED: "1"}, young.wait_seconds)
            return
        except _Kept as kept:
            self._recheck_later(message, request, kept)
            return
        except TransientError as exc:
            self._reconsume_later(message, request, str(exc))
            return
        except PermanentError as exc:
            self._dead_letter(message, str(exc), request.workflow_id)
            return
        self._ack(message, outcome.value, request.workflow_id)

    def _decide(self, req: PendingDeleteLedgerInfo, *, aged: bool) -> Outcome:
        """Delete the ledger or its objects if every check allows it; raises ``_Kept`` while something keeps
        it, ``_TooYoung`` for a ledger to decide later."""
        exists = _raw(PulsarAdminActivities.check_topic)(self.admin, CheckTopicInput(req.topic_name)).exists
        owner_check = exists and req.check_ledger_still_in_use
        if req.ledger_type is LedgerType.OFFLOAD_LEDGER:
            return self._delete_offload(req, exists, owner_check)
        verified = self._verify(req)
        age = verified.age_seconds
        if not aged and age is not None and age < self.settings.min_ledger_age_seconds:
            raise _TooYoung(self.settings.min_ledger_age_seconds - age)
        if verified.schema_referenced:
            raise _Kept(verified.reason, resent=True)
        if owner_check:
            answer = self._ask_owner(req)
            # An owner that cannot load the topic cannot say: the metadata store decides, as in the service.
            if answer.in_use and not answer.owner_cannot_load:
                offloaded_copy = (
                    answer.offloaded
                    and answer.referenced_as == "ledgers"
                    and req.ledger_component is LedgerComponent.MANAGED_LEDGER
                )
                where = f"the owner broker references it ({answer.referenced_as})"
                raise _Kept(where + (", offloaded" if offloaded_copy else ""), resent=not offloaded_copy)
            if verified.metadata_store_listing or _unsettled(req, verified):
                verified = self._verify(req)  # read before the owner's answer: read it again
        if verified.metadata_store_listing:
            raise _Kept(verified.metadata_store_listing, resent=False)
        if unsettled := _unsettled(req, verified):
            raise _Kept(unsettled, resent=False)
        # Compare-and-delete, as delete_bk_ledger does (without its Temporal attempt count).
        deleted = self.store.delete(req.ledger_id, verified.znode_version)
        if deleted is None:
            return Outcome.ALREADY_DELETED
        if not deleted:
            raise _VersionChanged(f"ledger {req.ledger_id} changed between verify and delete")
        return Outcome.DELETED

    def _delete_offload(self, req: PendingDeleteLedgerInfo, exists: bool, owner_check: bool) -> Outcome:
        if owner_check:
            answer = self._ask_owner(req)
            if answer.owner_cannot_load:
                raise PermanentError(f"the owner broker cannot load {req.topic_name}: it cannot say")
            if answer.in_use:
                raise _Kept(f"the owner broker references it ({answer.referenced_as})", resent=True)
        if exists:
            listed = _raw(BookKeeperReadActivities.check_offload_listed)(self.bk, OffloadListedInput(req))
            if listed.listing:
                raise _Kept(listed.listing, resent=False)
        assert req.context is not None  # validated when the request was decoded
        result = _raw(OffloadActivities.delete_offload_segment)(
            self.offload, DeleteOffloadInput(req.ledger_id, req.managed_ledger_name, req.context)
        )
        outcome: Outcome = result.outcome
        return outcome

    def _verify(self, req: PendingDeleteLedgerInfo) -> VerifyBkMetadataResult:
        verified: VerifyBkMetadataResult = _raw(BookKeeperReadActivities.verify_bk_metadata)(
            self.bk, VerifyBkMetadataInput(req)
        )
        if verified.verdict is not Verdict.MATCH:
            # "if the param didn't match, we also think it succeeded"
            raise _Decided(_VERDICT[verified.verdict])
        return verified

    def _ask_owner(self, req: PendingDeleteLedgerInfo) -> AskOwnerBrokerResult:
        answer: AskOwnerBrokerResult = _raw(PulsarAdminActivities.ask_owner_broker)(
            self.admin, AskOwnerBrokerInput(req.topic_name, req.ledger_id)
        )
        return answer

    def _recheck_later(self, message: Any, request: PendingDeleteLedgerInfo, kept: _Kept) -> None:
        """The in-use grace: check again after ``in_use_recheck_seconds``, up to ``in_use_rechecks`` times."""
        checks = int(message.properties().get(IN_USE_CHECKS, 0))
        if checks >= self.settings.in_use_rechecks:
            if kept.resent:
                self._ack(message, Outcome.SKIPPED_IN_USE.value, request.workflow_id)
            else:  # the broker will not send it again: kept in the DLQ, to be replayed
                self._dead_letter(message, f"kept for replay: {kept}", request.workflow_id)
            return
        if self.in_use_report is not None:
            with self.lock, self.in_use_report.open("a") as report:
                report.write(f"{request.workflow_id}\n")
        self._send_to_retry(message, {IN_USE_CHECKS: str(checks + 1)}, self.settings.in_use_recheck_seconds)

    def _reconsume_later(self, message: Any, request: PendingDeleteLedgerInfo, reason: str) -> None:
        times = int(message.properties().get(RECONSUMETIMES, 0)) + 1
        if times > self.max_reconsume:
            self._dead_letter(message, f"gave up after {times - 1} reconsumes: {reason}", request.workflow_id)
            return
        self._send_to_retry(message, {RECONSUMETIMES: str(times)}, self.reconsume_seconds)
        with self.lock:
            self.reconsumed += 1

    def _send_to_retry(self, message: Any, counters: dict[str, str], delay: float) -> None:
        """As the Java client's reconsumeLater: produce to RETRY (delayed), then ack the original."""
        properties = dict(message.properties())
        properties.update(
            {
                **counters,
                DELAY_UNTIL: str(int((time.time() + delay) * 1000)),
                ORIGIN_PUBLISH: properties.get(ORIGIN_PUBLISH, str(message.publish_timestamp())),
                "REAL_TOPIC": message.topic_name(),
                "ORIGIN_MESSAGE_ID": str(message.message_id()),
            }
        )
        while True:
            try:
                self.retry.send(message.data(), properties=properties, deliver_after=timedelta(seconds=delay))
                break
            except Exception:  # pulsar's own error classes: keep the message, try again
                time.sleep(0.5)
        self.consumer.acknowledge(message)

    def _dead_letter(self, message: Any, reason: str, workflow_id: str = "") -> None:
        properties = messaging.dead_letter_properties(
            reason=reason,
            failed_step="pip186",
            attempts=int(message.properties().get(RECONSUMETIMES, 0)) + 1,
            workflow_id="",
            original=dict(message.properties()),
        )
        self.dlq.send(message.data(), properties)
        self._ack(message, Outcome.DEAD_LETTERED.value, workflow_id, reason)

    def _ack(self, message: Any, outcome: str, workflow_id: str, reason: str = "") -> None:
        self.consumer.acknowledge(message)
        now = time.time()
        properties = message.properties()
        published = float(properties.get(ORIGIN_PUBLISH, message.publish_timestamp())) / 1000
        redeliveries = (int(properties.get(name, 0)) for name in (RECONSUMETIMES, IN_USE_CHECKS, AGE_WAITED))
        deliveries = 1 + sum(redeliveries)
        record = {
            "id": workflow_id,
            "outcome": outcome,
            "deliveries": deliveries,
            "latency_ms": (now - published) * 1000,
            "acked": now,
            **({"reason": reason} if reason else {}),
        }
        with self.lock:
            self.outcomes[outcome] += 1
            self.messages.append(record)
            self.done += 1
            self.last_ack = now

    def close(self) -> None:
        self.consumer.close()
        self.retry.close()
        self.dlq.close()
        self.client.close()
        for client in self._clients:
            client.close()


class _VersionChanged(TransientError):
    """The znode changed between verify and delete: reconsume the whole message."""


class _Kept(Exception):
    """Something keeps the ledger: the in-use grace. ``resent``: the broker sends the request again once it
    lets go, so one kept past the grace is acked (SKIPPED_IN_USE) rather than dead-lettered."""

    def __init__(self, where: str, *, resent: bool) -> None:
        super().__init__(where)
        self.resent = resent


class _TooYoung(Exception):
    """A ledger younger than ``min_ledger_age_seconds``: decided once it is that old."""

    def __init__(self, wait_seconds: float) -> None:
        super().__init__(f"decided in {wait_seconds:.0f} s")
        self.wait_seconds = wait_seconds


def _unsettled(req: PendingDeleteLedgerInfo, verified: VerifyBkMetadataResult) -> str:
    """The service's rule (``workflows/ledger_deletion.py``, ``_unsettled``): a data ledger still open, or a
    ledger newer than everything its owner lists in Pulsar's metadata store, is not deleted yet."""
    if req.ledger_component is LedgerComponent.MANAGED_LEDGER and verified.state in ("OPEN", "IN_RECOVERY"):
        return f"ledger {req.ledger_id} is {verified.state} in BookKeeper"
    if 0 <= verified.newest_listed < req.ledger_id:
        newest = verified.newest_listed
        return f"ledger {req.ledger_id} is newer than every ledger its owner lists (newest {newest})"
    return ""


class _Decided(Exception):
    """The verification decided the outcome (not found, mismatch, not Pulsar's)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect", type=int, required=True, help="stop after this many terminal messages")
    parser.add_argument("--results", type=Path, required=True, help="where to write the JSON summary")
    parser.add_argument("--reconsume-seconds", type=float, default=600.0)
    parser.add_argument("--max-reconsume", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument(
        "--resubscribe-idle-seconds",
        type=float,
        default=10.0,
        help="resubscribe after this long without a message while holding none (0: never)",
    )
    parser.add_argument(
        "--in-use-report", type=Path, help="append the workflow id of each request found in use to this file"
    )
    args = parser.parse_args()
    rate = faults.install()
    settings = Settings()
    consumer = Pip186Consumer(
        settings,
        args.reconsume_seconds,
        args.max_reconsume,
        args.concurrency,
        args.resubscribe_idle_seconds,
        args.in_use_report,
    )
    print("pip186 consumer ready", flush=True)
    try:
        consumer.run(args.expect, args.timeout)
    finally:
        args.results.write_text(
            json.dumps(
                {
                    "done": consumer.done,
                    "outcomes": dict(consumer.outcomes),
                    "messages": consumer.messages,
                    "reconsumed": consumer.reconsumed,
                    "resubscribed": consumer.resubscribed,
                    "faults_injected": faults.injected,
                    "fault_rate": rate,
                    "first_receive": consumer.first_receive,
                    "last_ack": consumer.last_ack,
                }
            )
        )
        consumer.close()


if __name__ == "__main__":
    main()
