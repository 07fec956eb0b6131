"""The watcher beside the pools on Kubernetes: two replicas (one watches, one stands by), probed and scraped
on its metrics port, with the settings every process reads and the token it publishes with."""

from __future__ import annotations

import pytest

from ledger_deletion.settings import WATCH_ENDPOINTS
from tests.deploy.test_kubernetes import OVERLAYS, named, of_kind, pod_spec, settings

WATCH = "ledger-deletion-watch"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_watcher_runs_twice_with_probes_on_its_metrics_port(overlay: str) -> None:
    deployment = named(overlay, "Deployment", WATCH)
    assert deployment["spec"]["replicas"] == 2
    (container,) = pod_spec(deployment)["containers"]
    assert container["args"] == ["watch"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": settings(overlay).metrics_port}  # no Temporal SDK port: it serves none
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    sources = {s.get("configMapRef", s.get("secretRef", {})).get("name", "") for s in container["envFrom"]}
    assert any(name.startswith("ledger-deletion-settings") for name in sources)
    env = {e["name"]: e for e in container["env"]}
    assert env["LEDGER_DELETION_PULSAR_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert env["OTEL_SERVICE_NAME"]["value"] == "ledger-deletion-watch"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_watcher_has_what_it_connects_to_and_a_disruption_budget(overlay: str) -> None:
    configured = settings(overlay)
    assert all(getattr(configured, field) for field in WATCH_ENDPOINTS)
    labels = named(overlay, "Deployment", WATCH)["spec"]["selector"]["matchLabels"]
    covering = [
        b for b in of_kind(overlay, "PodDisruptionBudget") if b["spec"]["selector"]["matchLabels"] == labels
    ]
    assert len(covering) == 1 and covering[0]["spec"]["maxUnavailable"] == 1
    policies = of_kind(overlay, "NetworkPolicy")
    assert any(
        set(p["spec"]["podSelector"]["matchLabels"].items()) <= set(labels.items()) for p in policies
    ), "the NetworkPolicy covers the watcher"


def test_production_logs_are_json() -> None:
    assert settings("production").log_format == "json"
