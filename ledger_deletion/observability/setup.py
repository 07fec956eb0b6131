"""Wiring observability into a worker process: metrics endpoints, tracer provider, and the observed client."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from temporalio.client import Client, Interceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.observability import metrics, redaction, tracing
from ledger_deletion.observability.interceptor import DeletionInterceptor
from ledger_deletion.settings import COLOCATED, POOLS, Settings
from ledger_deletion.temporal_client import connect_temporal

log = logging.getLogger(__name__)


def pool_resolver(settings: Settings) -> Callable[[str], str]:
    """Task queue → pool name (the per-process ack queues ``<pulsar queue>-ack-<id>`` are the pulsar pool)."""
    queues = {settings.task_queue(pool): COLOCATED if settings.colocate_pools else pool for pool in POOLS}

    def pool_of(task_queue: str) -> str:
        if task_queue in queues:
            return queues[task_queue]
        if task_queue.startswith(settings.task_queue("pulsar")):
            return "pulsar"
        return metrics.UNKNOWN

    return pool_of


def temporal_runtime(settings: Settings, pools: Iterable[str]) -> Runtime | None:
    """A Runtime exporting the SDK's own metrics (schedule-to-start latency, slots…) on its own port."""
    if not settings.temporal_metrics_port:
        return None
    try:
        return Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(
                    bind_address=f"{settings.metrics_host}:{settings.temporal_metrics_port}",
                    counters_total_suffix=True,
                    durations_as_seconds=True,
                ),
                global_tags={"pool": ",".join(sorted(pools))},
            )
        )
    except ValueError as exc:  # the SDK's "Failed starting Prometheus exporter: Address already in use"
        raise ConfigurationError(
            metrics.port_in_use(
                "LEDGER_DELETION_TEMPORAL_METRICS_PORT",
                settings.metrics_host,
                settings.temporal_metrics_port,
                exc,
            )
        ) from None


def interceptors(settings: Settings, *, traced: bool = True) -> list[Interceptor]:
    """Tracing first (it opens the spans), then ours (it annotates them and measures).

    Without ``traced`` only ours: Temporal's tracing interceptor would open spans in every workflow task
    and add a header to every activity for traces that go nowhere.
    """
    ours = DeletionInterceptor(pool_resolver(settings))
    return [tracing.tracing_interceptor(), ours] if traced else [ours]


async def observed_client(settings: Settings, pools: Iterable[str]) -> Client:
    """Install metrics and tracing for this process and connect a Temporal client that carries them."""
    names = sorted(set(pools))
    redaction.install(settings)  # before any client logs: libraries may print credentials at DEBUG
    if settings.metrics_port:
        metrics.install(settings.metrics_port, settings.metrics_host)
        log.info("metrics on :%d/metrics", metrics.serving_port() or 0)
    tracing.install(f"ledger-deletion-{'-'.join(names)}")
    return await connect_temporal(
        settings,
        runtime=temporal_runtime(settings, names),
        interceptors=interceptors(settings, traced=tracing.installed()),
    )
