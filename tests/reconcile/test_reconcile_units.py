"""Pieces of the reconcile job that need neither Spark nor the stack."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from devstack.generator import ClusterSpec, plan_cluster, plan_young_orphans
from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.bk_metadata import parse_ledger_metadata
from ledger_deletion.formats.bk_paths import ledger_id_from_path, ledger_path
from ledger_deletion.formats.offload_keys import offload_uuid
from ledger_deletion.request import LedgerComponent, LedgerType, request_to_wire
from ledger_deletion.shared_bookkeeper import namespace_of
from reconcile.candidates import build_requests, head_owners, request_for_finding
from reconcile.extract import ids_from_children
from reconcile.job import parse_duration
from reconcile.report import ReportRow, human_bytes, render_chart, render_table, totals

UUID = "3f2a8c1e-9b7d-4e21-a5c3-0d9e8f7a6b5c"


@pytest.mark.parametrize(
    ("text", "seconds"), [("24h", 86400), ("90s", 90), ("15m", 900), ("7d", 604800), ("0", 0), ("1.5h", 5400)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "tomorrow", "3w"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def finding(**over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "storage": "bookkeeper",
        "ledger_id": 42,
        "component": "data",
        "ledger_component": "MANAGED_LEDGER",
        "ledger_type": "LEDGER",
        "topic_name": "public/default/orders-partition-1",
        "cursor_name": None,
        "schema_id": None,
        "bucket": None,
        "uuid": None,
        "bytes": 10,
    }
    row.update(over)
    return row


def test_ledger_requests() -> None:
    data = request_for_finding(finding())
    assert (data.ledger_type, data.ledger_component, data.context, data.check_ledger_still_in_use) == (
        LedgerType.LEDGER,
        LedgerComponent.MANAGED_LEDGER,
        None,
        True,
    )
    assert data.managed_ledger_name == "public/default/persistent/orders-partition-1"
    cursor = request_for_finding(
        finding(component="cursor", ledger_component="MANAGED_CURSOR", cursor_name="sub")
    )
    assert cursor.cursor_name == "sub"
    schema = request_for_finding(
        finding(
            ledger_component="SCHEMA_STORAGE",
            topic_name="public/default/orders",
            schema_id="public/default/orders",
        )
    )
    assert schema.schema_id == "public/default/orders" and schema.cursor_name is None


def test_offload_request_rebuilds_the_context_from_the_key() -> None:
    request = request_for_finding(
        finding(
            storage="offload", ledger_type="OFFLOAD_LEDGER", ledger_id=12, uuid=UUID, bucket="b", bytes=99
        )
    )
    assert request.context is not None and request.context.offload_context is not None
    ctx = request.context.offload_context
    assert offload_uuid(ctx.uid_msb, ctx.uid_lsb) == UUID
    # The uuid's two halves as Pulsar stores them.
    assert (ctx.uid_msb, ctx.uid_lsb) == (4551604436496895521, -6502338462329705636)
    assert ctx.driver_metadata is not None
    assert (ctx.driver_metadata.name, ctx.driver_metadata.properties) == ("aws-s3", {"bucket": "b"})
    wire = request_to_wire(request)
    assert wire["ledgerType"] == "OFFLOAD_LEDGER" and wire["context"]["ledgerId"] == 12


def test_invalid_findings_are_rejected_not_written() -> None:
    with pytest.raises(InvalidRequestError):
        request_for_finding(finding(topic_name="not a/valid/topic name!"))
    requests, rejected = build_requests(
        [finding(ledger_id=2), finding(ledger_id=1), finding(topic_name="../x")]
    )
    assert [r.ledger_id for r in requests] == [1, 2]
    assert len(rejected) == 1 and "topicName" in rejected[0].reason


def test_report_table_and_chart(tmp_path: Path) -> None:
    rows = [
        ReportRow("public", "public/default", "data", "bookkeeper", "candidate", 3, 3 * 2**20),
        ReportRow("public", "public/default", "cursor", "bookkeeper", "candidate", 1, 2048),
        ReportRow("acme", "acme/ns", "compacted", "bookkeeper", "report-only", 1, 10),
        ReportRow("acme", "acme/ns", "data", "bookkeeper", "excluded", 5, 0),
    ]
    assert totals(rows) == {"candidate": (4, 3 * 2**20 + 2048), "report-only": (1, 10), "excluded": (5, 0)}
    table = render_table(rows)
    assert table.row_count == 4
    render_chart(rows, tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert human_bytes(3 * 2**20) == "3.0 MiB" and human_bytes(10) == "10 B"


@pytest.mark.parametrize("ledgers", [150, 500])
def test_generator_candidates_are_in_namespaces_the_cluster_has(ledgers: int) -> None:
    """Reconcile never submits a ledger of a namespace no store knows (/managed-ledgers/<namespace>), so the
    truth's candidates must all be of namespaces the plan's managed ledgers create, small clusters too
    (150 ledgers make fewer topics than namespaces)."""
    plan = plan_cluster(ClusterSpec(ledgers=ledgers, seed=11))
    known = {namespace_of(ml) for ml, _ in plan.managed_ledgers}
    candidates = set(plan.truth.bk_candidates)
    tags = {i: parse_ledger_metadata(data) for i, data in plan.ledgers if i in candidates}
    owners = {i: md.custom("pulsar/managed-ledger") or md.custom("pulsar/schemaId") for i, md in tags.items()}
    assert {ledger_id: o for ledger_id, o in owners.items() if namespace_of(o or "") not in known} == {}


def test_generator_truth_is_consistent() -> None:
    spec = ClusterSpec(ledgers=500, seed=3)
    plan = plan_cluster(spec)
    truth = plan.truth
    ledger_ids = {i for i, _ in plan.ledgers}
    assert len(ledger_ids) == len(plan.ledgers)  # no id twice
    assert not set(truth.bk_candidates) & truth.referenced
    assert set(truth.bk_candidates) <= ledger_ids
    assert not {i for _, i in truth.offload_candidates - truth.replaced_offloads} & truth.referenced
    # A replaced offload attempt is the one candidate whose ledger is still listed (under another uuid).
    assert truth.replaced_offloads and truth.replaced_offloads <= truth.offload_candidates
    assert {i for _, i in truth.replaced_offloads} <= truth.referenced
    assert set(truth.bk_candidates.values()) == {"MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE"}
    assert len(plan.ledgers) == pytest.approx(500, rel=0.1)
    young = plan_young_orphans(spec, plan)
    assert not {i for i, _ in young.ledgers} & ledger_ids
    assert set(young.truth.excluded_ledgers.values()) >= {"too-young", "open-recently-modified"}
    assert plan_cluster(spec).ledgers == plan.ledgers  # deterministic


class FakeS3:
    """``head_object`` over {(bucket, key): user metadata}; S3 hands the metadata keys back lower-cased."""

    def __init__(self, objects: Mapping[tuple[str, str], Mapping[str, str]]) -> None:
        self.objects = objects
        self.heads: list[str] = []

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        from botocore.exceptions import ClientError

        self.heads.append(Key)
        if (Bucket, Key) not in self.objects:
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")
        return {"Metadata": {k.lower(): v for k, v in self.objects[Bucket, Key].items()}}


def pair(ledger_id: int) -> list[str]:
    return [f"{UUID}-ledger-{ledger_id}-index", f"{UUID}-ledger-{ledger_id}"]  # index first: order is ours


def test_head_owners_checks_every_object_as_the_service_does() -> None:
    """Every object of a group is HEADed: the service deletes the pair only when each existing object has
    ManagedLedgerName and the role its key calls for (one tagged object was enough here before)."""
    ml, other = "public/default/persistent/orders", "public/default/persistent/other"
    version = {"S3ManagedLedgerOffloaderFormatVersion": "1"}  # all a broker before apache/pulsar#14907 wrote

    def tags(name: str, role: str) -> dict[str, str]:
        return {**version, "ManagedLedgerName": name, "role": role}

    def data(ledger_id: int) -> str:
        return f"{UUID}-ledger-{ledger_id}"

    def index(ledger_id: int) -> str:
        return f"{UUID}-ledger-{ledger_id}-index"

    objects = {
        ("b", data(1)): tags(ml, "data"),
        ("b", index(1)): tags(ml, "index"),
        ("b", data(2)): tags(ml, "data"),
        ("b", index(2)): version,  # the index is untagged: the service would skip the pair
        ("b", data(3)): version,
        ("b", index(3)): version,
        ("b", data(4)): tags(ml, "index"),  # wrong role for its key
        ("b", index(4)): tags(ml, "index"),
        ("b", data(5)): {**version, "ManagedLedgerName": ml},  # no role
        ("b", index(5)): tags(ml, "index"),
        ("b", data(6)): tags(other, "data"),
        ("b", index(6)): tags(ml, "index"),
        ("b", index(7)): tags(ml, "index"),  # the data object vanished: the rest decides
    }
    groups: Sequence[tuple[str, str, int | None, Sequence[str]]] = [
        ("b", UUID, i, pair(i)) for i in range(1, 9)
    ]
    s3 = FakeS3(objects)
    assert head_owners(s3, groups, threads=2) == [
        ("b", UUID, 1, ml, False, False),
        ("b", UUID, 2, ml, True, False),
        ("b", UUID, 3, None, True, False),
        ("b", UUID, 4, ml, True, False),
        ("b", UUID, 5, ml, True, False),
        ("b", UUID, 6, other, False, True),  # the data object's name, and the conflict flagged
        ("b", UUID, 7, ml, False, False),
        ("b", UUID, 8, None, False, False),  # all gone: nothing to judge (the service: ALREADY_DELETED)
    ]
    assert sorted(s3.heads) == sorted(k for _, _, _, keys in groups for k in keys)


def test_generated_objects_carry_the_metadata_pulsar_writes() -> None:
    """Classic offloads: role and ManagedLedgerName (apache/pulsar#14907), which the service's own check
    accepts for every offload candidate; segments and pre-#14907 objects: neither. One untagged orphan pair,
    owner known only by its BK ledger's tag, is report-only: the service would refuse it."""
    from activities.offload import _ownership_problem
    from ledger_deletion.formats.offload_keys import ledger_object_keys, object_role

    plan = plan_cluster(ClusterSpec(ledgers=500, seed=3))
    truth = plan.truth
    meta = {key: m for key, _, m in plan.objects}
    for off_uuid, ledger_id in truth.offload_candidates:
        keys = ledger_object_keys(off_uuid, ledger_id)
        (name,) = {meta[k]["ManagedLedgerName"] for k in keys}
        assert [_ownership_problem(meta[k], name, object_role(k)) for k in keys] == ["", ""]
    segments = [k for k in meta if "-ledger-" not in k and k != "README.txt"]
    assert segments and all(set(meta[k]) == {"s3managedledgeroffloaderformatversion"} for k in segments)
    # The untagged pair whose BK copy names the topic (the other untagged pair has no BK ledger).
    bk_tagged = {
        key: int(key.rsplit("-", 1)[1])
        for key in truth.report_only_objects
        if "-ledger-" in key
        and not key.endswith("-index")
        and int(key.rsplit("-", 1)[1]) in truth.bk_candidates
    }
    assert len(bk_tagged) == 1
    ((data_key, ledger_id),) = bk_tagged.items()
    assert truth.bk_candidates[ledger_id] == "MANAGED_LEDGER"  # the BK copy itself is a candidate
    for key in (data_key, data_key + "-index"):
        assert key in truth.report_only_objects
        assert meta[key] == {"s3managedledgeroffloaderformatversion": "1"}
        problem = _ownership_problem(meta[key], "public/ns/persistent/t", object_role(key))
        assert "no ManagedLedgerName" in problem


@pytest.mark.parametrize(
    "ledger_id",
    [0, 1, 9_999, 10_000, 123_456_789, 2**31 - 2, 2**31 - 1, 2**31, 2**32 + 17, 2**63 - 1],
)
def test_listing_ids_are_the_ids_of_the_canonical_paths(ledger_id: int) -> None:
    path = ledger_path(ledger_id, "/ledgers")
    parent, child = path.rsplit("/", 1)
    assert ids_from_children("/ledgers", parent, [child]) == [ledger_id_from_path(path, "/ledgers")]


@pytest.mark.parametrize(
    ("parent", "child"),
    [
        ("/ledgers/00/0000", "L１２３４"),  # digits, but not ASCII ones
        ("/ledgers/00/0000", "L123"),
        ("/ledgers/00/0000", "L12345"),
        ("/ledgers/00/0000", "X1234"),
        ("/ledgers/00/0000", "INSTANCEID"),
        ("/ledgers/000/0000/0000/0000", "L0001"),  # a small id spelled in the long layout
        ("/ledgers/21/4748", "L3647"),  # Integer.MAX_VALUE spelled in the legacy layout
        ("/ledgers/922/3372/0368/5477", "L5808"),  # 2^63, beyond a long
        ("/ledgers/00", "L0001"),
        ("/other/00/0000", "L0001"),
    ],
)
def test_listing_skips_what_is_no_canonical_ledger_path(parent: str, child: str) -> None:
    with pytest.raises(ValueError):
        ledger_id_from_path(f"{parent}/{child}", "/ledgers")
    assert ids_from_children("/ledgers", parent, [child]) == []
