"""The pulsar pool's audit writer: records made durable in batches (group commit) before their acks.

Each ack activity hands its records to :meth:`AuditWriter.write` and waits. One thread writes: it takes
every record waiting when it begins (after ``linger_seconds``, so that acks arriving together share an
object), writes one Parquet object per day of decision under a fresh key, and releases every waiting
activity once S3 has answered. While it writes, the next batch gathers. A hundred acks at once cost a few
PUTs, not a hundred, and each waits at most one write longer than its own.
"""

from __future__ import annotations

import collections
import io
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow.parquet as pq

from ledger_deletion.audit.record import RECLAIMED_OUTCOMES, AuditRecord, to_table
from ledger_deletion.audit.store import AuditStore
from ledger_deletion.errors import ObjectStoreUnavailable
from ledger_deletion.observability import metrics

log = logging.getLogger(__name__)

# How many record ids the writer remembers, so a record written again (its ack failed after the write, and
# the activity was retried) does not count its bytes twice in the metric. Readers dedupe by id anyway.
_REMEMBERED = 100_000


@dataclass
class AuditWriter:
    store: AuditStore
    worker: str  # this process, written into each record
    linger_seconds: float = 0.05
    wait_seconds: float = 60.0  # a caller waits this long for its batch, then fails (its ack is retried)
    on_batch: Callable[[str, int], None] | None = None  # (key, records): for tests and logs
    _queue: list[tuple[Sequence[AuditRecord], Future[None]]] = field(default_factory=list, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _closed: bool = field(default=False, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _counted: collections.OrderedDict[str, None] = field(default_factory=collections.OrderedDict, init=False)

    def start(self) -> AuditWriter:
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Write what is waiting, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_seconds)

    def write(self, records: Sequence[AuditRecord]) -> None:
        """Return once every record is durable in S3; raise ``ObjectStoreUnavailable`` if it is not."""
        if not records:
            return
        done: Future[None] = Future()
        with self._cond:
            if self._closed:
                raise ObjectStoreUnavailable("audit writer closed: this process is shutting down")
            self._queue.append((records, done))
            self._cond.notify_all()
        try:
            done.result(timeout=self.wait_seconds)
        except TimeoutError as exc:
            raise ObjectStoreUnavailable(
                f"audit records not written within {self.wait_seconds:.0f} s"
            ) from exc

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
            if not self._closed:
                # Let the acks that arrive together share one object: the batch's cost is one PUT per day.
                threading.Event().wait(self.linger_seconds)
            with self._cond:
                batch, self._queue = self._queue, []
            self._commit(batch)

    def _commit(self, batch: list[tuple[Sequence[AuditRecord], Future[None]]]) -> None:
        records = [r for records, _ in batch for r in records]
        try:
            self._put(records)
        except Exception as exc:  # every waiting activity fails and is retried; nothing is acked
            log.warning("audit batch of %d record(s) not written: %s", len(records), exc)
            error = exc if isinstance(exc, ObjectStoreUnavailable) else ObjectStoreUnavailable(str(exc))
            for _, done in batch:
                done.set_exception(error)
            return
        for _, done in batch:
            done.set_result(None)

    def _put(self, records: list[AuditRecord]) -> None:
        by_day: dict[str, list[AuditRecord]] = collections.defaultdict(list)
        for record in records:
            by_day[record.day].append(record)
        stamp = datetime.now(UTC).strftime("%H%M%S")
        for day, rows in sorted(by_day.items()):
            buffer = io.BytesIO()
            pq.write_table(to_table(rows), buffer, compression="zstd")
            # A fresh key per object: nothing is ever overwritten (S3 refuses one that exists).
            key = self.store.key(day, f"{stamp}-{self.worker}-{uuid.uuid4().hex}.parquet")
            self.store.add(key, buffer.getvalue())
            metrics.current().audit_batch_written()
            if self.on_batch is not None:
                self.on_batch(key, len(rows))
            log.debug("audit: %d record(s) in s3://%s/%s", len(rows), self.store.bucket, key)
        for record in records:
            if record.record_id in self._counted:
                continue
            self._counted[record.record_id] = None
            if len(self._counted) > _REMEMBERED:
                self._counted.popitem(last=False)
            freed = record.bytes if record.outcome in RECLAIMED_OUTCOMES else 0
            metrics.current().audited(record.outcome, record.namespace, record.component, freed)


def written_at() -> datetime:
    return datetime.now(UTC)
