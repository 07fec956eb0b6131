"""What only starting the deployment would show, turned into facts checked offline: each test encodes what an
upstream file says at the version the deployment pins (named in its docstring; deploy/README.md lists every
pin with its file), so the next upgrade knows what to re-read."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.deploy.support import DEPLOY, ROOT, load_all_yaml
from tests.deploy.test_compose import env, ours, services
from tests.deploy.test_kubernetes import (
    KUBERNETES,
    OVERLAYS,
    host_port,
    named,
    of_kind,
    pod_spec,
    settings,
    settings_env,
    workloads,
)

DOCS = ROOT / "docs" / "deployment.md"

# --- docker compose -----------------------------------------------------------------------------------------


def test_temporal_reads_a_dynamic_config_file_mounted_from_the_repository() -> None:
    """temporalio/temporal v1.30.1: common/config/config_template_embedded.yaml reads dynamicConfigClient's
    filepath from DYNAMIC_CONFIG_FILE_PATH, default /etc/temporal/config/dynamicconfig/docker.yaml, and
    cmd/server/main.go exits ("Unable to create dynamic config client") when it cannot be read;
    docker/targets/server.Dockerfile copies only the binary and the entrypoint into WORKDIR /etc/temporal.
    temporalio/samples-server (b7bc4c5) compose/docker-compose-postgres.yml mounts ./dynamicconfig there and
    sets DYNAMIC_CONFIG_FILE_PATH=config/dynamicconfig/development-sql.yaml for temporalio/server:1.30.1."""
    temporal = services()["temporal"]
    assert temporal["image"] == "temporalio/server:1.30.1"
    path = PurePosixPath("/etc/temporal") / env(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    mounts = {PurePosixPath(m.split(":")[1]): m.split(":")[0] for m in temporal["volumes"]}
    (target,) = [t for t in mounts if t in path.parents]
    source = ROOT / mounts[target] / path.relative_to(target)
    assert source.is_file(), f"{path} is not mounted from a file of the repository"
    assert all(isinstance(value, list) for value in load_all_yaml(source.read_text())[0].values())


def test_every_file_a_container_is_told_to_read_is_mounted_from_the_repository() -> None:
    """A container given a configuration file by path (an environment value, a command argument) finds it
    under one of its bind mounts of a file or folder of the repository."""
    checked = 0
    for name, service in services().items():
        mounts = {
            PurePosixPath(m.split(":")[1]): ROOT / m.split(":")[0]
            for m in service.get("volumes") or []
            if m.startswith(".")
        }
        values = [str(v) for v in env(service).values()] + [str(c) for c in service.get("command") or []]
        for value in values:
            for found in re.findall(r"(?:^|[\s=])(/?[\w./-]+\.(?:ya?ml|sh|sql|conf|json))\b", value):
                path = PurePosixPath(found)
                if not path.is_absolute() and name == "temporal":
                    path = PurePosixPath("/etc/temporal") / path
                if not path.is_absolute() or path.parts[1] in ("pulsar",):
                    continue  # relative to an image's own directory (conf/broker.conf in Pulsar's image)
                covering = [t for t in mounts if t == path or t in path.parents]
                assert covering, f"{name}: {path} is not mounted"
                target = covering[0]
                assert (mounts[target] / path.relative_to(target)).exists(), f"{name}: {path}"
                checked += 1
    assert checked >= 3


def test_the_bookie_health_check_starts_no_jvm() -> None:
    """apache/pulsar conf/bookkeeper.conf (4.0.12): bookiePort=3181, the port a bookie serves once it is up.
    `bin/bookkeeper shell bookiesanity` starts a JVM and writes a ledger at every interval: a TCP connect from
    bash (the image's shell, which its own command uses) says the same without either."""
    test = services()["bookie"]["healthcheck"]["test"]
    command = " ".join(test[1:])
    assert not re.search(r"\bbin/(bookkeeper|pulsar)\b|\bjava\b", command), command
    assert test[:3] == ["CMD", "bash", "-c"] and "/dev/tcp/127.0.0.1/3181" in command


def test_clients_on_the_host_get_an_address_they_can_reach() -> None:
    """apache/pulsar conf/broker.conf (4.0.12): advertisedListeners (<name>:pulsar://<host>:<port>,...),
    internalListenerName, and bindAddresses (<name>:pulsar://<bind>:<port>), with which a lookup answers
    with the listener of the port the client connected to (PIP-95). The pools reach the internal
    listener, a client on the host the external one, published on the host."""
    broker = services()["broker"]
    # apache/pulsar docker/pulsar/scripts/apply-config-from-env.py: PULSAR_PREFIX_<key> sets <key> in the
    # configuration file, listed there or not.
    conf = {k.removeprefix("PULSAR_PREFIX_"): v for k, v in env(broker).items()}
    settings_url = {env(services()[name])["LEDGER_DELETION_PULSAR_URL"] for name in ours()}
    listeners = dict(item.split(":", 1) for item in conf["advertisedListeners"].split(","))
    internal = conf["internalListenerName"]
    assert {listeners[internal]} == settings_url
    external = {name: url for name, url in listeners.items() if name != internal}
    assert len(external) == 1
    ((listener, url),) = external.items()
    host, port = host_port(url)
    assert host == "localhost"
    assert f"{port}:{port}" in broker["ports"], "the external listener's port is published as itself"
    assert f"{listener}:pulsar://0.0.0.0:{port}" in conf["bindAddresses"].split(",")
    _, internal_port = host_port(listeners[internal])
    assert str(internal_port) in broker["expose"] and not any(
        str(p).endswith(f":{internal_port}") for p in broker["ports"]
    ), "the internal listener is not published: a host client there would be sent to broker:6650"


def test_the_service_declares_who_else_writes_to_its_bookkeeper() -> None:
    """LEDGER_DELETION_BOOKKEEPER_SHARED_WITH is required by the workflow, bookkeeper and offload pools and
    the watcher (docs/deployment.md): in the trial, and in the Kubernetes base, only Pulsar writes to it."""
    for name in ours():
        assert env(services()[name])["LEDGER_DELETION_BOOKKEEPER_SHARED_WITH"] == "none", name
    for overlay in OVERLAYS:
        assert settings_env(overlay)["LEDGER_DELETION_BOOKKEEPER_SHARED_WITH"] == "none", overlay


# --- Kubernetes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_that_mount_a_secret_can_read_it(overlay: str) -> None:
    """Kubernetes' secret volume (pkg/volume/secret, SetVolumeOwnership): the files are owned by root, with
    the pod's fsGroup as their group when it is set, and the volume's defaultMode. The tls component mounts
    its Secret 0440: without fsGroup the service's uid 10001 cannot read ca.crt or tls.key."""
    for workload in workloads(overlay):
        spec = pod_spec(workload)
        context = spec["securityContext"]
        assert context.get("fsGroup") == context["runAsGroup"], workload["metadata"]["name"]
    for workload in workloads("production-tls"):
        spec = pod_spec(workload)
        (tls,) = [v for v in spec["volumes"] if v["name"] == "tls"]
        mode = tls["secret"]["defaultMode"]
        assert mode & 0o040 and spec["securityContext"]["fsGroup"] != 0, workload["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_trusted_redirects_name_the_brokers_under_the_charts_headless_service(overlay: str) -> None:
    """apache/pulsar-helm-chart pulsar-4.6.0 and pulsar-4.7.0: templates/broker-statefulset.yaml's serviceName
    is "pulsar.broker.service.headless" (templates/_broker.tpl: <release>-broker-headless; pulsar-4.5.0 used
    <release>-broker), and the chart sets no advertisedAddress, so each broker advertises its pod's name,
    <release>-broker-<n>.<release>-broker-headless.<namespace>.svc.cluster.local."""
    configured = settings(overlay)
    host, _ = host_port(configured.pulsar_admin_url)
    service, namespace = host.split(".")[:2]
    trusted = [h for h in configured.admin_trusted_hosts.split(",") if h]
    assert trusted == [
        f"{service}-{n}.{service}-headless.{namespace}.svc.cluster.local" for n in range(len(trusted))
    ]


# kedacore/keda v2.18.0 pkg/scalers/temporal_scaler.go, temporalMetadata: cert, key, keyPassword and ca from
# the TriggerAuthentication (authParams), tlsServerName from the trigger; TLS only with both cert and key.
TEMPORAL_TLS_AUTH_PARAMETERS = {"cert", "key", "ca"}


def test_keda_asks_the_mtls_temporal_frontend_with_the_pods_certificate() -> None:
    """kedacore/keda v2.18.0 (the first with tlsServerName) pkg/scalers/temporal_scaler.go: without cert and
    key the scaler dials without TLS, and an mTLS frontend refuses it; with them, the server name it verifies
    is tlsServerName, else the endpoint's host."""
    configured = settings_env("production-tls")
    authentications = {a["metadata"]["name"]: a for a in of_kind("production-tls", "TriggerAuthentication")}
    scaled = of_kind("production-tls", "ScaledObject")
    assert len(scaled) == 4
    for resource in scaled:
        (trigger,) = [t for t in resource["spec"]["triggers"] if t["type"] == "temporal"]
        assert trigger["metadata"]["tlsServerName"] == configured["TEMPORAL_TLS_SERVER_NAME"]
        authentication = authentications[trigger["authenticationRef"]["name"]]
        refs = {r["parameter"]: (r["name"], r["key"]) for r in authentication["spec"]["secretTargetRef"]}
        assert set(refs) == TEMPORAL_TLS_AUTH_PARAMETERS
        # The files the pods read, from the Secret the tls component mounts.
        for parameter, setting in (
            ("cert", "TEMPORAL_TLS_CLIENT_CERT_PATH"),
            ("key", "TEMPORAL_TLS_CLIENT_KEY_PATH"),
            ("ca", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
        ):
            assert refs[parameter] == ("ledger-deletion-tls", PurePosixPath(configured[setting]).name)


@pytest.mark.parametrize("overlay", ["production", "production-tls"])
def test_keda_reads_the_partitioned_deletion_topics_backlog(overlay: str) -> None:
    """kedacore/keda v2.18.0 pkg/scalers/pulsar_scaler.go: isPartitionedTopic (default false) picks
    /admin/v2/persistent/<topic>/partitioned-stats, else /stats, which a partitioned topic's name does not
    answer. The deletion topic is partitioned (Settings.topic; PIP-186)."""
    assert "partitioned" in type(settings(overlay)).model_fields["topic"].description.lower()  # type: ignore[union-attr]
    (resource,) = [s for s in of_kind(overlay, "ScaledObject") if s["metadata"]["name"].endswith("-pulsar")]
    (trigger,) = [t for t in resource["spec"]["triggers"] if t["type"] == "pulsar"]
    assert trigger["metadata"]["isPartitionedTopic"] == "true"


def test_kube_prometheus_stack_selects_the_pod_monitor_as_it_does_the_rules() -> None:
    """prometheus-community/helm-charts kube-prometheus-stack 88.5.3, templates/prometheus/prometheus.yaml:
    with podMonitorSelectorNilUsesHelmValues (the default) the Prometheus selects PodMonitors labelled
    release=<its release>, as it does PrometheusRules (ruleSelectorNilUsesHelmValues)."""
    (monitor,) = of_kind("production", "PodMonitor")
    (rule,) = of_kind("production", "PrometheusRule")
    release = rule["metadata"]["labels"]["release"]
    assert monitor["metadata"]["labels"]["release"] == release == "kube-prometheus-stack"


# apache/pulsar-helm-chart pulsar-4.7.0 scripts/pulsar/generate_token.sh: its options, and whether each takes
# a value. The Secret it writes is <release>-token-<role>, key TOKEN.
GENERATE_TOKEN_OPTIONS = {"-n": True, "-k": True, "-r": True, "-s": False, "-l": False, "-h": False}


def test_the_token_script_is_called_with_the_charts_own_options() -> None:
    """apache/pulsar-helm-chart pulsar-4.7.0 scripts/pulsar/generate_token.sh: -k is the release, -r the role,
    -n the namespace; -s (symmetric key) and -l take no value."""
    docs = "\n".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))
    calls = re.findall(r"generate_token\.sh((?: -[a-z](?: [a-z<][\w<>-]*)?)+)", docs)
    assert len(calls) >= 3  # deployment.md twice, security.md
    for call in calls:
        words = call.split()
        options: dict[str, str] = {}
        while words:
            option = words.pop(0)
            assert option in GENERATE_TOKEN_OPTIONS, call
            options[option] = words.pop(0) if GENERATE_TOKEN_OPTIONS[option] else ""
        assert options.get("-r") == "ledger-deletion" and "-k" in options and "-n" in options, call


def chart_values_documented() -> str:
    texts = [DOCS.read_text()] + [p.read_text() for p in (KUBERNETES / "overlays").rglob("*") if p.is_file()]
    return "\n".join(texts)


def test_the_offload_endpoint_is_set_through_a_value_the_chart_reads() -> None:
    """apache/pulsar-helm-chart pulsar-4.7.0 templates/broker-configmap.yaml: for driver aws-s3 the chart
    writes managedLedgerOffloadDriver, s3ManagedLedgerOffloadBucket and s3ManagedLedgerOffloadRegion only
    (no broker.storageOffload value sets the endpoint), and copies broker.configData as it is: a MinIO
    endpoint is broker.configData.s3ManagedLedgerOffloadServiceEndpoint."""
    text = chart_values_documented()
    assert not re.search(r"storageOffload[^\n|]*serviceEndpoint", text), "no such chart value"
    dev = (KUBERNETES / "overlays" / "dev" / "settings.env").read_text().replace("\n# ", " ")
    endpoint = settings_env("dev")["LEDGER_DELETION_S3_ENDPOINT"]
    assert f"broker.configData.s3ManagedLedgerOffloadServiceEndpoint={endpoint}" in dev


def render_with(
    components: list[str],
    settings_lines: list[str],
    tmp: Path,
    overlay: str = "production",
    release_lines: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """An overlay on top of one of the repository's with more components, settings and Pulsar release values,
    as an operator's own overlay would have."""
    kubectl = shutil.which("kubectl")
    assert kubectl
    (tmp / "settings.env").write_text("\n".join(settings_lines) + "\n")
    (tmp / "pulsar-release.env").write_text("\n".join(release_lines) + "\n")

    def relative(path: Path) -> str:
        return os.path.relpath(path, tmp)  # kustomize takes no absolute roots

    listed = "".join(f"  - {relative(KUBERNETES / 'components' / c)}\n" for c in components)
    (tmp / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {relative(KUBERNETES / 'overlays' / overlay)}\ncomponents:\n{listed}"
        "configMapGenerator:\n  - name: ledger-deletion-settings\n    behavior: merge\n"
        "    envs: [settings.env]\n"
        "  - name: pulsar-release\n    behavior: merge\n    envs: [pulsar-release.env]\n"
        "    options: {disableNameSuffixHash: true}\n"
    )
    done = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(tmp)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return load_all_yaml(done.stdout)


def egress_allows_outside(policy: dict[str, Any], port: int) -> bool:
    return any(
        port in {p["port"] for p in rule.get("ports", [])} and any("ipBlock" in peer for peer in rule["to"])
        for rule in policy["spec"]["egress"]
    )


def test_temporal_cloud_is_reachable_with_its_component(tmp_path: Path) -> None:
    """Temporal Cloud's namespace endpoints (docs.temporal.io: <namespace>.<account>.tmprl.cloud:7233, and the
    API-key endpoints <region>.<cloud>.api.temporal.io:7233) are gRPC on 7233 outside the cluster: the base
    policy allows 7233 only to the namespace "temporal", so the temporal-cloud component opens it."""
    base = named("production", "NetworkPolicy", "ledger-deletion")
    assert not egress_allows_outside(base, 7233)
    cloud = ["TEMPORAL_ADDRESS=deletions.a1b2c.tmprl.cloud:7233"]
    rendered = render_with(["temporal-cloud"], cloud, tmp_path)
    (policy,) = [
        d for d in rendered if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "ledger-deletion"
    ]
    assert egress_allows_outside(policy, 7233) and egress_allows_outside(policy, 443)


def test_the_reconcile_jobs_run_the_reconcile_image_and_nothing_else_does() -> None:
    """The service image has no Java runtime and no pyspark (Dockerfile, target service); the reconcile
    CronJobs run the reconcile target's image."""
    for workload in workloads("production"):
        name = workload["metadata"]["name"]
        for container in pod_spec(workload)["containers"]:
            repository = container["image"].rpartition(":")[0]
            reconcile = name.startswith("ledger-deletion-reconcile")
            assert repository.endswith("-reconcile") == reconcile, (name, container["image"])
    assert (DEPLOY / ".." / "Dockerfile").resolve().is_file()


@pytest.mark.parametrize("overlay", ["production", "production-tls"])
def test_one_place_sets_the_pulsar_release_and_namespace(overlay: str, tmp_path: Path) -> None:
    """apache/pulsar-helm-chart pulsar-4.7.0: the chart's services are <fullname>-broker and
    <fullname>-zookeeper (templates/_broker.tpl, _zookeeper.tpl), its broker pods <fullname>-broker-<n> under
    <fullname>-broker-headless, all in the release's namespace, where fullname (templates/_helpers.tpl) is
    the release when it contains "pulsar", else <release>-pulsar; generate_token.sh writes
    <release>-token-<role>. base/pulsar-release.env names them once; an overlay merging other values there
    (and including components/pulsar-release) moves every one of those names."""
    rendered = render_with(
        ["pulsar-release"],
        [],
        tmp_path,
        overlay,
        ("release=streams-a", "fullname=streams-a-pulsar", "namespace=messaging"),
    )
    text = yaml.safe_dump_all(rendered)
    assert not re.search(r"(?<![\w-])pulsar-(broker|zookeeper|token)|\.pulsar\.svc", text), (
        "a name left behind"
    )
    (config,) = [d for d in rendered if d["metadata"]["name"].startswith("ledger-deletion-settings")]
    data = config["data"]
    assert (
        host_port(data["LEDGER_DELETION_PULSAR_ADMIN_URL"])[0]
        == "streams-a-pulsar-broker.messaging.svc.cluster.local"
    )
    assert data["LEDGER_DELETION_ZOOKEEPER"].startswith(
        "streams-a-pulsar-zookeeper.messaging.svc.cluster.local:"
    )
    assert data["LEDGER_DELETION_ADMIN_TRUSTED_HOSTS"].split(",") == [
        f"streams-a-pulsar-broker-{n}.streams-a-pulsar-broker-headless.messaging.svc.cluster.local"
        for n in range(3)
    ]
    # Scheme, port and chroot are the overlay's.
    original = settings_env(overlay)
    for key in ("LEDGER_DELETION_PULSAR_URL", "LEDGER_DELETION_ZOOKEEPER"):
        assert data[key].split(":")[-1] == original[key].split(":")[-1], key
    tokens = set(re.findall(r"'name': '([\w-]*-token-[\w-]*)'", str(rendered)))
    assert tokens == {"streams-a-token-ledger-deletion"}
    assert not [d for d in rendered if d["metadata"]["name"] == "pulsar-release"], "kustomize-only"
    # The NetworkPolicy lets the pods reach the chart's ZooKeeper and brokers (templates/_helpers.tpl's
    # pulsar.standardLabels: app, release, component) in the chart's namespace, wherever the service runs.
    (policy,) = [
        d for d in rendered if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "ledger-deletion"
    ]
    chart_peers = [
        peer for rule in policy["spec"]["egress"] for peer in rule["to"] if "component" in str(peer)
    ]
    assert len(chart_peers) == 2
    for peer in chart_peers:
        assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "messaging"}
        assert peer["podSelector"]["matchLabels"]["release"] == "streams-a"
