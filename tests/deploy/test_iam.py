"""The S3 IAM policies in deploy/iam (docs/security.md): each parses, names only its bucket's placeholder and
the actions its side needs, is the document docs/security.md shows, and allows every S3 call the service
makes, found in the code by botocore's own operation names: the audit log's (ledger_deletion/audit) on the
audit bucket, every other on the offload bucket."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from tests.deploy.support import DEPLOY, ROOT

IAM = DEPLOY / "iam"
BUCKET_ARN = "arn:aws:s3:::OFFLOAD_BUCKET"
OBJECTS_ARN = f"{BUCKET_ARN}/*"
READER = {BUCKET_ARN: {"s3:ListBucket"}, OBJECTS_ARN: {"s3:GetObject"}}
DELETER = {BUCKET_ARN: {"s3:ListBucket"}, OBJECTS_ARN: {"s3:GetObject", "s3:DeleteObject"}}
# The IAM action each S3 operation the service calls is authorized by (the S3 User Guide's "Actions, resources
# and condition keys for Amazon S3"): HEAD requests by the GET action of the same resource, a multi-object
# delete by s3:DeleteObject on each key.
ACTION_OF = {
    "head_bucket": ("s3:ListBucket", BUCKET_ARN),
    "list_objects_v2": ("s3:ListBucket", BUCKET_ARN),
    "head_object": ("s3:GetObject", OBJECTS_ARN),
    "get_object": ("s3:GetObject", OBJECTS_ARN),
    "delete_objects": ("s3:DeleteObject", OBJECTS_ARN),
    "delete_object": ("s3:DeleteObject", OBJECTS_ARN),
}
# The service's code (the synthetic clusters of tests and benchmarks are devstack's, outside it).
PRODUCT = ("ledger_deletion", "activities", "workers", "reconcile")
NOT_PRODUCT: set[object] = set()
# The audit log's bucket: the pulsar pool adds records (PutObject with If-None-Match), never deletes or
# overwrites one; `ledger-deletion audit` and reconcile list and read them.
AUDIT_CODE = ROOT / "ledger_deletion" / "audit"
AUDIT_ARN = "arn:aws:s3:::AUDIT_BUCKET"
AUDIT_OBJECTS = f"{AUDIT_ARN}/*"
AUDIT_WRITER = {AUDIT_OBJECTS: {"s3:PutObject"}}
AUDIT_READER = {AUDIT_ARN: {"s3:ListBucket"}, AUDIT_OBJECTS: {"s3:GetObject"}}
AUDIT_ACTION_OF = {
    "put_object": ("s3:PutObject", AUDIT_OBJECTS),
    "list_objects_v2": ("s3:ListBucket", AUDIT_ARN),
    "get_object": ("s3:GetObject", AUDIT_OBJECTS),
}


def policy(name: str) -> dict[str, Any]:
    document = json.loads((IAM / f"{name}.json").read_text())
    assert isinstance(document, dict)
    return document


def grants(document: dict[str, Any]) -> dict[str, set[str]]:
    """Resource ARN -> the actions allowed on it; only plain Allow statements of actions on resources."""
    assert document["Version"] == "2012-10-17"
    allowed: dict[str, set[str]] = {}
    for statement in document["Statement"]:
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource"}, statement  # no Not*, no Principal
        assert statement["Effect"] == "Allow"
        for resource in statement["Resource"]:
            allowed.setdefault(resource, set()).update(statement["Action"])
    return allowed


@pytest.mark.parametrize(("name", "expected"), [("offload-reader", READER), ("offload-deleter", DELETER)])
def test_each_policy_allows_exactly_its_sides_actions_on_the_offload_bucket(
    name: str, expected: dict[str, set[str]]
) -> None:
    assert grants(policy(name)) == expected


def test_only_the_deleter_may_delete() -> None:
    reader = set().union(*grants(policy("offload-reader")).values())
    deleter = set().union(*grants(policy("offload-deleter")).values())
    assert not any("Delete" in action for action in reader)
    assert deleter - reader == {"s3:DeleteObject"}


@pytest.mark.parametrize(
    ("name", "expected"), [("audit-writer", AUDIT_WRITER), ("audit-reader", AUDIT_READER)]
)
def test_each_audit_policy_allows_exactly_its_sides_actions_on_the_audit_bucket(
    name: str, expected: dict[str, set[str]]
) -> None:
    assert grants(policy(name)) == expected


def test_the_audit_bucket_policy_denies_every_delete_and_every_overwrite() -> None:
    """AWS S3 User Guide, "Enforce conditional writes on Amazon S3 buckets" (conditional-writes-enforce):
    a bucket policy may test the condition key s3:if-none-match; the writer sends If-None-Match: * on its one
    PutObject per batch (ledger_deletion/audit/store.py), never a multipart upload, which would need the
    s3:ObjectCreationOperation exemption that page describes."""
    document = policy("audit-bucket-policy")
    assert {s["Effect"] for s in document["Statement"]} == {"Deny"}
    denied = {action for s in document["Statement"] for action in s["Action"]}
    assert {"s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObject"} <= denied
    (overwrite,) = [s for s in document["Statement"] if s["Action"] == ["s3:PutObject"]]
    # Denied unless the request carries If-None-Match: a PUT on an existing key then fails with 412.
    assert overwrite["Condition"] == {"Null": {"s3:if-none-match": "true"}}


def test_the_policies_are_the_documents_the_security_page_shows() -> None:
    shown = re.findall(r"```json\n(.*?)```", (ROOT / "docs" / "security.md").read_text(), re.S)
    names = ["offload-reader", "offload-deleter", "audit-writer", "audit-reader", "audit-bucket-policy"]
    assert [json.loads(block) for block in shown] == [policy(name) for name in names]


def test_the_check_catches_a_broader_grant() -> None:
    broad = policy("offload-deleter")
    broad["Statement"][1]["Action"].append("s3:*")
    assert grants(broad) != DELETER
    other_bucket = policy("offload-reader")
    other_bucket["Statement"][0]["Resource"] = ["arn:aws:s3:::*"]
    assert grants(other_bucket) != READER


@cache
def s3_operations() -> frozenset[str]:
    """Every S3 operation as boto3 names its client methods (head_object, delete_objects, ...)."""
    model = botocore.session.get_session().get_service_model("s3")
    return frozenset(xform_name(name) for name in model.operation_names)


def s3_calls(*, audit: bool = False) -> dict[str, list[str]]:
    """Each S3 operation called anywhere in the service's code, with where: on the offload bucket, or with
    ``audit`` the audit log's (the code under ledger_deletion/audit)."""
    operations = s3_operations()
    calls: dict[str, list[str]] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in NOT_PRODUCT or (AUDIT_CODE in path.parents) != audit:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in operations
                ):
                    calls.setdefault(node.func.attr, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return calls


def test_every_s3_call_the_service_makes_is_one_the_policies_allow() -> None:
    calls = s3_calls()
    # The calls this test knows the code makes: if one disappears the scan has stopped seeing them.
    assert {"head_bucket", "head_object", "delete_objects", "list_objects_v2"} <= set(calls)
    unknown = {operation: where for operation, where in calls.items() if operation not in ACTION_OF}
    assert not unknown, f"S3 calls with no action in deploy/iam (add them there and here): {unknown}"
    deleter = grants(policy("offload-deleter"))
    for operation in calls:
        action, resource = ACTION_OF[operation]
        assert action in deleter[resource], operation


def test_every_s3_call_of_the_audit_log_is_one_its_policies_allow() -> None:
    calls = s3_calls(audit=True)
    assert set(calls) == {"put_object", "list_objects_v2", "get_object"}, calls
    writer, reader = grants(policy("audit-writer")), grants(policy("audit-reader"))
    action, resource = AUDIT_ACTION_OF["put_object"]
    assert action in writer[resource]
    for operation in set(calls) - {"put_object"}:
        action, resource = AUDIT_ACTION_OF[operation]
        assert action in reader[resource], operation


def test_the_reader_may_do_every_s3_call_of_the_reading_processes() -> None:
    """The watcher and reconcile only head and list: everything but delete_objects."""
    reader = grants(policy("offload-reader"))
    for operation in set(s3_calls()) - {"delete_objects", "delete_object"}:
        action, resource = ACTION_OF[operation]
        assert action in reader[resource], operation


def test_the_placeholder_is_no_bucket_name() -> None:
    """S3 bucket names have no underscore or capital: an unedited policy grants nothing."""
    assert not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", BUCKET_ARN.rsplit(":", 1)[1])
