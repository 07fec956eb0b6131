"""PIP-186's counters and the step latencies, as OpenTelemetry SDK instruments exposed for Prometheus.

One ``Metrics`` per process. ``install`` puts a Prometheus endpoint on a port (one process per pool in
production, so one port per pool); before that, instruments record into a provider with no reader, which
costs nothing and lets library code and tests call them unconditionally.

Every instrument is declared once in :data:`INSTRUMENTS` (name, kind, unit, description, labels): ``Metrics``
creates them from there, and the metrics reference (docs/metrics.md) is generated from there.

Labels are deliberately few and bounded: ``pool``, ``tenant``, ``component``, ``outcome``/``reason``/``step``.
Ledger ids and topics are never labels (unbounded cardinality); they are span attributes instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

from ledger_deletion.errors import ConfigurationError

METER_NAME = "ledger_deletion"
UNKNOWN = "unknown"
# Step latencies range from a ZooKeeper read (ms) to an S3 batch delete under throttling (tens of seconds).
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(frozen=True)
class Instrument:
    """One instrument as declared. Prometheus names it ``name`` plus ``_total`` for a counter and plus the
    unit (``_seconds``) for a histogram; "{request}"-style units are annotations it drops."""

    name: str
    kind: Literal["counter", "histogram", "gauge"]
    unit: str
    description: str
    labels: tuple[str, ...]


REQUEST_LABELS = ("pool", "tenant", "component")  # ``Labels``: who a measurement is about

REQUESTS_RECEIVED = Instrument(
    "ledger_deletion_requests_received",
    "counter",
    "{request}",
    "Deletion messages received from Pulsar",
    REQUEST_LABELS,
)
REQUESTS_COMPLETED = Instrument(
    "ledger_deletion_requests_completed",
    "counter",
    "{request}",
    "Deletion requests decided, by outcome (each request that joined a run counts on its own)",
    (*REQUEST_LABELS, "outcome"),
)
BK_LEDGERS_DELETED = Instrument(
    "ledger_deletion_bk_ledgers_deleted", "counter", "{ledger}", "BookKeeper ledgers deleted", REQUEST_LABELS
)
OFFLOADED_LEDGERS_DELETED = Instrument(
    "ledger_deletion_offloaded_ledgers_deleted",
    "counter",
    "{ledger}",
    "Offloaded ledgers deleted",
    REQUEST_LABELS,
)
BK_DELETE_FAILURES = Instrument(
    "ledger_deletion_bk_delete_failures",
    "counter",
    "{attempt}",
    "Failed BookKeeper delete attempts",
    (*REQUEST_LABELS, "error"),
)
OFFLOAD_DELETE_FAILURES = Instrument(
    "ledger_deletion_offload_delete_failures",
    "counter",
    "{attempt}",
    "Failed tiered-storage delete attempts",
    (*REQUEST_LABELS, "error"),
)
MESSAGES_ACKED = Instrument(
    "ledger_deletion_messages_acked", "counter", "{message}", "Deletion messages acknowledged", REQUEST_LABELS
)
DEAD_LETTERED = Instrument(
    "ledger_deletion_dead_lettered",
    "counter",
    "{request}",
    "Requests published to the dead-letter topic",
    (*REQUEST_LABELS, "step"),
)
SKIPPED = Instrument(
    "ledger_deletion_skipped",
    "counter",
    "{request}",
    "Requests that ended without deleting, by reason",
    (*REQUEST_LABELS, "reason"),
)
STEP_DURATION = Instrument(
    "ledger_deletion_step_duration",
    "histogram",
    "s",
    "Duration of one attempt of a workflow step",
    (*REQUEST_LABELS, "step", "outcome"),
)
PENDING_ACKS = Instrument(
    "ledger_deletion_pending_acks", "gauge", "{message}", "Messages received, not acked", ("pool",)
)
INFLIGHT_ESTIMATE = Instrument(
    "ledger_deletion_inflight_estimate",
    "gauge",
    "{request}",
    "Estimated in-flight deletions per tenant: running workflows plus the deletion subscription's backlog "
    "(the system topic's as tenant '(system topic)')",
    ("tenant",),
)
INFLIGHT_BACKLOG_MEASURED = Instrument(
    "ledger_deletion_inflight_backlog_measured",
    "gauge",
    "1",
    "1 when the in-flight estimate includes the subscription backlog, 0 when the admin API could not give "
    "it (the estimate then counts running workflows only)",
    (),
)
DELETIONS_PAUSED = Instrument(
    "ledger_deletion_deletions_paused",
    "gauge",
    "1",
    "1 while the kill switch (ledger-deletion pause) is on as this deleting process last read it, 0 while "
    "it is off",
    ("pool",),
)
KILL_SWITCH_AGE = Instrument(
    "ledger_deletion_kill_switch_age",
    "gauge",
    "s",
    "Seconds since this deleting process last read the kill switch; past LEDGER_DELETION_KILL_SWITCH_STALE_"
    "SECONDS it deletes nothing",
    ("pool",),
)
# Per namespace, unlike the others: what the cleanup freed is asked per namespace (the audit log's summary
# answers the same), and a deployment's namespaces are few and known, unlike its topics and ledgers.
RECLAIMED_BYTES = Instrument(
    "ledger_deletion_reclaimed_bytes",
    "counter",
    "By",
    "Bytes freed by deletions (DELETED; BookKeeper metadata's length or the objects' sizes), counted once "
    "the deletion's audit record is durable",
    ("namespace", "component"),
)
AUDIT_RECORDS = Instrument(
    "ledger_deletion_audit_records",
    "counter",
    "{record}",
    "Audit records made durable in object storage before their message was acked, by outcome",
    ("outcome",),
)
AUDIT_BATCHES = Instrument(
    "ledger_deletion_audit_batches",
    "counter",
    "{object}",
    "Parquet objects the audit log's group commit wrote (each holds every record waiting when it began)",
    (),
)
# Per namespace: the namespaces that prove another Pulsar cluster writes to this BookKeeper are few, and
# which they are is what an operator needs to find that cluster (ledger_deletion.tripwire).
SHARED_BOOKKEEPER_TRIPPED = Instrument(
    "ledger_deletion_shared_bookkeeper_tripped",
    "gauge",
    "1",
    "1 per namespace the shared-BookKeeper tripwire names while it is tripped, as this process last read it "
    "(LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none, yet another writer's recent ledger was seen; namespace "
    "unknown when tripped by hand): no ledger of an unknown namespace is deleted until it is cleared",
    ("namespace",),
)
SHARED_BOOKKEEPER_EVIDENCE = Instrument(
    "ledger_deletion_shared_bookkeeper_evidence",
    "counter",
    "{ledger}",
    "Recent ledgers of a namespace this cluster does not have, seen by this process with "
    "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH=none: each trips the shared-BookKeeper tripwire",
    ("namespace",),
)
# Per namespace, as the evidence: few, and which they are tells an operator which cluster is undeclared.
WATCH_UNKNOWN_NAMESPACE = Instrument(
    "ledger_deletion_watch_unknown_namespace",
    "counter",
    "{ledger}",
    "Unreferenced Pulsar ledgers a watcher resync did not request: their namespace is known to none of the "
    "metadata stores sharing this BookKeeper (LEDGER_DELETION_BOOKKEEPER_SHARED_WITH), or, with none, the "
    "shared-BookKeeper tripwire is tripped or unreadable",
    ("namespace",),
)
INSTRUMENTS = (
    REQUESTS_RECEIVED,
    REQUESTS_COMPLETED,
    BK_LEDGERS_DELETED,
    OFFLOADED_LEDGERS_DELETED,
    BK_DELETE_FAILURES,
    OFFLOAD_DELETE_FAILURES,
    MESSAGES_ACKED,
    DEAD_LETTERED,
    SKIPPED,
    STEP_DURATION,
    PENDING_ACKS,
    INFLIGHT_ESTIMATE,
    INFLIGHT_BACKLOG_MEASURED,
    DELETIONS_PAUSED,
    KILL_SWITCH_AGE,
    SHARED_BOOKKEEPER_TRIPPED,
    SHARED_BOOKKEEPER_EVIDENCE,
    WATCH_UNKNOWN_NAMESPACE,
    RECLAIMED_BYTES,
    AUDIT_RECORDS,
    AUDIT_BATCHES,
)


@dataclass(frozen=True)
class Labels:
    """Who a measurement is about; tenant and component come from the request the work belongs to."""

    pool: str
    tenant: str = UNKNOWN
    component: str = UNKNOWN

    def as_dict(self, **extra: str) -> dict[str, str]:
        return {"pool": self.pool, "tenant": self.tenant, "component": self.component, **extra}


class Metrics:
    """The service's instruments. Method names say what happened; each adds one to the matching counter."""

    def __init__(self, provider: MeterProvider) -> None:
        self.provider = provider
        meter = provider.get_meter(METER_NAME)
        self._received = _counter(meter, REQUESTS_RECEIVED)
        self._completed = _counter(meter, REQUESTS_COMPLETED)
        self._bk_deleted = _counter(meter, BK_LEDGERS_DELETED)
        self._offload_deleted = _counter(meter, OFFLOADED_LEDGERS_DELETED)
        self._bk_failed = _counter(meter, BK_DELETE_FAILURES)
        self._offload_failed = _counter(meter, OFFLOAD_DELETE_FAILURES)
        self._acked = _counter(meter, MESSAGES_ACKED)
        self._dead_lettered = _counter(meter, DEAD_LETTERED)
        self._skipped = _counter(meter, SKIPPED)
        self._step_seconds = _histogram(meter, STEP_DURATION)
        self._reclaimed = _counter(meter, RECLAIMED_BYTES)
        self._audit_records = _counter(meter, AUDIT_RECORDS)
        self._audit_batches = _counter(meter, AUDIT_BATCHES)
        self._pending_sources: dict[object, tuple[str, Callable[[], int]]] = {}
        self._sources_lock = threading.Lock()
        _gauge(meter, PENDING_ACKS, self._observe_pending)
        # PIP-186's "estimated in-flight deletions", refreshed in the background (ops.inflight): reading it
        # costs a visibility query and the admin API's topic stats, too much for a scrape.
        self._inflight: dict[str, int] = {}
        self._inflight_backlog_measured: int | None = None
        self._inflight_lock = threading.Lock()
        _gauge(meter, INFLIGHT_ESTIMATE, self._observe_inflight)
        _gauge(meter, INFLIGHT_BACKLOG_MEASURED, self._observe_backlog_measured)
        # The kill switch as each deleting pool of this process last read it (kill_switch.Watch).
        self._switches: dict[object, tuple[str, Callable[[], bool | None], Callable[[], float | None]]] = {}
        _gauge(meter, DELETIONS_PAUSED, self._observe_paused)
        _gauge(meter, KILL_SWITCH_AGE, self._observe_switch_age)
        # The shared-BookKeeper tripwire's namespaces as this process last read it (tripwire.View).
        self._tripwires: dict[object, Callable[[], tuple[str, ...] | None]] = {}
        self._evidence = _counter(meter, SHARED_BOOKKEEPER_EVIDENCE)
        self._watch_unknown = _counter(meter, WATCH_UNKNOWN_NAMESPACE)
        _gauge(meter, SHARED_BOOKKEEPER_TRIPPED, self._observe_tripwire)

    # --- counters ------------------------------------------------------------------------------------------

    def request_received(self, labels: Labels) -> None:
        self._received.add(1, labels.as_dict())

    def request_completed(self, labels: Labels, outcome: str) -> None:
        self._completed.add(1, labels.as_dict(outcome=outcome))
        if outcome.startswith("SKIPPED_"):
            self._skipped.add(1, labels.as_dict(reason=outcome))

    def bk_ledger_deleted(self, labels: Labels) -> None:
        self._bk_deleted.add(1, labels.as_dict())

    def offloaded_ledger_deleted(self, labels: Labels) -> None:
        self._offload_deleted.add(1, labels.as_dict())

    def bk_delete_failed(self, labels: Labels, error: str) -> None:
        self._bk_failed.add(1, labels.as_dict(error=error))

    def offload_delete_failed(self, labels: Labels, error: str) -> None:
        self._offload_failed.add(1, labels.as_dict(error=error))

    def messages_acked(self, labels: Labels, count: int) -> None:
        if count:
            self._acked.add(count, labels.as_dict())

    def dead_lettered(self, labels: Labels, step: str) -> None:
        self._dead_lettered.add(1, labels.as_dict(step=step))

    def step_finished(self, labels: Labels, step: str, seconds: float, ok: bool) -> None:
        self._step_seconds.record(seconds, labels.as_dict(step=step, outcome="ok" if ok else "error"))

    def audited(self, outcome: str, namespace: str, component: str, freed: int) -> None:
        """One audit record made durable; ``freed`` bytes when it records a deletion."""
        self._audit_records.add(1, {"outcome": outcome})
        if freed:
            self._reclaimed.add(freed, {"namespace": namespace, "component": component})

    def audit_batch_written(self) -> None:
        self._audit_batches.add(1)

    # --- gauges --------------------------------------------------------------------------------------------

    def observe_pending_acks(self, pool: str, count: Callable[[], int]) -> Callable[[], None]:
        """Report messages received, not yet acked, held by this process; returns the unregister function.

        One gauge sums every source (several pulsar pools may run in one process, e.g. in tests).
        """
        key = object()
        with self._sources_lock:
            self._pending_sources[key] = (pool, count)

        def unregister() -> None:
            with self._sources_lock:
                self._pending_sources.pop(key, None)

        return unregister

    def observe_kill_switch(
        self, pool: str, paused: Callable[[], bool | None], age: Callable[[], float | None]
    ) -> Callable[[], None]:
        """Report the kill switch as ``pool`` last read it; returns the unregister function."""
        key = object()
        with self._sources_lock:
            self._switches[key] = (pool, paused, age)

        def unregister() -> None:
            with self._sources_lock:
                self._switches.pop(key, None)

        return unregister

    def shared_bookkeeper_evidence(self, namespace: str) -> None:
        self._evidence.add(1, {"namespace": namespace})

    def watch_unknown_namespace(self, namespace: str, ledgers: int) -> None:
        self._watch_unknown.add(ledgers, {"namespace": namespace})

    def observe_tripwire(self, namespaces: Callable[[], tuple[str, ...] | None]) -> Callable[[], None]:
        """Report the tripwire as last read: the namespaces it names while tripped (``("unknown",)`` when
        tripped by hand), ``()`` while not, None before the first read; returns the unregister function."""
        key = object()
        with self._sources_lock:
            self._tripwires[key] = namespaces

        def unregister() -> None:
            with self._sources_lock:
                self._tripwires.pop(key, None)

        return unregister

    def _observe_tripwire(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._sources_lock:
            sources = list(self._tripwires.values())
        named = {ns for source in sources for ns in (source() or ())}
        return [Observation(1, {"namespace": ns}) for ns in sorted(named)]

    def _observe_paused(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._sources_lock:
            switches = list(self._switches.values())
        return [
            Observation(int(state), {"pool": pool})
            for pool, paused, _ in switches
            if (state := paused()) is not None
        ]

    def _observe_switch_age(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._sources_lock:
            switches = list(self._switches.values())
        return [
            Observation(seconds, {"pool": pool})
            for pool, _, age in switches
            if (seconds := age()) is not None
        ]

    def inflight_estimated(self, per_tenant: Mapping[str, int], backlog_measured: bool) -> None:
        """Record a fresh in-flight estimate. A tenant seen before and absent now is reported as 0, so its
        series drops to zero instead of keeping its last value until Prometheus marks it stale."""
        with self._inflight_lock:
            self._inflight = {tenant: 0 for tenant in self._inflight} | dict(per_tenant)
            self._inflight_backlog_measured = int(backlog_measured)

    def _observe_inflight(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._inflight_lock:
            return [Observation(value, {"tenant": tenant}) for tenant, value in self._inflight.items()]

    def _observe_backlog_measured(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._inflight_lock:
            measured = self._inflight_backlog_measured
        return [] if measured is None else [Observation(measured)]

    def _observe_pending(self, _: CallbackOptions) -> Iterable[Observation]:
        totals: dict[str, int] = {}
        with self._sources_lock:
            sources = list(self._pending_sources.values())
        for pool, count in sources:
            totals[pool] = totals.get(pool, 0) + count()
        return [Observation(value, {"pool": pool}) for pool, value in totals.items()]


_lock = threading.Lock()
_current: Metrics | None = None
_port: int | None = None


def current() -> Metrics:
    """The process's metrics (a reader-less, free no-op until ``install`` is called)."""
    global _current
    with _lock:
        if _current is None:
            _current = Metrics(MeterProvider(views=_views()))
        return _current


def install(port: int, host: str = "0.0.0.0") -> Metrics:
    """Serve ``/metrics`` for Prometheus on ``port`` (idempotent: a second call returns the same Metrics).

    Raises:
        ConfigurationError: the port is taken; the process stops with one line naming the setting rather
            than run unscraped (Prometheus would read the other process's metrics there).
    """
    global _current, _port
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    from ledger_deletion.observability import readiness

    with _lock:
        if _port is not None and _current is not None:
            return _current
        try:
            # /metrics, and /ready beside it for the readiness probe (readiness.py).
            server, _ = readiness.start_server(port, host)
        except OSError as exc:
            raise ConfigurationError(port_in_use("LEDGER_DELETION_METRICS_PORT", host, port, exc)) from None
        reader = PrometheusMetricReader(disable_target_info=True)
        _current = Metrics(MeterProvider(metric_readers=[reader], views=_views()))
        _port = int(server.server_port)  # port 0 (tests) picks a free one
        return _current


def port_in_use(variable: str, host: str, port: int, exc: BaseException) -> str:
    """The one line that refuses a metrics port another process holds (two pools on one host, say)."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return (
        f"{variable}={port}: cannot serve metrics on {host}:{port} ({why}); give each process on this host "
        "its own port, or 0 for none"
    )


def serving_port() -> int | None:
    """The port ``/metrics`` is served on, once installed."""
    return _port


def _views() -> list[View]:
    return [
        View(
            instrument_name=STEP_DURATION.name,
            aggregation=ExplicitBucketHistogramAggregation(boundaries=STEP_BUCKETS),
        )
    ]


def _counter(meter: Meter, instrument: Instrument) -> Counter:
    assert instrument.kind == "counter"
    return meter.create_counter(instrument.name, instrument.unit, instrument.description)


def _histogram(meter: Meter, instrument: Instrument) -> Histogram:
    assert instrument.kind == "histogram"
    return meter.create_histogram(instrument.name, instrument.unit, instrument.description)


def _gauge(
    meter: Meter, instrument: Instrument, observe: Callable[[CallbackOptions], Iterable[Observation]]
) -> None:
    assert instrument.kind == "gauge"
    meter.create_observable_gauge(instrument.name, [observe], instrument.unit, instrument.description)
