"""docker-compose.yml cannot run here (no Docker engine), so check it is consistent with the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ledger_deletion.settings import POOLS, Settings

ROOT = Path(__file__).resolve().parents[2]
POOL_SERVICES = {
    "workflow": "workflow",
    "pulsar": "pulsar-pool",
    "bookkeeper": "bookkeeper",
    "offload": "offload",
}


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def known_variables() -> set[str]:
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        names.add(f"LEDGER_DELETION_{name.upper()}")
        alias = field.validation_alias
        if alias is not None and hasattr(alias, "choices"):
            names.update(str(c) for c in alias.choices)
    return names


def test_every_pool_has_a_service_running_exactly_that_pool() -> None:
    services = compose()["services"]
    assert set(POOL_SERVICES) == set(POOLS)
    for pool, service in POOL_SERVICES.items():
        assert services[service]["command"] == ["worker", "--pool", pool]


def test_every_project_variable_in_compose_is_read_by_the_settings() -> None:
    known = known_variables()
    for name, service in compose()["services"].items():
        for variable in service.get("environment") or {}:
            if variable.startswith(("LEDGER_DELETION_", "TEMPORAL_")) and name not in (
                "temporal",
                "temporal-ui",
            ):
                assert variable in known, f"{name}: {variable} is not a setting"


def test_dependencies_exist_and_host_ports_do_not_clash() -> None:
    services = compose()["services"]
    host_ports: list[str] = []
    for service in services.values():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services
        host_ports += [str(p).split(":")[0] for p in service.get("ports") or []]
    assert len(host_ports) == len(set(host_ports)), host_ports


def test_pool_services_point_at_compose_services() -> None:
    services = compose()["services"]
    env = services["bookkeeper"]["environment"]
    for variable, service in [
        ("TEMPORAL_ADDRESS", "temporal"),
        ("LEDGER_DELETION_ZOOKEEPER", "zookeeper"),
        ("LEDGER_DELETION_PULSAR_URL", "pulsar"),
        ("LEDGER_DELETION_S3_ENDPOINT", "minio"),
    ]:
        assert service in env[variable] and service in services


# --- observability, scaling and security (issue 3) ---------------------------------------------------


def prometheus() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    return loaded


def test_prometheus_scrapes_every_pool_on_its_metrics_ports() -> None:
    services = compose()["services"]
    settings_ports = set()
    for service in POOL_SERVICES.values():
        env = services[service]["environment"]
        ports = {env["LEDGER_DELETION_METRICS_PORT"], env["LEDGER_DELETION_TEMPORAL_METRICS_PORT"]}
        assert ports == {str(p) for p in services[service]["expose"]}, service
        assert len(ports) == 2, f"{service}: service and SDK metrics must not share a port"
        settings_ports |= ports
    scraped: dict[int, set[str]] = {}
    for job in prometheus()["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            scraped.setdefault(int(sd["port"]), set()).update(sd["names"])
    assert {str(p) for p in scraped} == settings_ports
    for names in scraped.values():
        assert names == set(POOL_SERVICES.values())
    assert "prometheus" in services and "./deploy/prometheus.yml" in services["prometheus"]["volumes"][0]


def test_traces_go_over_otlp_to_jaeger_with_a_service_name_per_pool() -> None:
    services = compose()["services"]
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert any(str(p).endswith(":4317") for p in services["jaeger"]["ports"])
    names = set()
    for pool, service in POOL_SERVICES.items():
        env = services[service]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317"
        assert env["OTEL_SERVICE_NAME"].endswith(pool)
        names.add(env["OTEL_SERVICE_NAME"])
    assert len(names) == len(POOL_SERVICES)


def test_replicas_and_concurrency_are_set_by_environment() -> None:
    services = compose()["services"]
    for pool, service in POOL_SERVICES.items():
        replicas = str(services[service]["deploy"]["replicas"])
        assert replicas.startswith("${") and replicas.endswith(":-1}"), service
        concurrency = services[service]["environment"][f"LEDGER_DELETION_{pool.upper()}_CONCURRENCY"]
        assert str(concurrency).startswith(f"${{LEDGER_DELETION_{pool.upper()}_CONCURRENCY:-"), service


def test_pool_services_have_health_checks_and_start_after_their_dependencies() -> None:
    services = compose()["services"]
    for service in POOL_SERVICES.values():
        assert "9464/metrics" in " ".join(services[service]["healthcheck"]["test"])
        assert {"temporal", "pulsar", "zookeeper", "minio"} <= set(services[service]["depends_on"])
    for name in ("zookeeper", "pulsar", "minio", "postgresql", "temporal", "jaeger"):
        assert "healthcheck" in services[name], name


def test_no_secret_values_are_written_into_the_compose_file() -> None:
    """Tokens, API keys and ZooKeeper digests come from the operator's secret store, not this file."""
    for service in compose()["services"].values():
        env = service.get("environment") or {}
        for name in ("LEDGER_DELETION_PULSAR_TOKEN", "TEMPORAL_API_KEY", "LEDGER_DELETION_ZOOKEEPER_DIGEST"):
            assert name not in env or str(env[name]).startswith("${"), name


def test_the_image_contains_every_package_the_service_imports() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("ledger_deletion", "workflows", "activities", "workers"):
        assert f"COPY {package} {package}" in dockerfile
    assert 'ENTRYPOINT ["ledger-deletion"]' in dockerfile
