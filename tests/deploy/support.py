"""What the deployment tests compare the deployment files with: the settings the service reads, the metrics it
exports, and how compose interpolates a value. Derived from the code and the libraries it uses, never listed
by hand where the code can say it."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices

from ledger_deletion.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# The endpoints the service has no default for: every deployment names each one.
ENDPOINT_FIELDS = ("temporal_address", "pulsar_url", "pulsar_admin_url", "zookeeper", "s3_endpoint")

# The Temporal SDK's worker metrics the alerts and the dashboard use (Temporal's core SDK names, exported by
# the service's PrometheusConfig: counters with _total, durations in seconds).
SDK_METRICS = frozenset(
    {
        "temporal_worker_task_slots_available",
        "temporal_worker_task_slots_used",
        "temporal_num_pollers",
        "temporal_activity_schedule_to_start_latency_bucket",
        "temporal_workflow_task_schedule_to_start_latency_bucket",
        "temporal_activity_execution_latency_bucket",
        "temporal_workflow_task_execution_latency_bucket",
    }
)

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
def service_metrics() -> frozenset[str]:
    """The Prometheus names of the service's own instruments (ledger_deletion/observability/metrics.py), as
    the OpenTelemetry Prometheus exporter names them: counters end in _total, the histogram in seconds."""
    source = (ROOT / "ledger_deletion" / "observability" / "metrics.py").read_text()
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        kind = node.func.attr
        if not (kind.startswith("create_") and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        name = str(node.args[0].value)
        if kind == "create_counter":
            names.add(f"{name}_total")
        elif kind == "create_histogram":
            names.update(f"{name}_seconds_{part}" for part in ("bucket", "sum", "count"))
        else:
            names.add(name)
    return frozenset(names)


_METRIC = re.compile(r"\b((?:ledger_deletion|temporal)_[a-z0-9_]+)\b")


def promql_metrics(expr: str) -> set[str]:
    """The service's and the SDK's metric names a PromQL expression reads."""
    return set(_METRIC.findall(expr))
