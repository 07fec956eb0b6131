"""The alert rules, the compose Prometheus config and the Grafana dashboard, checked by Prometheus' promtool:
the rules load, fire on the series that should trigger them and stay quiet otherwise (alerts.test.yml), the
dashboard's queries parse, and every metric either reads is one the service or the Temporal SDK exports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.support import (
    DEPLOY,
    SDK_METRICS,
    TARGET_LABELS,
    load_yaml,
    promql_labels,
    promql_metrics,
    service_metrics,
)

PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ledger-deletion.json"


def promtool_run(promtool: str, *args: str, cwd: Path = PROMETHEUS) -> str:
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(PROMETHEUS / "alerts.yml")["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_alert_rules_load(promtool: str) -> None:
    out = promtool_run(promtool, "check", "rules", "alerts.yml")
    assert f"SUCCESS: {len(alert_rules())} rules found" in out


def test_each_alert_fires_when_it_should_and_only_then(promtool: str) -> None:
    tested = {
        case["alertname"]
        for test in load_yaml(PROMETHEUS / "alerts.test.yml")["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {rule["alert"] for rule in alert_rules()}, "every alert is shown firing"
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", "alerts.test.yml")


def test_the_compose_prometheus_config_is_valid_and_loads_the_rules(promtool: str) -> None:
    out = promtool_run(promtool, "check", "config", "prometheus.yml")
    assert "SUCCESS: 1 rule files found" in out


def test_alerts_and_dashboard_read_only_exported_metrics_and_their_labels() -> None:
    exported = {**service_metrics(), **SDK_METRICS}
    queries = [rule["expr"] for rule in alert_rules()] + dashboard_queries()
    for expr in queries:
        metrics = promql_metrics(expr)
        unknown = metrics - set(exported)
        assert not unknown, f"{expr!r} reads metrics nobody exports: {unknown}"
        labels = TARGET_LABELS.union(*(exported[m] for m in metrics))
        assert promql_labels(expr) <= labels, f"{expr!r} uses labels its metrics lack"
    read = set().union(*(promql_metrics(q) for q in queries))
    # Every service metric is on the dashboard (the histogram through its buckets and counts).
    assert set(service_metrics()) - read <= {"ledger_deletion_step_duration_seconds_sum"}


def test_the_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    """promtool parses PromQL in rule files: each query becomes a recording rule, Grafana's $__rate_interval
    a fixed range."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": q.replace("$__rate_interval", "5m")}
                    for i, q in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    out = promtool_run(promtool, "check", "rules", "dashboard.yml", cwd=tmp_path)
    assert f"SUCCESS: {len(dashboard_queries())} rules found" in out


def test_the_dashboard_panels_use_the_chosen_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
