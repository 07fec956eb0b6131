"""docker-compose.yml cannot run here (no Docker engine): check it offline, against the compose
specification's schema, against itself (every reference resolves) and against the code it configures (every
variable is one the service reads, every endpoint names a service listening there, every pool runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import uuid
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from ledger_deletion.connections import DELETING_LOGINS
from ledger_deletion.settings import POOL_DELETES, POOLS, WATCH_ENDPOINTS, env_name
from tests.deploy.support import (
    DEPLOY,
    ENDPOINT_FIELDS,
    ROOT,
    interpolate,
    load_yaml,
    service_variables,
    settings_from,
)

POOL_SERVICES = {pool: f"{pool}-pool" for pool in POOLS}
WATCH = "watch"  # ``ledger-deletion watch``: service metrics only, no Temporal SDK metrics port
SERVICE_IMAGE = "ledger-deletion"  # built from the Dockerfile


@cache
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(ROOT / "docker-compose.yml")
    return loaded


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def ours() -> dict[str, dict[str, Any]]:
    """The services that run the project's image: setup, the pools and the watcher."""
    return {n: s for n, s in services().items() if s["image"].split(":")[0] == SERVICE_IMAGE}


def env(service: dict[str, Any]) -> dict[str, str]:
    return {k: interpolate(v) for k, v in (service.get("environment") or {}).items()}


def one_shots() -> set[str]:
    """Services others wait for to finish: they run once and exit."""
    return {
        name
        for service in services().values()
        for name, dep in (service.get("depends_on") or {}).items()
        if dep["condition"] == "service_completed_successfully"
    }


def container_ports(service: dict[str, Any]) -> set[int]:
    published = {int(str(p).split(":")[-1].split("/")[0]) for p in service.get("ports") or []}
    return published | {int(p) for p in service.get("expose") or []}


# --- the file itself ----------------------------------------------------------------------------------------


def test_the_file_is_valid_against_the_compose_specification() -> None:
    schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    jsonschema.validate(compose(), json.loads(schema_file.read_text()))


def test_every_image_is_pinned_to_a_version() -> None:
    for name, service in services().items():
        repository, _, tag = service["image"].rpartition(":")
        assert repository and "/" not in tag, f"{name}: {service['image']} has no tag"
        # A release, not a moving tag: x.y[.z], or MinIO's RELEASE.<timestamp>.
        assert re.search(r"\d+\.\d+|^RELEASE\.\d{4}-\d\d-\d\dT", tag), f"{name}: {tag} is not a version"


def test_the_service_image_is_built_here_and_tagged_with_the_project_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, service in ours().items():
        assert service["build"] == ".", name
        assert service["image"] == f"{SERVICE_IMAGE}:{version}", name


def test_every_dependency_exists_and_its_condition_can_be_met() -> None:
    all_services = services()
    for name, service in all_services.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            assert dependency in all_services, f"{name} depends on unknown {dependency}"
            target = all_services[dependency]
            if spec["condition"] == "service_healthy":
                assert "test" in target.get("healthcheck", {}), (
                    f"{name} waits for {dependency}'s health check"
                )
            if spec["condition"] == "service_completed_successfully":
                # A job that restarted itself for ever would never complete.
                assert target.get("restart", "no") in ("no", "on-failure"), dependency


def test_every_long_running_service_has_a_health_check() -> None:
    for name, service in services().items():
        if name in one_shots():
            continue
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"
        assert {"interval", "timeout", "retries"} <= set(check), name


def test_volumes_and_mounted_files_exist() -> None:
    declared = set(compose()["volumes"])
    used = set()
    for name, service in services().items():
        for mount in service.get("volumes") or []:
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"
                used.add(source)
    assert used == declared, f"declared, unused: {declared - used}"


def test_stateful_services_keep_their_data_in_volumes() -> None:
    for name, path in [
        ("zookeeper", "/pulsar/data"),
        ("bookie", "/pulsar/data"),
        ("minio", "/data"),
        ("postgresql", "/var/lib/postgresql/data"),
        ("prometheus", "/prometheus"),
        ("grafana", "/var/lib/grafana"),
    ]:
        targets = {m.split(":")[1] for m in services()[name]["volumes"]}
        assert path in targets, name


def test_host_ports_do_not_clash() -> None:
    host_ports = [str(p).split(":")[0] for s in services().values() for p in s.get("ports") or []]
    assert len(host_ports) == len(set(host_ports)), host_ports


def test_shell_scripts_parse() -> None:
    for script in sorted((DEPLOY / "compose").glob("*.sh")):
        subprocess.run(["sh", "-n", str(script)], check=True)


# --- the service ----------------------------------------------------------------------------------------


def test_every_pool_has_a_service_running_exactly_that_pool() -> None:
    for pool, name in POOL_SERVICES.items():
        assert services()[name]["command"] == ["worker", "--pool", pool]
    assert services()["setup"]["command"] == ["setup"]
    assert services()[WATCH]["command"] == ["watch"]
    assert set(ours()) == {"setup", WATCH, *POOL_SERVICES.values()}


def test_every_variable_the_service_containers_set_is_one_the_service_reads() -> None:
    known = service_variables()
    for name, service in ours().items():
        unknown = sorted(set(env(service)) - known)
        assert not unknown, f"{name} sets variables the service never reads: {unknown}"


def test_every_endpoint_is_set_and_names_a_service_listening_there() -> None:
    for name, service in ours().items():
        settings = settings_from(env(service))
        for field in ENDPOINT_FIELDS:
            value = getattr(settings, field)
            assert value, f"{name}: {field} is not set (the service has no default endpoints)"
            # "host:port" or a URL; ZooKeeper's may carry a chroot.
            parts = urlsplit(value if "://" in value else f"tcp://{value}")
            assert parts.hostname in services(), f"{name}: {field}={value} names no compose service"
            assert parts.port in container_ports(services()[parts.hostname]), f"{name}: {field}={value}"


def test_pools_start_after_setup_and_everything_they_talk_to() -> None:
    for name in POOL_SERVICES.values():
        depends = services()[name]["depends_on"]
        assert depends["setup"]["condition"] == "service_completed_successfully", name
        for dependency in ("broker", "zookeeper", "jaeger"):
            assert depends[dependency]["condition"] == "service_healthy", (name, dependency)
        assert depends["minio-init"]["condition"] == "service_completed_successfully", name
    # setup registers the search attributes in a namespace that exists, on a server with its schema.
    chain = [
        ("setup", "temporal-namespace"),
        ("temporal-namespace", "temporal"),
        ("temporal", "temporal-schema"),
    ]
    for service, dependency in chain:
        assert dependency in services()[service]["depends_on"], (service, dependency)


def test_metrics_are_exposed_probed_and_scraped_on_two_ports() -> None:
    prometheus = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    scraped: dict[int, set[str]] = {}
    for job in prometheus["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            scraped.setdefault(int(sd["port"]), set()).update(sd["names"])
    for name in POOL_SERVICES.values():
        service = services()[name]
        settings = settings_from(env(service))
        ports = {settings.metrics_port, settings.temporal_metrics_port}
        assert len(ports) == 2 and 0 not in ports, f"{name}: service and SDK metrics need a port each"
        assert {int(p) for p in service["expose"]} == ports, name
        assert f":{settings.metrics_port}/metrics" in " ".join(service["healthcheck"]["test"]), name
        for port in ports:
            assert name in scraped.get(port, set()), f"Prometheus does not scrape {name}:{port}"
    watch = services()[WATCH]
    settings = settings_from(env(watch))
    assert {int(p) for p in watch["expose"]} == {settings.metrics_port}
    assert f":{settings.metrics_port}/metrics" in " ".join(watch["healthcheck"]["test"])
    assert scraped[settings.metrics_port] == {*POOL_SERVICES.values(), WATCH}
    assert set().union(*scraped.values()) == {*POOL_SERVICES.values(), WATCH}


def test_traces_go_over_otlp_to_jaeger_with_a_service_name_per_pool() -> None:
    jaeger = services()["jaeger"]
    names = set()
    for pool, name in POOL_SERVICES.items():
        variables = env(services()[name])
        endpoint = urlsplit(variables["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint.hostname == "jaeger" and endpoint.port in container_ports(jaeger)
        assert variables["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc" and endpoint.port == 4317
        assert variables["OTEL_SERVICE_NAME"] == f"ledger-deletion-{pool}"
        names.add(variables["OTEL_SERVICE_NAME"])
    assert len(names) == len(POOL_SERVICES)
    assert jaeger["image"].startswith("jaegertracing/jaeger:2."), "Jaeger v2 (v1 is past its end of life)"


def test_replicas_and_concurrency_are_set_by_environment() -> None:
    for pool, name in POOL_SERVICES.items():
        replicas = str(services()[name]["deploy"]["replicas"])
        assert re.fullmatch(r"\$\{[A-Z]+_REPLICAS:-1\}", replicas), name
        concurrency = services()[name]["environment"][f"LEDGER_DELETION_{pool.upper()}_CONCURRENCY"]
        assert str(concurrency).startswith(f"${{LEDGER_DELETION_{pool.upper()}_CONCURRENCY:-"), name


def test_no_secret_values_are_written_into_the_compose_file() -> None:
    """Tokens, API keys and ZooKeeper digests come from the operator's secret store, not this file."""
    for name in ("LEDGER_DELETION_PULSAR_TOKEN", "TEMPORAL_API_KEY", "LEDGER_DELETION_ZOOKEEPER_DIGEST"):
        for service in services().values():
            value = (service.get("environment") or {}).get(name)
            assert value is None or str(value).startswith("${"), name


def test_only_the_bookkeeper_pool_may_be_given_the_deleting_zookeeper_login() -> None:
    """docs/security.md: a service that deletes no ledger refuses to start with it, so none is given it."""
    deleting = {env_name(name) for name in DELETING_LOGINS}
    allowed = {POOL_SERVICES[pool] for pool, stores in POOL_DELETES.items() if "zookeeper" in stores}
    assert allowed == {POOL_SERVICES["bookkeeper"]}
    for name, service in ours().items():
        if name not in allowed:
            assert not set(service.get("environment") or {}) & deleting, name


# --- the Pulsar cluster and the store the service shares with it ------------------------------------------


def test_the_broker_offloads_to_the_store_and_bucket_the_service_deletes_from() -> None:
    broker = env(services()["broker"])
    for name in ours():
        settings = settings_from(env(services()[name]))
        assert broker["managedLedgerOffloadDriver"] == "aws-s3"
        assert broker["s3ManagedLedgerOffloadBucket"] == settings.offload_bucket, name
        # The service refuses an offload whose driver metadata names another endpoint or region.
        assert broker["s3ManagedLedgerOffloadServiceEndpoint"] == settings.s3_endpoint, name
        assert broker["s3ManagedLedgerOffloadRegion"] == settings.s3_region, name
    assert services()["broker"]["image"].startswith("apachepulsar/pulsar-all:"), "the offloaders"
    init = " ".join(services()["minio-init"]["command"])
    assert f"local/{broker['s3ManagedLedgerOffloadBucket']}" in init
    # One set of S3 credentials: MinIO's root user.
    minio = env(services()["minio"])
    for name in ("broker", *ours()):
        variables = env(services()[name])
        assert variables["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"], name
        assert variables["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"], name


def test_pulsar_keeps_its_metadata_and_ledgers_in_the_zookeeper_the_service_reads() -> None:
    broker, bookie = env(services()["broker"]), env(services()["bookie"])
    init = services()["pulsar-init"]["command"][-1]
    for name in ours():
        settings = settings_from(env(services()[name]))
        assert broker["metadataStoreUrl"] == f"zk:{settings.pulsar_metadata_hosts}", name
        # BookKeeper's metadata-store driver keeps its ledgers under /ledgers of that store.
        assert bookie["metadataServiceUri"] == f"metadata-store:zk:{settings.zookeeper}", name
        assert settings.bk_ledgers_root == "/ledgers", name
        assert f"--zookeeper {settings.zookeeper}" in init, name
    cluster = broker["clusterName"]
    assert bookie["clusterName"] == cluster and f"--cluster {cluster}" in init
    for name in ours():
        assert settings_from(env(services()[name])).pulsar_cluster == cluster, name
    assert f"/admin/clusters/{cluster}" in init, "a restart must not initialise the cluster again"
    # Not standalone: standalone Pulsar with its own ZooKeeper ignores the configured metadata store.
    assert not any("standalone" in json.dumps(s.get("command", "")) for s in services().values())


def test_temporal_runs_on_postgresql_with_its_schema_set_up_by_admin_tools() -> None:
    temporal = services()["temporal"]
    assert temporal["image"].startswith("temporalio/server:")
    assert not any(s["image"].startswith("temporalio/auto-setup") for s in services().values())
    version = temporal["image"].split(":")[1]
    for job in ("temporal-schema", "temporal-namespace"):
        assert services()[job]["image"] == f"temporalio/admin-tools:{version}", job
    schema = (DEPLOY / "compose" / "temporal-schema.sh").read_text()
    assert "setup-schema -v 0.0" in schema and "update-schema" in schema
    # The databases exist before the schema job: the visibility one from the init script on a fresh volume.
    assert "CREATE DATABASE temporal_visibility" in (DEPLOY / "compose" / "postgres-init.sql").read_text()
    assert env(services()["postgresql"])["POSTGRES_USER"] == env(temporal)["POSTGRES_USER"] == "temporal"


def test_grafana_is_provisioned_with_the_prometheus_datasource_and_the_dashboard() -> None:
    grafana = services()["grafana"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"]}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    datasource = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"][0]
    assert urlsplit(datasource["url"]).hostname == "prometheus" and datasource["type"] == "prometheus"
    provider = load_yaml(provisioning / "dashboards" / "ledger-deletion.yml")["providers"][0]
    dashboards = ROOT / mounts[provider["options"]["path"]]
    assert json.loads((dashboards / "ledger-deletion.json").read_text())["uid"] == "ledger-deletion"


@pytest.mark.parametrize("job", ["temporal-schema", "temporal-namespace"])
def test_one_shot_jobs_run_their_mounted_script(job: str) -> None:
    service = services()[job]
    script = service["command"][-1]
    assert any(m.endswith(f":{script}:ro") for m in service["volumes"]), job


@pytest.mark.stack
def test_the_namespace_job_creates_the_namespace_once(stack: Any) -> None:
    """The job's script with the Temporal CLI (the one admin-tools ships) against a real Temporal server."""
    temporal = Path(sys.executable).parent / "temporal"
    namespace = f"compose-test-{uuid.uuid4().hex[:8]}"
    job_env = {
        **os.environ,
        "PATH": f"{temporal.parent}:{os.environ['PATH']}",
        "TEMPORAL_ADDRESS": stack.temporal_address,
        "NAMESPACE": namespace,
        "RETENTION": "24h",
    }
    script = str(DEPLOY / "compose" / "temporal-namespace.sh")
    try:
        first = subprocess.run(["sh", script], env=job_env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        again = subprocess.run(["sh", script], env=job_env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and f"namespace {namespace} exists" in again.stdout, again.stderr
        described = subprocess.run(
            [
                str(temporal),
                "operator",
                "namespace",
                "describe",
                "--namespace",
                namespace,
                "--address",
                stack.temporal_address,
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        retention = json.loads(described.stdout)["config"]["workflowExecutionRetentionTtl"]
        assert retention in ("86400s", "24h0m0s"), retention
    finally:
        subprocess.run(
            [
                str(temporal),
                "operator",
                "namespace",
                "delete",
                "--namespace",
                namespace,
                "--yes",
                "--address",
                stack.temporal_address,
            ],
            capture_output=True,
        )


def test_the_watcher_starts_after_setup_with_what_it_reads_and_traces_as_itself() -> None:
    watch = services()[WATCH]
    for dependency in ("broker", "zookeeper"):
        assert watch["depends_on"][dependency]["condition"] == "service_healthy", dependency
    assert watch["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    variables = env(watch)
    assert variables["OTEL_SERVICE_NAME"] == "ledger-deletion-watch"
    assert str(watch["deploy"]["replicas"]) == "${WATCH_REPLICAS:-1}"
    # What it needs set (WATCH_ENDPOINTS) is set: Temporal, ZooKeeper and the deletion topic's broker.
    settings = settings_from(variables)
    assert all(getattr(settings, field) for field in WATCH_ENDPOINTS)


def test_the_pulsar_pool_keeps_an_audit_log_in_a_bucket_minio_init_creates() -> None:
    """Without LEDGER_DELETION_AUDIT_BUCKET the pulsar pool acks decisions with no audit record (a warning at
    start): the trial records them, in a bucket that exists before the pool starts."""
    settings = settings_from(env(services()["pulsar-pool"]))
    assert settings.audit_bucket
    assert f"local/{settings.audit_bucket}" in " ".join(services()["minio-init"]["command"])
