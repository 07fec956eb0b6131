"""Tracing: one trace per deletion request, from the Pulsar receive through the workflow to every activity.

- ``install`` sets the global TracerProvider. Spans are exported over OTLP only when the standard ``OTEL_*``
  variables ask for it (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, protocol
  ``grpc`` or ``http/protobuf`` from ``OTEL_EXPORTER_OTLP_PROTOCOL``, any other refused;
  ``OTEL_TRACES_EXPORTER=none`` turns export off; the service name from ``OTEL_SERVICE_NAME``, else
  ``ledger-deletion-<pools>``); the exporters read the other ``OTEL_*``.
- Temporal's ``TracingInterceptor`` goes on the client only: workers built from that client inherit it, and
  registering it twice would duplicate spans.
- The ingest continues a W3C ``traceparent`` found in the message properties (a broker or ``submit`` that
  traces), so a request keeps the trace it started in.

Span attributes carry ledger id, topic, tenant, component and outcome; never settings values, tokens or
payloads, so nothing secret can reach a span.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from temporalio.contrib.opentelemetry import TracingInterceptor

from ledger_deletion.errors import ConfigurationError

log = logging.getLogger(__name__)

TRACER_NAME = "ledger_deletion"
# Span attribute names (stable: dashboards and Jaeger searches use them).
ATTR_LEDGER_ID = "ledger_deletion.ledger_id"
ATTR_LEDGER_TYPE = "ledger_deletion.ledger_type"
ATTR_COMPONENT = "ledger_deletion.component"
ATTR_TOPIC = "ledger_deletion.topic"
ATTR_TENANT = "ledger_deletion.tenant"
ATTR_OUTCOME = "ledger_deletion.outcome"
ATTR_STEP = "ledger_deletion.step"
ATTR_MESSAGE_ID = "messaging.message.id"
ATTR_SOURCE_TOPIC = "messaging.source.name"

_installed: TracerProvider | None = None


def otlp_requested(env: Mapping[str, str] = os.environ) -> bool:
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def install(
    service_name: str,
    *,
    extra_processors: tuple[SpanProcessor, ...] = (),
    env: Mapping[str, str] = os.environ,
) -> TracerProvider | None:
    """Set the process's TracerProvider once (OpenTelemetry allows a single global provider).

    Returns None, and installs nothing, when no span would go anywhere (no OTLP endpoint, no extra
    processor): recording spans nobody reads cost the workflow pool CPU and every activity a header in
    the history (measured in docs/performance.md). OpenTelemetry's no-op tracer then serves ``ingest_span``.
    """
    global _installed
    if _installed is not None:
        for processor in extra_processors:
            _installed.add_span_processor(processor)
        return _installed
    exporting = otlp_requested(env)
    if not exporting and not extra_processors:
        return None
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME", service_name)})
    )
    for processor in extra_processors:
        provider.add_span_processor(processor)
    if exporting:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
        # Log where spans go, not the headers (OTEL_EXPORTER_OTLP_HEADERS may carry an API key).
        log.info("exporting traces over OTLP to %s", _endpoint(env))
    trace.set_tracer_provider(provider)
    _installed = provider
    return provider


def installed() -> bool:
    """Whether spans of this process go somewhere (``install`` set a provider)."""
    return _installed is not None


def _endpoint(env: Mapping[str, str]) -> str:
    return env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")


# The protocols OpenTelemetry's Python exporters speak (the specification's http/json has none).
PROTOCOLS = ("grpc", "http/protobuf")


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    variable = next(
        (v for v in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") if env.get(v)),
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    )
    protocol = env.get(variable) or "grpc"
    if protocol not in PROTOCOLS:
        raise ConfigurationError(f"{variable}={protocol}: the exporter speaks {' or '.join(PROTOCOLS)}")
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        exporter: SpanExporter = HttpExporter()
        return exporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def tracing_interceptor() -> TracingInterceptor:
    return TracingInterceptor(trace.get_tracer(TRACER_NAME))


@contextmanager
def ingest_span(properties: Mapping[str, str], topic: str, message_id: str) -> Iterator[Span]:
    """The root (or continued) span of one received message; Temporal's client spans become its children."""
    parent = extract(dict(properties)) if "traceparent" in properties else otel_context.Context()
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        "pulsar-receive",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={ATTR_SOURCE_TOPIC: topic, ATTR_MESSAGE_ID: message_id},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            # Only the exception type: messages of client errors may echo URLs with credentials in them.
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def set_request_attributes(
    span: Span, *, ledger_id: int, ledger_type: str, component: str, topic: str, tenant: str
) -> None:
    span.set_attributes(
        {
            ATTR_LEDGER_ID: ledger_id,
            ATTR_LEDGER_TYPE: ledger_type,
            ATTR_COMPONENT: component,
            ATTR_TOPIC: topic,
            ATTR_TENANT: tenant,
        }
    )
