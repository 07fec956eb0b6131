"""The security review's findings, checked in code.

1. The admin token follows a redirect only within the cluster. Rule (``adapters/pulsar_admin.py``): only
   a 307 is followed, never from https to http, and only to the configured admin address, a host listed in
   ``trusted_hosts`` or a broker the cluster lists; a redirect anywhere else is refused before anything
   is sent there (tests/unit/test_admin_redirects.py has every case).
2. No secret (Pulsar token, ZooKeeper digest) in logs, spans, search attributes, workflow histories or
   dead-letter properties, on a real run that deletes, skips and dead-letters.
3. ZooKeeper operations stay under the ledgers root (reads, deletes, and the pruning of empty parents).
4. S3 deletes only the keys derived from the offload context: exact keys, no listing, no prefix delete;
   streaming-offload segments (which may hold other ledgers) are not deleted at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from devstack.cluster import SimulatedCluster
from devstack.faults import S3FaultProxy, read_dead_letters
from devstack.soak import latest_result
from devstack.stack import StackEndpoints
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.adapters.zookeeper import LedgerStore
from ledger_deletion.contracts import Outcome
from ledger_deletion.errors import ConfigurationError, RedirectRefused
from ledger_deletion.formats.bk_metadata import build_pulsar_ledger_metadata, managed_ledger_custom_metadata
from ledger_deletion.formats.bk_paths import is_under_root, ledger_path
from ledger_deletion.formats.offload_keys import offload_keys_for_context
from ledger_deletion.observability import tracing
from ledger_deletion.observability.setup import observed_client
from ledger_deletion.request import (
    LedgerComponent,
    LedgerInfo,
    LedgerType,
    OffloadContext,
    OffloadDriverMetadata,
    PendingDeleteLedgerInfo,
)
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.support import running_pools

# The whole module runs with the fault tests (the stack-free checks take milliseconds).
pytestmark = pytest.mark.stack

TOKEN = "tok-" + uuid.uuid4().hex


# --- 1. admin token across redirects ---------------------------------------------------------------------


def admin_with(routes: dict[str, httpx.Response], base: str, trusted: frozenset[str] = frozenset()) -> Any:
    """A PulsarAdminClient whose HTTP goes to ``routes`` (by netloc); returns (client, requests seen)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return routes[request.url.netloc.decode()]

    admin = PulsarAdminClient(base, TOKEN, trusted_hosts=trusted)
    admin._http = httpx.Client(transport=httpx.MockTransport(handle), follow_redirects=False)
    return admin, seen


def redirect_to(url: str) -> httpx.Response:
    return httpx.Response(307, headers={"Location": url})


def test_token_never_follows_a_redirect_to_another_port_of_the_same_host() -> None:
    """Another port of the admin host is another service until the cluster lists a broker there."""
    admin, seen = admin_with(
        {
            "broker:8080": redirect_to("http://broker:8081/admin/v2/persistent/t/n/x/internalStats"),
            "broker:8081": httpx.Response(200, json={"ledgers": []}),
        },
        "http://broker:8080",
    )
    with pytest.raises(RedirectRefused):
        admin.internal_stats("t/n/x")
    assert [r.url.netloc.decode() for r in seen] == ["broker:8080"]


def test_token_follows_a_redirect_to_a_trusted_broker() -> None:
    admin, seen = admin_with(
        {
            "broker-a:8080": redirect_to("http://broker-b:8080/admin/v2/persistent/t/n/x/internalStats"),
            "broker-b:8080": httpx.Response(200, json={}),
        },
        "http://broker-a:8080",
        trusted=frozenset({"broker-b"}),
    )
    assert admin.internal_stats("t/n/x").found
    assert seen[-1].headers.get("Authorization") == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("base", "target"),
    [
        ("http://broker:8080", "http://evil.example:8080/steal"),  # another host
        ("https://broker:8443", "http://broker:8080/admin"),  # scheme downgrade, same host
        ("http://broker:8080", "http://broker.evil.example:8080/x"),  # look-alike host name
    ],
)
def test_token_never_follows_a_redirect_out_of_the_trust_domain(base: str, target: str) -> None:
    netloc = urlsplit(base).netloc
    admin, seen = admin_with(
        {netloc: redirect_to(target), urlsplit(target).netloc: httpx.Response(200)}, base
    )
    with pytest.raises(RedirectRefused):
        admin.internal_stats("t/n/x")
    assert [r.url.netloc.decode() for r in seen] == [netloc]  # the target was never contacted


# --- 3. ZooKeeper stays under the ledgers root -----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers",
        "/ledgers/",
        "/ledgers-evil/00/0000/L0001",
        "/ledgers/../managed-ledgers/t",
        "/ledgers/./00",
        "/ledgers//00",
        "ledgers/00/0000/L0001",
        "/managed-ledgers/public/default/persistent/t",
    ],
)
def test_paths_outside_the_ledgers_root_are_refused(path: str) -> None:
    assert not is_under_root(path, "/ledgers")
    store = LedgerStore("127.0.0.1:1", "/ledgers")
    with pytest.raises(ConfigurationError):
        store._guard(path)


@pytest.mark.parametrize("ledger_id", [0, 1, 9999, 2**31 - 1, 2**31, 2**32, 2**63 - 1])
def test_every_ledger_path_is_under_the_root(ledger_id: int) -> None:
    assert LedgerStore("127.0.0.1:1", "/ledgers").path_of(ledger_id).startswith("/ledgers/")


def test_the_ledgers_root_cannot_be_the_zookeeper_root() -> None:
    for root in ("/", "", "ledgers"):
        with pytest.raises(ConfigurationError):
            LedgerStore("127.0.0.1:1", root)


def test_delete_prunes_empty_parents_but_never_the_root_or_anything_outside(fault_zk: Any) -> None:
    root = f"/ledgers-sec-{uuid.uuid4().hex[:8]}"
    neighbour = f"{root}-neighbour/00/0000/L0001"  # a prefix look-alike of the root
    outside = f"/managed-ledgers/sec-{uuid.uuid4().hex[:8]}"
    metadata = build_pulsar_ledger_metadata(managed_ledger_custom_metadata("sec/ns/persistent/t"))
    fault_zk.create(neighbour, metadata, makepath=True)
    fault_zk.create(outside, b"keep", makepath=True)
    fault_zk.create(ledger_path(1, root), metadata, makepath=True)
    store = LedgerStore(fault_zk.hosts if isinstance(fault_zk.hosts, str) else _hosts(fault_zk), root)
    try:
        znode = store.read(1)
        assert znode is not None
        assert store.delete(1, znode.version) is True
    finally:
        store.close()
    assert fault_zk.exists(root) is not None, "the root itself was pruned"
    assert fault_zk.get_children(root) == []  # 00/0000 went with the ledger
    assert fault_zk.exists(neighbour) and fault_zk.exists(outside)


def _hosts(zk: Any) -> str:
    return ",".join(f"{host}:{port}" for host, port in zk.hosts)


# --- 2 and 4: a real run with secrets configured, S3 traffic recorded -------------------------------------


async def test_no_secrets_anywhere_and_only_derived_s3_keys_deleted(
    fault_endpoints: StackEndpoints,
    fault_settings: Settings,
    s3_proxy: S3FaultProxy,
    cluster: SimulatedCluster,
    fault_zk: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    digest = "sec-user:pw-" + uuid.uuid4().hex
    settings = fault_settings.with_overrides(
        pulsar_token=SecretStr(TOKEN), zookeeper_digest=SecretStr(digest)
    )
    secrets = [TOKEN, digest, digest.split(":", 1)[1]]
    spans = InMemorySpanExporter()
    tracing.install("security-test", extra_processors=(SimpleSpanProcessor(spans),))
    # The worker's own wiring (redaction of secret values in log records, tracing, interceptors), as
    # `ledger-deletion worker` sets it up; metrics ports off (other processes may hold the defaults).
    client = await observed_client(settings.with_overrides(metrics_port=0, temporal_metrics_port=0), ["all"])

    # An offloaded ledger whose bucket also holds look-alike keys sharing its prefix, and a BK ledger. The
    # streaming-offload segments of ids[1] are derived too, but never deleted (they may hold other ledgers).
    topic = f"sec-{uuid.uuid4().hex[:8]}/ns/t-partition-0"
    ids = cluster.new_ledger_ids(4)
    created = cluster.create_topic(topic, ids, offloaded={ids[0]}, segments={ids[1]: 2})
    derived = {k for i in ids[:2] for k in cluster.offload_keys(topic, i)}
    segment_keys = set(cluster.offload_keys(topic, ids[1]))
    look_alikes = {(b, k + suffix) for b, k in derived for suffix in ("-extra", "/child", ".bak")}
    for bucket, key in look_alikes:
        cluster.s3.put_object(Bucket=bucket, Key=key, Body=b"not derived: must stay")
    requests = cluster.trim(topic, ids[:2], lambda r: None)
    not_s3 = PendingDeleteLedgerInfo(  # decodes, then dead-lettered by the workflow: driver not S3
        topic,
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.OFFLOAD_LEDGER,
        ids[2],
        context=LedgerInfo(
            ids[2], offload_context=OffloadContext(1, 1, driver_metadata=OffloadDriverMetadata("gcs"))
        ),
        check_ledger_still_in_use=False,
    )
    s3_proxy.recorded.clear()
    caplog.set_level(logging.DEBUG)
    async with running_pools(settings, client):
        with RequestPublisher(settings) as publisher:
            for request in [*requests, not_s3]:
                publisher.publish(request)
            publisher.publish_raw(b"\x00 not a request")
        results = {r.workflow_id: await latest_result(client, r.workflow_id, 90) for r in [*requests, not_s3]}
        histories = [
            json.dumps((await client.get_workflow_handle(w).fetch_history()).to_json_dict()) for w in results
        ]
        attributes = [
            str((await client.get_workflow_handle(w).describe()).typed_search_attributes) for w in results
        ]
    offloads = [r for r in requests if r.ledger_type is LedgerType.OFFLOAD_LEDGER]
    streamed = next(r for r in offloads if r.ledger_id == ids[1])
    assert results[streamed.workflow_id].outcome is Outcome.SKIPPED_METADATA_MISMATCH
    others = {r.outcome for w, r in results.items() if w not in (not_s3.workflow_id, streamed.workflow_id)}
    assert others == {Outcome.DELETED}
    assert results[not_s3.workflow_id].outcome is Outcome.DEAD_LETTERED
    letters = await asyncio.to_thread(read_dead_letters, settings, 1.0, 2, 30.0)
    assert len(letters) >= 2
    del created

    # 2. No secret anywhere an operator (or an attacker with read access to them) could look.
    places = {
        "logs": caplog.text,
        "histories": "\n".join(histories),
        "search attributes": "\n".join(attributes),
        "dead-letter properties": "\n".join(json.dumps(m.properties()) for m in letters),
        "spans": "\n".join(
            json.dumps(
                {"name": s.name, "attributes": dict(s.attributes or {}), "events": [str(e) for e in s.events]}
            )
            for s in spans.get_finished_spans()
        ),
    }
    assert spans.get_finished_spans(), "no spans recorded: the check below would prove nothing"
    leaks = {where: s for where, text in places.items() for s in secrets if s in text}
    assert leaks == {}

    # 4. S3: only HEAD / DeleteObjects of derived keys; never a listing, never a prefix.
    derived_keys = {k for _, k in derived}
    for method, path, body in s3_proxy.recorded:
        parts = urlsplit(path)
        query = parse_qs(parts.query, keep_blank_values=True)
        assert "list-type" not in query and "prefix" not in query, (method, path)
        if method == "HEAD" and parts.path.strip("/") in {b for b, _ in derived}:
            continue  # HeadBucket: is the bucket there before a missing key counts as deleted?
        if method == "HEAD":
            assert parts.path.split("/", 2)[2] in derived_keys, path
        elif method == "POST" and "delete" in query:
            keys = {el.text for el in ET.fromstring(body).iter() if el.tag.endswith("Key")}
            assert keys and keys <= derived_keys, keys - derived_keys
        else:
            raise AssertionError(f"unexpected S3 request {method} {path}")
    assert not any(cluster.object_exists(k, b) for b, k in derived - segment_keys)
    assert all(cluster.object_exists(k, b) for b, k in segment_keys)
    assert all(cluster.object_exists(k, b) for b, k in look_alikes)
    # And the derivation itself is exact: the keys come from the context, nothing else.
    for request in requests:
        if request.ledger_type is LedgerType.OFFLOAD_LEDGER:
            assert request.context is not None and request.context.offload_context is not None
            derived_now = offload_keys_for_context(request.context.offload_context, request.ledger_id, "b")
            assert {k for _, k in derived_now} <= derived_keys
