"""The log of a long-running process (worker pools, the watcher): its level and its format.

``text`` is one line per record for people. ``json`` is one object per line for a log pipeline, with what
ties a record to the rest of the telemetry: the trace and span ids of the current span (the request's trace,
as Jaeger shows it) and the workflow, run and activity the record was written in, where it was written in
one. Secrets are redacted before any handler sees a record (:mod:`ledger_deletion.observability.redaction`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from opentelemetry import trace
from temporalio import activity, workflow

from ledger_deletion.settings import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log every request or connection state at INFO: two or three lines per deletion from the
# pulsar pool (httpx), every reconnection (kazoo). Their errors still show; DEBUG shows everything.
CHATTY = ("httpx", "httpcore", "kazoo.client")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the telemetry ids it has."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_trace_ids())
        entry.update(_temporal_ids(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _trace_ids() -> dict[str, str]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def _temporal_ids(record: logging.LogRecord) -> dict[str, Any]:
    """The workflow (and activity) the record was written in: from the SDK's own loggers' ``extra``, else
    from the context the record was written in (our modules log with their own loggers)."""
    found: dict[str, Any] = {}
    for key in ("temporal_workflow", "temporal_activity"):
        value = getattr(record, key, None)
        if isinstance(value, dict):
            found.update({k: v for k, v in value.items() if k in _TEMPORAL_KEYS})
    if found:
        return found
    if activity.in_activity():
        info = activity.info()
        return {
            "workflow_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "activity_type": info.activity_type,
            "attempt": info.attempt,
        }
    if workflow.in_workflow():
        winfo = workflow.info()
        return {"workflow_id": winfo.workflow_id, "run_id": winfo.run_id}
    return {}


_TEMPORAL_KEYS = frozenset({"workflow_id", "run_id", "workflow_type", "activity_type", "attempt"})


def configure(settings: Settings, stream: TextIO | None = None) -> logging.Handler:
    """Send the process's log to ``stream`` (stderr) at ``LEDGER_DELETION_LOG_LEVEL`` in
    ``LEDGER_DELETION_LOG_FORMAT``; replaces the root logger's handlers. Returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for previous in list(root.handlers):
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    chatty_level = logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty_level)
    return handler
