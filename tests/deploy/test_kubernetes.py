"""deploy/kubernetes rendered by `kubectl kustomize` and checked offline: built-in kinds against Kubernetes'
own schemas (kubernetes-validate, strict), KEDA's and prometheus-operator's resources against models generated
from their CRDs (cloudcoil), Spark's settings against the keys Spark defines, and everything against the code
it configures and the apache/pulsar-helm-chart release it runs beside."""

from __future__ import annotations

import base64
import copy
import re
import shutil
import subprocess
import tomllib
import zipfile
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from ledger_deletion.connections import DELETING_LOGINS, LOGINS
from ledger_deletion.settings import POOL_DELETES, POOLS, Settings, env_name
from tests.deploy.support import (
    DEPLOY,
    ENDPOINT_FIELDS,
    ROOT,
    load_all_yaml,
    load_yaml,
    service_variables,
    settings_from,
)

KUBERNETES = DEPLOY / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBERNETES / "overlays").iterdir())
# The Kubernetes version kubectl here speaks, and the newest kubernetes-validate has schemas for.
KUBERNETES_VERSIONS = ["1.32", latest_version()]
CRD_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
# KEDA's temporal scaler's trigger parameters (kedacore/keda v2.18.0 pkg/scalers/temporal_scaler.go,
# temporalMetadata's triggerMetadata fields; endpointFromEnv is endpoint's resolvedEnv form): the CRD leaves
# trigger metadata a free map, so its keys are checked against the scaler's source.
TEMPORAL_SCALER_PARAMETERS = {
    "endpoint",
    "endpointFromEnv",
    "namespace",
    "activationTargetQueueSize",
    "targetQueueSize",
    "taskQueue",
    "queueTypes",
    "buildId",
    "selectAllActive",
    "selectUnversioned",
    "apiKeyFromEnv",
    "minConnectTimeout",
    "unsafeSsl",
    "tlsServerName",
}
# KEDA's pulsar scaler's (kedacore/keda v2.18.0 pkg/scalers/pulsar_scaler.go, pulsarMetadata; authModes from
# pkg/scalers/authentication).
PULSAR_SCALER_PARAMETERS = {
    "adminURL",
    "topic",
    "subscription",
    "isPartitionedTopic",
    "msgBacklogThreshold",
    "activationMsgBacklogThreshold",
    "authModes",
    "tls",
}
# Set on the Spark driver only, read by pyspark's launcher and Kubernetes' $(VAR) expansion, not the service.
SPARK_DRIVER_VARIABLES = {"PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "POD_NAME", "POD_IP", "POD_NAMESPACE"}


@cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with kustomize) is needed to render deploy/kubernetes"
    done = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return tuple(load_all_yaml(done.stdout))


def of_kind(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [d for d in render(overlay) if d["kind"] == kind]


def named(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in of_kind(overlay, kind) if d["metadata"]["name"] == name]
    return found


def pod_spec(resource: dict[str, Any]) -> dict[str, Any]:
    spec = resource["spec"]
    if resource["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    result: dict[str, Any] = spec["template"]["spec"]
    return result


def workloads(overlay: str) -> list[dict[str, Any]]:
    return [d for d in render(overlay) if d["kind"] in ("Deployment", "Job", "CronJob")]


def pool_deployments(overlay: str) -> dict[str, dict[str, Any]]:
    return {pool: named(overlay, "Deployment", f"ledger-deletion-{pool}") for pool in POOLS}


def settings_env(overlay: str) -> dict[str, str]:
    """What every process of the service reads: the settings ConfigMap and the credentials Secret."""
    (config,) = [
        c
        for c in of_kind(overlay, "ConfigMap")
        if c["metadata"]["name"].startswith("ledger-deletion-settings")
    ]
    env = dict(config["data"])
    for secret in of_kind(overlay, "Secret"):
        env.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
    return env


def settings(overlay: str) -> Settings:
    return settings_from(settings_env(overlay))


DEFAULT_PORTS = {"http": 80, "https": 443, "pulsar": 6650, "pulsar+ssl": 6651}


def host_port(endpoint: str) -> tuple[str, int]:
    """Host and port of a URL or of ``host:port[/chroot]``."""
    parts = urlsplit(endpoint if "://" in endpoint else f"tcp://{endpoint}")
    port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    assert parts.hostname and port, endpoint
    return parts.hostname, port


# --- rendering and schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_built_in_resources_are_valid_against_the_kubernetes_schemas(overlay: str, version: str) -> None:
    checked = 0
    for resource in render(overlay):
        if resource["apiVersion"].startswith(CRD_GROUPS):
            continue
        kubernetes_validate.validate(resource, version, strict=True)  # raises on any unknown field
        checked += 1
    assert checked >= 10


def crd_model(kind: str) -> Any:
    from cloudcoil.models.keda.v1alpha1 import ScaledObject, TriggerAuthentication
    from cloudcoil.models.prometheus_operator.v1 import PodMonitor, PrometheusRule

    return {
        "ScaledObject": ScaledObject,
        "TriggerAuthentication": TriggerAuthentication,
        "PodMonitor": PodMonitor,
        "PrometheusRule": PrometheusRule,
    }[kind]


def crd_round_trip(resource: dict[str, Any]) -> dict[str, Any]:
    """The resource as the CRD's model reads it: an unknown field is dropped, a wrong type refused or coerced,
    so anything but the same document back is a resource the CRD does not describe."""
    model = crd_model(resource["kind"]).model_validate(resource)
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_custom_resources_are_valid_against_their_crds(overlay: str) -> None:
    for resource in render(overlay):
        if resource["apiVersion"].startswith(CRD_GROUPS):
            assert crd_round_trip(resource) == resource, f"{resource['kind']} {resource['metadata']['name']}"


def test_the_crd_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    scaled = named("production", "ScaledObject", "ledger-deletion-bookkeeper")
    misspelt = {**scaled, "spec": {**scaled["spec"], "minReplicas": 1}}
    assert crd_round_trip(misspelt) != misspelt
    wrong_type = {**scaled, "spec": {**scaled["spec"], "minReplicaCount": "1"}}
    assert crd_round_trip(wrong_type) != wrong_type


def test_the_production_overlay_has_every_part() -> None:
    kinds = {d["kind"] for d in render("production")}
    assert {"ScaledObject", "PodMonitor", "PrometheusRule", "CronJob", "Role", "NetworkPolicy"} <= kinds
    assert {c["metadata"]["name"] for c in of_kind("production", "CronJob")} == {
        "ledger-deletion-reconcile",
        "ledger-deletion-reconcile-spark",
    }


# --- the service ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_set_is_one_the_service_reads(overlay: str) -> None:
    known = service_variables()
    assert not set(settings_env(overlay)) - known
    for workload in workloads(overlay):
        spec = pod_spec(workload)
        for container in spec.get("initContainers", []) + spec["containers"]:
            names = {e["name"] for e in container.get("env", [])}
            if workload["metadata"]["name"] == "ledger-deletion-reconcile-spark":
                names -= SPARK_DRIVER_VARIABLES
            assert not names - known, f"{workload['metadata']['name']}: {names - known}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_endpoint_is_set(overlay: str) -> None:
    configured = settings(overlay)
    for field in ENDPOINT_FIELDS:
        assert getattr(configured, field), f"{overlay}: {field} is not set"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pool_runs_its_pool_with_probes_on_its_metrics_port(overlay: str) -> None:
    configured = settings(overlay)
    for pool, deployment in pool_deployments(overlay).items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        assert container["args"] == ["worker", "--pool", pool]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": configured.metrics_port, "sdk-metrics": configured.temporal_metrics_port}
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, (pool, probe)
        # Ready only while connected to Temporal (and, for the pulsar pool, Pulsar): readiness.py's /ready,
        # which tests/integration/test_readiness_process.py shows turning 503 when Temporal is cut off.
        assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}, pool
        # The pulsar pool acks what it holds before it exits.
        assert spec["terminationGracePeriodSeconds"] > configured.shutdown_grace_seconds
        assert container["envFrom"][0]["configMapRef"]["name"].startswith("ledger-deletion-settings")
        assert {e["value"] for e in container["env"] if e["name"] == "OTEL_SERVICE_NAME"} == {
            f"ledger-deletion-{pool}"
        }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_unprivileged(overlay: str) -> None:
    for workload in workloads(overlay):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_image_is_the_projects_at_its_version(overlay: str) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for workload in workloads(overlay):
        spec = pod_spec(workload)
        for container in spec.get("initContainers", []) + spec["containers"]:
            repository, _, tag = container["image"].rpartition(":")
            # The reconcile CronJobs run the Dockerfile's reconcile target (tests/deploy/test_upstream.py).
            assert repository.endswith(("ledger-deletion", "ledger-deletion-reconcile")), container["image"]
            assert tag == version, container["image"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_search_attributes_are_registered_before_a_workflow_can_start(overlay: str) -> None:
    (job,) = of_kind(overlay, "Job")
    assert pod_spec(job)["containers"][0]["args"] == ["setup"]
    # The pulsar pool, which starts every workflow, runs the same idempotent setup before it consumes.
    spec = pod_spec(pool_deployments(overlay)["pulsar"])
    (init,) = spec["initContainers"]
    assert init["args"] == ["setup"] and init["envFrom"] == spec["containers"][0]["envFrom"]
    for pool, deployment in pool_deployments(overlay).items():
        assert pool == "pulsar" or "initContainers" not in pod_spec(deployment)


# --- least privilege (docs/security.md) --------------------------------------------------------------------

# The Deployments that delete: one per pool that deletes somewhere (ledger_deletion.settings.POOL_DELETES).
DELETING_WORKLOADS = {f"ledger-deletion-{pool}" for pool in POOL_DELETES}
DELETER = "ledger-deletion-deleter"  # the Secret (a generator's name gets a hash suffix) and ServiceAccount
# The ZooKeeper logins that may delete ledgers: the ones a process without the bookkeeper pool refuses.
DELETING_VARIABLES = {env_name(name) for name in DELETING_LOGINS}
AWS_KEYS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def secret_refs(workload: dict[str, Any]) -> dict[str, str]:
    """Each Secret a workload's pods read, with where: env, envFrom and volumes."""
    refs: dict[str, str] = {}
    for container in containers(workload):
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                refs[source["secretRef"]["name"]] = f"{container['name']}: envFrom"
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs[ref["name"]] = f"{container['name']}: {variable['name']}"
    for volume in pod_spec(workload).get("volumes", []):
        sources = [volume] + volume.get("projected", {}).get("sources", [])
        for source in sources:
            if "secret" in source:
                refs[source["secret"].get("secretName") or source["secret"]["name"]] = (
                    f"volume {volume['name']}"
                )
    return refs


def variables_set(overlay: str, workload: dict[str, Any]) -> set[str]:
    """Every variable a workload's containers get: env, and the keys of the ConfigMaps and Secrets they take
    whole (those the overlay renders; a Secret made outside it is checked by the service at start-up)."""
    rendered = {d["metadata"]["name"]: d for d in render(overlay) if d["kind"] in ("ConfigMap", "Secret")}
    names: set[str] = set()
    for container in containers(workload):
        names |= {variable["name"] for variable in container.get("env", [])}
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            found = rendered.get(ref.get("name", ""), {})
            names |= set(found.get("data", {})) | set(found.get("stringData", {}))
    return names


def deleting_credentials(overlay: str, workload: dict[str, Any]) -> list[str]:
    """What a workload holds of the deleters' credentials: their Secret, their ServiceAccount, or a deleting
    ZooKeeper login."""
    found = [
        f"{where} reads Secret {name}"
        for name, where in secret_refs(workload).items()
        if name.startswith(DELETER)
    ]
    if pod_spec(workload).get("serviceAccountName") == DELETER:
        found.append(f"runs as ServiceAccount {DELETER}")
    found += [f"sets {name}" for name in sorted(variables_set(overlay, workload) & DELETING_VARIABLES)]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_workload_that_deletes_nothing_holds_a_deleting_credential(overlay: str) -> None:
    names = {w["metadata"]["name"] for w in workloads(overlay)}
    assert names >= DELETING_WORKLOADS
    assert len(names - DELETING_WORKLOADS) >= 5  # workflow, pulsar, watch, setup, reconcile at least
    for workload in workloads(overlay):
        name = workload["metadata"]["name"]
        if name not in DELETING_WORKLOADS:
            assert not deleting_credentials(overlay, workload), (
                name,
                deleting_credentials(overlay, workload),
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_deleting_pool_holds_only_its_own_stores_deleting_credential(overlay: str) -> None:
    pools = pool_deployments(overlay)
    bookkeeper, offload = pools["bookkeeper"], pools["offload"]
    (worker,) = pod_spec(bookkeeper)["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in worker["env"] if "valueFrom" in e}
    assert {name for name, ref in refs.items() if ref["name"].startswith(DELETER)} == DELETING_VARIABLES
    assert not variables_set(overlay, bookkeeper) & AWS_KEYS  # no S3 keys, and no S3 delete role
    assert pod_spec(bookkeeper)["serviceAccountName"] != DELETER
    (worker,) = pod_spec(offload)["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in worker["env"] if "valueFrom" in e}
    assert {name for name, ref in refs.items() if ref["name"].startswith(DELETER)} == AWS_KEYS
    assert pod_spec(offload)["serviceAccountName"] == DELETER
    assert not variables_set(overlay, offload) & {env_name(name) for name in LOGINS}  # no ZooKeeper login


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_readers_take_the_reading_logins(overlay: str) -> None:
    for name in ("ledger-deletion-workflow", "ledger-deletion-watch"):
        (worker,) = pod_spec(named(overlay, "Deployment", name))["containers"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in worker["env"] if "valueFrom" in e}
        for variable in ("LEDGER_DELETION_ZOOKEEPER_READ_DIGEST", "LEDGER_DELETION_ZOOKEEPER_READ_SASL"):
            assert refs[variable].startswith("ledger-deletion-reader"), (name, variable)


def test_production_gives_each_side_its_own_s3_role() -> None:
    """IRSA: the deleter's role (deploy/iam/offload-deleter.json) only on the offload pool's account."""
    role = {
        account["metadata"]["name"]: account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        for account in of_kind("production", "ServiceAccount")
    }
    assert role[DELETER] != role["ledger-deletion-reader"]
    assert role["ledger-deletion-spark"] == role["ledger-deletion-reader"]  # reconcile's driver reads S3
    accounts = {pod_spec(w).get("serviceAccountName") for w in workloads("production")}
    assert accounts == {"ledger-deletion-reader", DELETER, "ledger-deletion-spark"}


def test_the_check_catches_a_reader_given_the_deleters_secret_or_login() -> None:
    workflow = named("production", "Deployment", "ledger-deletion-workflow")
    assert not deleting_credentials("production", workflow)
    leaked = copy.deepcopy(workflow)
    pod_spec(leaked)["containers"][0]["envFrom"].append({"secretRef": {"name": DELETER}})
    assert deleting_credentials("production", leaked)
    leaked = copy.deepcopy(workflow)
    pod_spec(leaked)["containers"][0]["env"].append(
        {"name": "LEDGER_DELETION_ZOOKEEPER_SASL", "value": "x:y"}
    )
    assert deleting_credentials("production", leaked) == ["sets LEDGER_DELETION_ZOOKEEPER_SASL"]
    leaked = copy.deepcopy(workflow)
    pod_spec(leaked)["serviceAccountName"] = DELETER
    assert deleting_credentials("production", leaked)


# --- beside the Pulsar Helm chart -------------------------------------------------------------------------


# The service's own Pulsar role, its token in the chart's layout (the chart's
# scripts/pulsar/generate_token.sh -k <release> -r ledger-deletion writes <release>-token-ledger-deletion,
# key TOKEN):
# never a super-user's (docs/security.md).
PULSAR_TOKEN_SECRET = "pulsar-token-ledger-deletion"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pulsar_token_is_the_services_role_and_only_what_talks_to_pulsar_has_it(overlay: str) -> None:
    host, _ = host_port(settings(overlay).pulsar_admin_url)
    release = host.split(".")[0].removesuffix("-broker")  # the chart's service <release>-broker
    expected = {"name": f"{release}-token-ledger-deletion", "key": "TOKEN", "optional": True}
    assert expected["name"] == PULSAR_TOKEN_SECRET
    holders = set()
    for workload in workloads(overlay):
        for container in containers(workload):
            env = {e["name"]: e for e in container.get("env", [])}
            token = env.get("LEDGER_DELETION_PULSAR_TOKEN")
            if token is not None:
                assert token["valueFrom"]["secretKeyRef"] == expected, workload["metadata"]["name"]
                holders.add(workload["metadata"]["name"])
    # The pulsar pool consumes and publishes; the workflow pool's checks read the admin API; the watcher
    # publishes requests. The deleting pools talk to no broker.
    assert {"ledger-deletion-pulsar", "ledger-deletion-workflow", "ledger-deletion-watch"} <= holders
    assert not holders & DELETING_WORKLOADS
    # No workload reads any of the chart's super-user tokens (auth.superUsers: admin, broker, proxy).
    for workload in workloads(overlay):
        assert not {name for name in secret_refs(workload) if name.startswith(f"{release}-token-")} - {
            PULSAR_TOKEN_SECRET
        }, workload["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redirects_are_trusted_to_the_charts_brokers_without_a_super_user(overlay: str) -> None:
    """Listing a cluster's brokers (LEDGER_DELETION_PULSAR_CLUSTER) takes a super-user token: the manifests
    name the brokers' advertised hosts instead, as the chart's headless service names them (the host names
    themselves: tests/deploy/test_upstream.py)."""
    configured = settings(overlay)
    host, _ = host_port(configured.pulsar_admin_url)
    service = host.split(".")[0]
    assert configured.pulsar_cluster == ""
    trusted = [h for h in configured.admin_trusted_hosts.split(",") if h]
    # <release>-broker-<n>.<release>-broker-headless.<namespace>.svc...: a pod of the broker StatefulSet.
    assert trusted and all(h.startswith(f"{service}-") for h in trusted), trusted


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_charts_metadata_prefix_is_a_chroot_of_both_zookeeper_settings(overlay: str) -> None:
    """The chart stores Pulsar's metadata under metadataPrefix and BookKeeper's ledgers under
    <metadataPrefix>/ledgers: with the prefix as the connection's chroot the ledgers root is /ledgers."""
    configured = settings(overlay)
    bk_hosts, _, bk_chroot = configured.zookeeper.partition("/")
    pulsar_hosts, _, pulsar_chroot = configured.pulsar_metadata_hosts.partition("/")
    assert (bk_hosts, bk_chroot) == (pulsar_hosts, pulsar_chroot)
    assert configured.bk_ledgers_root == "/ledgers"
    host, port = host_port(bk_hosts)
    # The chart's client port, or its secure client port with TLS.
    assert host.split(".")[0].endswith("-zookeeper") and port == (2281 if configured.zookeeper_tls else 2181)
    if overlay.startswith("production"):
        assert bk_chroot == "cluster-a", "the production overlay documents metadataPrefix /cluster-a"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_network_policy_lets_the_pools_reach_every_endpoint_and_nothing_else(overlay: str) -> None:
    policy = named(overlay, "NetworkPolicy", "ledger-deletion")
    namespace = policy["metadata"]["namespace"]
    configured = settings(overlay)
    endpoints = [getattr(configured, f) for f in ENDPOINT_FIELDS] + [configured.pulsar_metadata_hosts]
    otlp = settings_env(overlay).get("OTEL_EXPORTER_OTLP_ENDPOINT")
    endpoints += [otlp] if otlp else []

    def allows(rule: dict[str, Any], host: str, port: int) -> bool:
        if port not in {p["port"] for p in rule.get("ports", [])}:
            return False
        labels = host.split(".")
        for peer in rule["to"]:
            if ".svc." not in host:
                if "ipBlock" in peer:
                    return True
                continue
            service, service_namespace = labels[0], labels[1]
            if service_namespace == namespace and "namespaceSelector" not in peer:
                # The chart's pods of that component (service <release>-<component>).
                component = peer.get("podSelector", {}).get("matchLabels", {}).get("component")
                if component and service.endswith(f"-{component}"):
                    return True
            selector = peer.get("namespaceSelector")
            if (
                selector is not None
                and selector.get("matchLabels", {}).get("kubernetes.io/metadata.name", service_namespace)
                == service_namespace
            ):
                return True
        return False

    for endpoint in endpoints:
        host, port = host_port(endpoint)
        assert any(allows(rule, host, port) for rule in policy["spec"]["egress"]), f"{overlay}: {endpoint}"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {
        configured.metrics_port,
        configured.temporal_metrics_port,
    }
    assert any({"port": 53, "protocol": "UDP"} in r["ports"] for r in policy["spec"]["egress"]), "DNS"
    selected = policy["spec"]["podSelector"]["matchLabels"]
    for deployment in pool_deployments(overlay).values():
        assert selected.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_pool_has_a_disruption_budget(overlay: str) -> None:
    budgets = of_kind(overlay, "PodDisruptionBudget")
    for pool, deployment in pool_deployments(overlay).items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(covering) == 1 and covering[0]["spec"]["maxUnavailable"] == 1, pool


# --- autoscaling and monitoring ---------------------------------------------------------------------------


def test_keda_scales_each_pool_on_its_own_task_queue() -> None:
    configured = settings("production")
    concurrency = {p: getattr(configured, f"{p}_concurrency") for p in POOLS}
    for pool, deployment in pool_deployments("production").items():
        (scaled,) = [
            s
            for s in of_kind("production", "ScaledObject")
            if s["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        ]
        assert "replicas" not in deployment["spec"], "KEDA owns the replica count"
        assert scaled["spec"]["minReplicaCount"] >= 1, "never scaled to zero"
        triggers = {t["type"]: t for t in scaled["spec"]["triggers"]}
        # The pulsar pool also scales on the deletion topic's backlog (test below).
        assert set(triggers) == ({"temporal", "pulsar"} if pool == "pulsar" else {"temporal"}), pool
        trigger = triggers["temporal"]
        metadata = trigger["metadata"]
        assert set(metadata) <= TEMPORAL_SCALER_PARAMETERS
        assert metadata["taskQueue"] == configured.task_queue(pool)
        assert metadata["namespace"] == configured.temporal_namespace
        assert metadata["queueTypes"] == ("workflow" if pool == "workflow" else "activity")
        assert int(metadata["targetQueueSize"]) == concurrency[pool]
        # The endpoint is the one the pods connect to.
        assert (
            metadata["endpointFromEnv"] == "TEMPORAL_ADDRESS"
            and settings_env("production")["TEMPORAL_ADDRESS"]
        )
    assert not of_kind("dev", "ScaledObject")


@pytest.mark.parametrize("overlay", ["production", "production-tls"])
def test_keda_scales_the_pulsar_pool_on_the_deletion_topics_backlog(overlay: str) -> None:
    """The pulsar trigger reads the subscription the pool consumes, from the admin URL the pods use."""
    configured = settings(overlay)
    (scaled,) = [s for s in of_kind(overlay, "ScaledObject") if s["metadata"]["name"].endswith("-pulsar")]
    (trigger,) = [t for t in scaled["spec"]["triggers"] if t["type"] == "pulsar"]
    metadata = trigger["metadata"]
    assert set(metadata) <= PULSAR_SCALER_PARAMETERS
    assert metadata["adminURL"] == configured.pulsar_admin_url
    assert metadata["topic"] == configured.topic
    assert metadata["subscription"] == configured.subscription
    (auth,) = [
        a
        for a in of_kind(overlay, "TriggerAuthentication")
        if a["metadata"]["name"] == trigger["authenticationRef"]["name"]
    ]
    parameters = {ref["parameter"]: ref for ref in auth["spec"]["secretTargetRef"]}
    assert parameters["bearerToken"]["name"] == PULSAR_TOKEN_SECRET
    # Over TLS the scaler trusts the CA the pods trust.
    assert ("ca" in parameters) == metadata["adminURL"].startswith("https://")


def test_the_pod_monitor_scrapes_both_metrics_ports_of_every_pool() -> None:
    (monitor,) = of_kind("production", "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["podMetricsEndpoints"])
    for deployment in pool_deployments("production").values():
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        ports = {p["name"] for p in pod_spec(deployment)["containers"][0]["ports"]}
        assert scraped == ports


def test_the_prometheus_rule_carries_the_tested_alert_rules() -> None:
    (rule,) = of_kind("production", "PrometheusRule")
    assert rule["spec"]["groups"] == load_yaml(DEPLOY / "prometheus" / "alerts.yml")["groups"]


# --- the reconcile job ------------------------------------------------------------------------------------


def volume_paths(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """mount path -> the PersistentVolumeClaim mounted there."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    return {m["mountPath"]: claims[m["name"]] for m in container["volumeMounts"] if m["name"] in claims}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_reconcile_cronjob_runs_local_spark_into_its_volume(overlay: str) -> None:
    job = named(overlay, "CronJob", "ledger-deletion-reconcile")
    spec = pod_spec(job)
    (container,) = spec["containers"]
    command = " ".join(container["command"] + container["args"])
    assert "ledger-deletion reconcile --master 'local[*]'" in command and "--submit" not in command
    out = re.search(r'--out "([^"$]+)/', command)
    assert out, command
    claims = {c["metadata"]["name"] for c in of_kind(overlay, "PersistentVolumeClaim")}
    assert volume_paths(spec, container)[out.group(1)] in claims
    assert job["spec"]["concurrencyPolicy"] == "Forbid"


def spark_defaults() -> dict[str, str]:
    lines = (
        (KUBERNETES / "components" / "spark-on-kubernetes" / "spark-defaults.conf").read_text().splitlines()
    )
    pairs = [line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")]
    return {key: value.strip() for key, value in pairs}


@cache
def spark_configuration_strings() -> frozenset[str]:
    """Every string constant of Spark's configuration classes in the jars pyspark ships (spark-core's config
    package, spark-kubernetes' Config): the keys Spark defines, and the parts of those it builds."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    strings: set[str] = set()
    for jar in [*jars.glob("spark-core_*.jar"), *jars.glob("spark-kubernetes_*.jar")]:
        with zipfile.ZipFile(jar) as archive:
            for name in archive.namelist():
                if name.endswith(".class") and ("/internal/config/" in name or "/deploy/k8s/Config" in name):
                    strings.update(
                        s.decode() for s in re.findall(rb"[A-Za-z][A-Za-z0-9._/-]+", archive.read(name))
                    )
    return frozenset(strings)


def test_the_spark_settings_are_keys_spark_defines() -> None:
    defined = spark_configuration_strings()
    for key in spark_defaults():
        prefix, _, suffix = key.rpartition(".")
        known = (
            key in defined
            # a key under a prefix Spark takes any name after (volumes, labels)
            or any(key.startswith(p) for p in defined if p.endswith(".") and p.count(".") >= 3)
            # a key Spark builds from a prefix and a suffix (the client-mode authentication files)
            or (prefix in defined and suffix in defined)
        )
        assert known, f"{key} is no Spark setting"


def test_the_spark_executors_run_the_drivers_spark_version() -> None:
    import pyspark

    assert spark_defaults()["spark.kubernetes.container.image"] == f"apache/spark:{pyspark.__version__}"


def test_the_spark_driver_and_executors_share_the_output_location() -> None:
    job = named("production", "CronJob", "ledger-deletion-reconcile-spark")
    spec = pod_spec(job)
    (driver,) = spec["containers"]
    conf = spark_defaults()
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.reconcile"
    claim, path = conf[f"{volume}.options.claimName"], conf[f"{volume}.mount.path"]
    assert volume_paths(spec, driver)[path] == claim, "the executors mount the driver's volume at its path"
    (pvc,) = [c for c in of_kind("production", "PersistentVolumeClaim") if c["metadata"]["name"] == claim]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    command = " ".join(driver["command"] + driver["args"])
    assert "--master k8s://https://kubernetes.default.svc:443" in command
    assert f'--out "{path}/' in command, "the output, and so the extract, is on the shared volume"


def test_the_spark_driver_can_start_its_executors_and_they_can_reach_it() -> None:
    job = named("production", "CronJob", "ledger-deletion-reconcile-spark")
    spec = pod_spec(job)
    (driver,) = spec["containers"]
    account = spec["serviceAccountName"]
    (binding,) = [b for b in of_kind("production", "RoleBinding") if b["subjects"][0]["name"] == account]
    role = named("production", "Role", binding["roleRef"]["name"])
    pods = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pods and {"create", "delete", "watch"} <= set(pods[0]["verbs"])
    # Kubernetes expands $(VAR) only for variables defined before it.
    env = driver["env"]
    submit = next(e["value"] for e in env if e["name"] == "PYSPARK_SUBMIT_ARGS")
    before = {e["name"] for e in env[: [e["name"] for e in env].index("PYSPARK_SUBMIT_ARGS")]}
    assert set(re.findall(r"\$\((\w+)\)", submit)) <= before
    assert submit.split()[-1] == "pyspark-shell"
    assert (
        "spark.driver.host=$(POD_IP)" in submit and "spark.kubernetes.driver.pod.name=$(POD_NAME)" in submit
    )
    conf = spark_defaults()
    assert {p["containerPort"] for p in driver["ports"]} == {
        int(conf["spark.driver.port"]),
        int(conf["spark.driver.blockManager.port"]),
    }
    # Driver and executors may talk to each other: the executors carry the labels the policy selects.
    policy = named("production", "NetworkPolicy", "ledger-deletion-spark")
    (expression,) = policy["spec"]["podSelector"]["matchExpressions"]
    executor_component = conf["spark.kubernetes.executor.label.app.kubernetes.io/component"]
    driver_component = job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"][
        "app.kubernetes.io/component"
    ]
    assert {executor_component, driver_component} <= set(expression["values"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_names_an_audit_bucket(overlay: str) -> None:
    """Without LEDGER_DELETION_AUDIT_BUCKET the pulsar pool acks decisions with no audit record (only a
    warning at start): every deployable overlay names the bucket of its audit log."""
    assert settings(overlay).audit_bucket
