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
