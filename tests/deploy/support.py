"""What the deployment tests compare the deployment files with: the settings the service reads, the metrics it
exports, and how compose interpolates a value. Derived from the code and the libraries it uses, never listed
by hand where the code can say it."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices

from ledger_deletion.settings import ENDPOINTS, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# The endpoints the service has no default for: every deployment names each one.
ENDPOINT_FIELDS = ENDPOINTS

# The Temporal SDK's worker metrics the alerts and the dashboard use (Temporal's core SDK names as the
# service's PrometheusConfig exports them: counters with _total, durations in seconds), with their labels:
# the SDK's own and the service's global tag `pool` (ledger_deletion.observability.setup).
_SDK_LABELS = frozenset({"namespace", "service_name", "task_queue", "pool"})
SDK_METRICS: dict[str, frozenset[str]] = {
    "temporal_worker_task_slots_available": _SDK_LABELS | {"worker_type"},
    "temporal_worker_task_slots_used": _SDK_LABELS | {"worker_type"},
    "temporal_num_pollers": _SDK_LABELS | {"poller_type"},
    "temporal_activity_schedule_to_start_latency_bucket": _SDK_LABELS | {"le"},
    "temporal_workflow_task_schedule_to_start_latency_bucket": _SDK_LABELS | {"le"},
}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})

_COMPOSE_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_all_yaml(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def interpolate(value: object) -> str:
    """A compose value as compose sees it with no variables set: ``${X:-default}`` -> ``default``."""
    text = str(value).replace("$$", "\0")
    return _COMPOSE_VARIABLE.sub(lambda m: m.group(2) or "", text).replace("\0", "$")


@cache
def service_variables() -> frozenset[str]:
    """Every environment variable the service reads: its settings (with their aliases), the OpenTelemetry
    SDK's and exporters' ``OTEL_*`` and botocore's ``AWS_*`` (the S3 client's credential chain)."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        names.add(f"LEDGER_DELETION_{name.upper()}")
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice) for choice in alias.choices)
        elif isinstance(alias, str):
            names.add(alias)
    from opentelemetry import environment_variables as otel_api
    from opentelemetry.sdk import environment_variables as otel_sdk

    for module in (otel_api, otel_sdk):
        names.update(v for k, v in vars(module).items() if k.startswith("OTEL_") and isinstance(v, str))
    from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES
    from botocore.credentials import AssumeRoleWithWebIdentityProvider, EnvProvider

    names.update(
        {EnvProvider.ACCESS_KEY, EnvProvider.SECRET_KEY, *EnvProvider.TOKENS, EnvProvider.EXPIRY_TIME}
    )
    names.update(AssumeRoleWithWebIdentityProvider._CONFIG_TO_ENV_VAR.values())  # IRSA's role and token
    for spec in BOTOCORE_DEFAUT_SESSION_VARIABLES.values():
        env = spec[1]
        names.update([env] if isinstance(env, str) else env or [])
    return frozenset(names)


def setting_of(variable: str) -> str | None:
    """The Settings field an environment variable sets, if any."""
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        aliases = {str(c) for c in alias.choices} if isinstance(alias, AliasChoices) else set()
        if variable == f"LEDGER_DELETION_{name.upper()}" or variable in aliases:
            return name
    return None


def settings_from(env: dict[str, str]) -> Settings:
    """The settings a process with exactly this environment reads (nothing from the test's own)."""
    values: dict[str, Any] = {}
    for variable, value in env.items():
        field = setting_of(variable)
        if field is not None:
            values[field] = value
    return Settings.model_validate(values)


@cache
def service_metrics() -> dict[str, frozenset[str]]:
    """The Prometheus names of the service's own instruments, with their labels (``INSTRUMENTS``), as the
    OpenTelemetry Prometheus exporter names them: counters end in _total, the histogram in its unit."""
    from ledger_deletion.observability.metrics import INSTRUMENTS

    names: dict[str, frozenset[str]] = {}
    for instrument in INSTRUMENTS:
        labels = frozenset(instrument.labels)
        if instrument.kind == "counter":
            names[f"{instrument.name}_total"] = labels
        elif instrument.kind == "histogram":
            assert instrument.unit == "s", instrument
            for part, extra in (("bucket", {"le"}), ("sum", set()), ("count", set())):
                names[f"{instrument.name}_seconds_{part}"] = labels | extra
        else:
            names[instrument.name] = labels
    return names


_METRIC = re.compile(r"\b((?:ledger_deletion|temporal)_[a-z0-9_]+)\b")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def promql_metrics(expr: str) -> set[str]:
    """The service's and the SDK's metric names a PromQL expression reads."""
    return set(_METRIC.findall(expr))


def promql_labels(expr: str) -> set[str]:
    """The label names a PromQL expression matches on or groups by (not those label_replace writes)."""
    without_writes = re.sub(r"label_replace\(", "(", expr)
    without_writes = re.sub(r'\),\s*"[a-z_]+",\s*"[^"]*",\s*"[^"]*",\s*"[^"]*"\)', "))", without_writes)
    grouped = {label.strip() for group in _GROUPING.findall(without_writes) for label in group.split(",")}
    return {label for label in grouped if label} | set(_MATCHER.findall(without_writes))
