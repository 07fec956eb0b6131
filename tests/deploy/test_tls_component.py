"""The tls component (deploy/kubernetes/components/tls) as the production-tls overlay renders it: every
container of the service mounts the certificates Secret read-only, the settings name files in it, and the
endpoints are the chart's TLS ports."""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import urlsplit

from tests.deploy.test_kubernetes import pod_spec, settings, workloads

OVERLAY = "production-tls"
MOUNT = PurePosixPath("/etc/ledger-deletion/tls")


def test_every_container_mounts_the_certificates_read_only() -> None:
    for workload in workloads(OVERLAY):
        spec = pod_spec(workload)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["tls"]["secret"]["secretName"] == "ledger-deletion-tls", workload["metadata"]["name"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
            assert mounts["tls"] == {"name": "tls", "mountPath": str(MOUNT), "readOnly": True}, (
                workload["metadata"]["name"],
                container["name"],
            )


def test_the_settings_name_files_of_the_secret_and_the_tls_ports() -> None:
    configured = settings(OVERLAY)
    files = {
        configured.temporal_tls_server_ca_cert_path: "ca.crt",
        configured.temporal_tls_client_cert_path: "tls.crt",
        configured.temporal_tls_client_key_path: "tls.key",
        configured.pulsar_tls_trust_certs_file: "ca.crt",
        configured.zookeeper_tls_ca_file: "ca.crt",
        configured.zookeeper_tls_cert_file: "tls.crt",
        configured.zookeeper_tls_key_file: "tls.key",
    }
    for path, key in files.items():
        assert PurePosixPath(path) == MOUNT / key
    assert urlsplit(configured.pulsar_url).scheme == "pulsar+ssl"
    assert urlsplit(configured.pulsar_admin_url).scheme == "https"
    assert configured.zookeeper_tls and configured.zookeeper.split("/")[0].endswith(":2281")
    assert configured.pulsar_metadata_hosts.split("/")[0].endswith(":2281")
    assert configured.temporal_tls_server_name
