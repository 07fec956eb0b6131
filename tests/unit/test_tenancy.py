"""Tenant isolation's rule: what a request may name, and ask for, on the topic it arrived on."""

from __future__ import annotations

import pytest

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from ledger_deletion.tenancy import confine_to_topic, is_system_topic, namespace_of_topic, partitioned_topic

SYSTEM = "persistent://pulsar/system/__ledger_deletion"
ACME = "persistent://acme/orders/__ledger_deletion"


def request(topic_name: str, *, check: bool = False, schema_id: str | None = None) -> PendingDeleteLedgerInfo:
    component = LedgerComponent.SCHEMA_STORAGE if schema_id else LedgerComponent.MANAGED_LEDGER
    return PendingDeleteLedgerInfo(
        topic_name,
        component,
        LedgerType.LEDGER,
        42,
        schema_id=schema_id,
        check_ledger_still_in_use=check,
    )


@pytest.mark.parametrize(
    ("topic", "namespace"),
    [
        ("persistent://acme/orders/__ledger_deletion", "acme/orders"),
        ("persistent://acme/orders/__ledger_deletion-partition-3", "acme/orders"),
        ("acme/orders/t", "acme/orders"),
        ("persistent://acme/us-west/orders/t", "acme/us-west/orders"),  # V1: tenant/cluster/namespace
    ],
)
def test_namespace_of_topic(topic: str, namespace: str) -> None:
    assert namespace_of_topic(topic) == namespace


@pytest.mark.parametrize(
    ("topic", "partitioned"),
    [
        (f"{ACME}-partition-0", ACME),
        (f"{ACME}-partition-12", ACME),
        (ACME, ACME),
        (f"{ACME}-partition-x", f"{ACME}-partition-x"),
    ],
)
def test_partitioned_topic(topic: str, partitioned: str) -> None:
    assert partitioned_topic(topic) == partitioned


@pytest.mark.parametrize(
    ("topic", "trusted"),
    [
        (SYSTEM, True),
        (f"{SYSTEM}-partition-0", True),
        (f"{SYSTEM}-partition-17", True),
        ("pulsar/system/__ledger_deletion-partition-1", True),  # without its domain: persistent://
        (f"{SYSTEM}-partition-x", False),
        (f"{SYSTEM}-partition-", False),
        (f"{SYSTEM}_other", False),  # another topic of the system namespace
        (f"non-{SYSTEM}", False),  # non-persistent:// is another topic
        (ACME, False),
        (f"{ACME}-partition-0", False),
    ],
)
def test_only_the_system_topic_and_its_partitions_are_the_brokers(topic: str, trusted: bool) -> None:
    assert is_system_topic(topic, SYSTEM) is trusted


def test_system_topic_request_is_taken_as_sent() -> None:
    sent = request("globex/payments/ledger-partition-0", check=False)
    assert confine_to_topic(sent, f"{SYSTEM}-partition-2", SYSTEM) is sent


@pytest.mark.parametrize("arrived_on", [ACME, f"{ACME}-partition-0"])
def test_tenant_topic_request_of_its_own_namespace_always_gets_the_in_use_check(arrived_on: str) -> None:
    confined = confine_to_topic(request("acme/orders/ledger-partition-0", check=False), arrived_on, SYSTEM)
    assert confined == request("acme/orders/ledger-partition-0", check=True)


def test_tenant_topic_request_naming_another_namespace_is_refused_with_both() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        confine_to_topic(request("globex/payments/ledger-partition-0"), f"{ACME}-partition-0", SYSTEM)
    assert "'globex/payments'" in str(refused.value) and "'acme/orders'" in str(refused.value)
    assert "topicName" in str(refused.value)


@pytest.mark.parametrize(
    "topic_name",
    [
        "acme/other/ledger",  # same tenant, another namespace
        "acme/orders/extra/ledger",  # a V1 name: namespace acme/orders/extra
        "acme-orders/orders/ledger",  # a tenant whose name starts like acme's
    ],
)
def test_a_namespace_is_compared_whole(topic_name: str) -> None:
    with pytest.raises(InvalidRequestError):
        confine_to_topic(request(topic_name), ACME, SYSTEM)


def test_schema_ledger_request_naming_another_namespaces_schema_is_refused() -> None:
    foreign_schema = request("acme/orders/t", schema_id="globex/payments/t")
    with pytest.raises(InvalidRequestError) as refused:
        confine_to_topic(foreign_schema, ACME, SYSTEM)
    assert "schemaId" in str(refused.value) and "'globex/payments'" in str(refused.value)
    own = confine_to_topic(request("acme/orders/t", schema_id="acme/orders/t"), ACME, SYSTEM)
    assert own.schema_id == "acme/orders/t" and own.check_ledger_still_in_use is True
