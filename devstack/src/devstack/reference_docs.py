"""The reference pages generated from the code: docs/settings.md from the settings model
(``ledger_deletion/settings.py``) and docs/metrics.md from the instrument table
(``ledger_deletion/observability/metrics.py``).

``python -m devstack.reference_docs`` writes both; ``--check`` only says which differ (exit code 1).
``tests/unit/test_reference_docs.py`` fails when a committed page differs from what this generates, so a
setting or a metric cannot change without its reference. The product is only read here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ledger_deletion.contracts import Outcome
from ledger_deletion.observability.metrics import INSTRUMENTS, STEP_BUCKETS, Instrument
from ledger_deletion.settings import REQUIRED, RETRIED_STEPS, TIMED_STEPS, Settings, StepRetry, env_name

ROOT = Path(__file__).resolve().parents[3]  # devstack/src/devstack/ -> the repository
COMMAND = "python -m devstack.reference_docs"

# Headings of the settings page, each above the field it starts with (in the model's order).
SETTINGS_SECTIONS = {
    "temporal_address": "Temporal",
    "pulsar_url": "Pulsar",
    "zookeeper": "BookKeeper and Pulsar metadata (ZooKeeper)",
    "s3_endpoint": "Tiered storage (S3-compatible)",
    "max_attempts": "Retries, timeouts and grace",
    "workflow_concurrency": "Pools",
    "metrics_port": "Observability",
    "watch_delay_seconds": "Watcher (`ledger-deletion watch`)",
}


def pages() -> dict[str, str]:
    """Each generated page by its path in the repository."""
    return {"docs/settings.md": settings_page(), "docs/metrics.md": metrics_page()}


# --- settings ----------------------------------------------------------------------------------------------


def settings_page() -> str:
    fields = Settings.model_fields
    missing = set(SETTINGS_SECTIONS) - set(fields)
    if missing:
        raise ValueError(f"SETTINGS_SECTIONS names fields the model does not have: {sorted(missing)}")
    lines = [
        _generated_note("ledger_deletion/settings.py", "the field descriptions there"),
        "# Settings",
        "",
        "Every command reads its settings once from the environment when it starts, and refuses to start on",
        "a value it cannot use, naming the variable. Endpoints have no default: a command refuses to start",
        "naming each endpoint it needs that is unset (a pool needs Temporal and the systems it talks to).",
        '`eval "$(ledger-deletion stack env)"` sets them all for the embedded stack.',
    ]
    rows: list[str] = []
    for name, info in fields.items():
        if name in SETTINGS_SECTIONS:
            if rows:
                lines += _table(rows)
                rows = []
            lines += ["", f"## {SETTINGS_SECTIONS[name]}", ""]
        rows.append(_setting_row(name, info))
    lines += _table(rows)
    lines += [
        "",
        f"## `{env_name('step_retry')}` entries",
        "",
        "A JSON object from step name to an override; what an entry leaves out comes from the settings",
        "above.",
        f"Steps that take a retry override: {_steps(RETRIED_STEPS)}.",
        "",
        f"Steps that take a timeout override (`{env_name('step_timeout_seconds')}`): {_steps(TIMED_STEPS)}.",
        "",
        "| key | description |",
        "|---|---|",
        *(f"| `{key}` | {_cell(info.description or '')} |" for key, info in StepRetry.model_fields.items()),
        "",
        "## Read by the libraries",
        "",
        "- Traces: the standard OpenTelemetry variables, `OTEL_EXPORTER_OTLP_ENDPOINT` (or",
        "  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_EXPORTER_OTLP_PROTOCOL`,",
        "  `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`; `OTEL_TRACES_EXPORTER=none` turns export off.",
        "- S3 credentials: the standard AWS chain (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, a shared",
        "  profile, or an instance or IRSA role).",
    ]
    return "\n".join(lines) + "\n"


def _setting_row(name: str, info: FieldInfo) -> str:
    variable = f"`{env_name(name)}`"
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        others = [str(choice) for choice in alias.choices[1:]]
        variable += "".join(f" (or `{other}`)" for other in others)
    description = info.description or ""
    if not description:
        raise ValueError(f"setting {name} has no description")
    if _is_secret(info):
        description += " Secret: never logged."
    return f"| {variable} | {_default(name, info)} | {_bounds(info.metadata)} | {_cell(description)} |"


def _default(name: str, info: FieldInfo) -> str:
    if name in REQUIRED:
        return "required"
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]  # settings' factories take no argument
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "unset"
    if value == "" or value == {}:
        return "empty" if value == "" else "`{}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def _bounds(metadata: Iterable[object]) -> str:
    """The field's numeric constraints, e.g. ``≥ 1``."""
    parts = []
    for item in metadata:
        if isinstance(item, Ge):
            parts.append(f"≥ {item.ge}")
        elif isinstance(item, Gt):
            parts.append(f"> {item.gt}")
        elif isinstance(item, Le):
            parts.append(f"≤ {item.le}")
        elif isinstance(item, Lt):
            parts.append(f"< {item.lt}")
    return ", ".join(parts)


def _is_secret(info: FieldInfo) -> bool:
    return SecretStr in getattr(info.annotation, "__args__", (info.annotation,))


def _steps(steps: Iterable[str]) -> str:
    return ", ".join(f"`{step}`" for step in sorted(steps))


# --- metrics -----------------------------------------------------------------------------------------------


def metrics_page() -> str:
    lines = [
        _generated_note(
            "ledger_deletion/observability/metrics.py", "the instrument table (INSTRUMENTS) there"
        ),
        "# Metrics",
        "",
        f"Each worker process serves its metrics for Prometheus on `{env_name('metrics_port')}`, and the",
        f"Temporal SDK's own metrics on `{env_name('temporal_metrics_port')}`, both bound to",
        f"`{env_name('metrics_host')}` ([settings](settings.md)). The service's metrics, named as Prometheus",
        "scrapes them:",
        "",
        "| metric | type | labels | description |",
        "|---|---|---|---|",
    ]
    names = prometheus_names(INSTRUMENTS)
    for instrument in INSTRUMENTS:
        labels = ", ".join(f"`{label}`" for label in instrument.labels) or "none"
        lines.append(
            f"| `{names[instrument.name]}` | {instrument.kind} | {labels} | {_cell(instrument.description)} |"
        )
    buckets = ", ".join(f"{bound:g}" for bound in STEP_BUCKETS)
    outcomes = ", ".join(f"`{outcome.value}`" for outcome in Outcome)
    lines += [
        "",
        f"Histogram buckets, seconds: {buckets}.",
        "",
        "## Labels",
        "",
        "| label | value |",
        "|---|---|",
        "| `pool` | the pool of the task queue the work ran on: `workflow`, `pulsar`, `bookkeeper`,"
        " `offload`; `all` with colocated pools |",
        "| `tenant`, `component` | the tenant and ledger component of the request the work is for (`unknown`"
        " before a payload decodes) |",
        f"| `outcome` | of a request: {outcomes}; of a step attempt: `ok`, `error` |",
        "| `reason` | the `SKIPPED_*` outcome |",
        "| `step` | the step: an activity name, or where the ingest dead-lettered a message (`decode`,"
        " `decrypt`, `tenant`, `start`, `ingest`; `join` past a run's limit of joined requests) |",
        "| `error` | the error type of a failed delete attempt |",
        "| `namespace` | the request's `tenant/namespace` (reclaimed bytes: a deployment's namespaces are few"
        " and known, its topics and ledgers are not) |",
        "",
        "Ledger ids and topics are never labels (unbounded); they are span attributes.",
    ]
    return "\n".join(lines) + "\n"


def prometheus_names(instruments: Iterable[Instrument]) -> dict[str, str]:
    """The name Prometheus scrapes for each instrument, as the service's exporter writes it."""
    names = {}
    for instrument in instruments:
        registry = CollectorRegistry()
        reader = PrometheusMetricReader(disable_target_info=True, registry=registry)
        provider = MeterProvider(metric_readers=[reader])
        _record_once(provider, instrument)
        exposition = generate_latest(registry).decode()
        provider.shutdown()
        [name] = [line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")]
        names[instrument.name] = name
    return names


def _record_once(provider: MeterProvider, instrument: Instrument) -> None:
    meter = provider.get_meter("reference")
    attributes = {label: "x" for label in instrument.labels}
    if instrument.kind == "counter":
        meter.create_counter(instrument.name, instrument.unit, instrument.description).add(1, attributes)
    elif instrument.kind == "histogram":
        meter.create_histogram(instrument.name, instrument.unit, instrument.description).record(1, attributes)
    else:
        observe: Callable[[CallbackOptions], Iterable[Observation]] = lambda _: [Observation(1, attributes)]  # noqa: E731
        meter.create_observable_gauge(instrument.name, [observe], instrument.unit, instrument.description)


# --- markdown ----------------------------------------------------------------------------------------------


def _generated_note(source: str, what: str) -> str:
    return f"<!-- Generated from {source} by `{COMMAND}`: edit {what}, then run it again. -->\n"


def _table(rows: list[str]) -> list[str]:
    return ["| variable | default | range | description |", "|---|---|---|---|", *rows]


def _cell(text: str) -> str:
    """Text for a table cell: a ``|`` would end the cell, a ``<name>`` would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "\\<")


# --- command -----------------------------------------------------------------------------------------------


def stale(root: Path = ROOT) -> list[str]:
    """The generated pages whose file under ``root`` differs from what the code generates now."""
    return [
        path
        for path, text in pages().items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.check:
        outdated = stale(args.root)
        for path in outdated:
            print(f"{path} is stale: run {COMMAND}", file=sys.stderr)
        return 1 if outdated else 0
    for path, text in pages().items():
        target = args.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
