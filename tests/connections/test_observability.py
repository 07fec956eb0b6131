"""Traces over OTLP by gRPC or HTTP (chosen by the standard variable), JSON logs that carry the trace and the
workflow, the log level, and a metrics port another process holds."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import closing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.observability import logs
from ledger_deletion.settings import Settings

# A process that installs the service's tracing from its environment and ends one span (a provider is
# global and set once per process, so each protocol runs in its own).
EMIT_ONE_SPAN = """
from opentelemetry import trace
from ledger_deletion.observability import tracing
provider = tracing.install("ledger-deletion-test")
assert provider is not None, "no exporter installed"
with trace.get_tracer("t").start_as_current_span("deletion-span"):
    pass
assert provider.force_flush(10_000), "the exporter did not flush"
"""


def _spans(request: trace_service_pb2.ExportTraceServiceRequest) -> list[tuple[str, str]]:
    """(service.name, span name) of every exported span."""
    found = []
    for resource_spans in request.resource_spans:
        service = next(
            a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"
        )
        for scope in resource_spans.scope_spans:
            found.extend((service, span.name) for span in scope.spans)
    return found


def _emit(endpoint: str, protocol: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    done = subprocess.run(
        [sys.executable, "-c", EMIT_ONE_SPAN], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_traces_go_over_otlp_http_protobuf() -> None:
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
            received.append(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _emit(f"http://127.0.0.1:{server.server_port}", "http/protobuf")
    finally:
        server.shutdown()
        server.server_close()
    assert [span for request in received for span in _spans(request)] == [
        ("ledger-deletion-test", "deletion-span")
    ]


def test_traces_go_over_otlp_grpc() -> None:
    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 - the gRPC method's name
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        _emit(f"http://127.0.0.1:{port}", "grpc")
    finally:
        server.stop(grace=None)
    assert [span for request in received for span in _spans(request)] == [
        ("ledger-deletion-test", "deletion-span")
    ]


# --- logs -------------------------------------------------------------------------------------------------


@contextmanager
def _json_log(level: str = "INFO") -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure(Settings(log_format="json", log_level=level), stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_logs_carry_the_trace_of_the_current_span() -> None:
    tracer = TracerProvider().get_tracer("t")  # a recording span, whatever the global provider is
    with _json_log() as stream:
        logging.getLogger("ledger_deletion.test").info("outside")
        with tracer.start_as_current_span("request") as span:
            logging.getLogger("ledger_deletion.test").warning("inside %s", "a span")
    outside, inside = _records(stream)
    assert "trace_id" not in outside and outside["message"] == "outside" and outside["level"] == "INFO"
    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}" and inside["span_id"] == f"{context.span_id:016x}"
    assert inside["message"] == "inside a span" and inside["logger"] == "ledger_deletion.test"


def test_json_logs_name_the_workflow_and_activity_they_were_written_in() -> None:
    @activity.defn(name="delete_bk_ledger")
    def step() -> None:
        logging.getLogger("ledger_deletion.adapters.zookeeper").info("deleting")

    environment = ActivityEnvironment()
    environment.info = environment.info.__class__(
        **{
            **environment.info.__dict__,
            "workflow_id": "ledger-deletion-bk-4711",
            "activity_type": "delete_bk_ledger",
            "attempt": 3,
        }
    )
    with _json_log() as stream:
        environment.run(step)
        # The SDK's workflow logger hands its context over as ``extra``.
        logging.getLogger("temporalio.workflow").info(
            "decided", extra={"temporal_workflow": {"workflow_id": "wf-1", "run_id": "r-1", "namespace": "n"}}
        )
    in_activity, in_workflow = _records(stream)
    assert in_activity["workflow_id"] == "ledger-deletion-bk-4711"
    assert (in_activity["activity_type"], in_activity["attempt"]) == ("delete_bk_ledger", 3)
    assert (in_workflow["workflow_id"], in_workflow["run_id"]) == ("wf-1", "r-1")
    assert "namespace" not in in_workflow


def test_the_log_level_is_a_setting_and_chatty_libraries_stay_quiet_unless_debug() -> None:
    with _json_log("warning") as stream:
        logging.getLogger("ledger_deletion.test").info("not shown")
        logging.getLogger("ledger_deletion.test").warning("shown")
        assert logging.getLogger("httpx").level == logging.WARNING
    assert [r["message"] for r in _records(stream)] == ["shown"]
    with _json_log("DEBUG"):
        assert logging.getLogger("httpx").level == logging.DEBUG


def test_a_level_or_format_that_does_not_exist_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_DELETION_LOG_LEVEL", "verbose")
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_LOG_LEVEL: .*levels are DEBUG, INFO"):
        load_settings()
    monkeypatch.setenv("LEDGER_DELETION_LOG_LEVEL", "debug")
    monkeypatch.setenv("LEDGER_DELETION_LOG_FORMAT", "xml")
    with pytest.raises(ConfigurationError, match="LEDGER_DELETION_LOG_FORMAT"):
        load_settings()
    monkeypatch.setenv("LEDGER_DELETION_LOG_FORMAT", "json")
    assert load_settings().log_level == "DEBUG"


# --- a metrics port another process holds -------------------------------------------------------------------


def _worker_with_a_port_taken(variable: str) -> subprocess.CompletedProcess[str]:
    with closing(socket.socket()) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LEDGER_DELETION_", "TEMPORAL_", "OTEL_"))
        }
        env.update(
            # Never reached: the ports are taken first.
            TEMPORAL_ADDRESS="127.0.0.1:1",
            LEDGER_DELETION_PULSAR_URL="pulsar://127.0.0.1:1",
            LEDGER_DELETION_PULSAR_ADMIN_URL="http://127.0.0.1:1",
            LEDGER_DELETION_ZOOKEEPER="127.0.0.1:1",
            LEDGER_DELETION_S3_ENDPOINT="http://127.0.0.1:1",
            LEDGER_DELETION_BOOKKEEPER_SHARED_WITH="none",
            LEDGER_DELETION_METRICS_HOST="127.0.0.1",
            LEDGER_DELETION_METRICS_PORT="0",
            LEDGER_DELETION_TEMPORAL_METRICS_PORT="0",
        )
        env[variable] = str(port)
        return subprocess.run(
            [
                sys.executable,
                "-c",
                "from ledger_deletion.cli import main; main()",
                "worker",
                "--pool",
                "workflow",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.mark.parametrize(
    "variable", ["LEDGER_DELETION_METRICS_PORT", "LEDGER_DELETION_TEMPORAL_METRICS_PORT"]
)
def test_a_second_worker_on_a_taken_metrics_port_stops_with_one_line(variable: str) -> None:
    done = _worker_with_a_port_taken(variable)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable}="), done.stderr
    assert "give each process on this host its own port, or 0 for none" in lines[0]


def test_a_protocol_the_exporter_does_not_speak_is_refused_naming_the_variable() -> None:
    from ledger_deletion.observability import tracing

    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    with pytest.raises(
        ConfigurationError, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/json: the exporter speaks"
    ):
        tracing._otlp_exporter(env)
    env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "udp"
    with pytest.raises(ConfigurationError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=udp"):
        tracing._otlp_exporter(env)
