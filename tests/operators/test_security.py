"""No secret ever reaches a log line, search attribute, span attribute, metric or dead letter.

The pools run with every secret the embedded stack can accept: a Pulsar token (client and admin REST) and a
ZooKeeper digest. A Temporal API key forces TLS, which the dev server does not speak, so it is checked at the
settings level (it is a SecretStr like the others and only ``temporal_client`` unwraps it).
"""

from __future__ import annotations

import logging
import uuid

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.contracts import Outcome
from ledger_deletion.observability import redaction
from ledger_deletion.observability.setup import interceptors
from ledger_deletion.ops.dlq import read_dead_letters
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.operators.support import Observed, orphan_requests, results_of, scrape
from tests.support import eventually, running_pools

pytestmark = pytest.mark.stack


def test_settings_never_show_secrets() -> None:
    token, key, digest = (f"SECRET-{uuid.uuid4().hex}" for _ in range(3))
    settings = Settings(pulsar_token=token, temporal_api_key=key, zookeeper_digest=f"user:{digest}")
    for text in (repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump())):
        for secret in (token, key, digest):
            assert secret not in text


async def test_no_secret_in_logs_search_attributes_spans_metrics_or_dead_letters(
    stack: StackEndpoints,
    observed: Observed,
    cluster: SimulatedCluster,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    token, digest_password = f"tok-SECRET-{uuid.uuid4().hex}", f"SECRET-{uuid.uuid4().hex}"
    secrets = (token, digest_password)
    run = uuid.uuid4().hex[:8]
    settings = observed.settings.with_overrides(
        topic=f"persistent://pulsar/system/__ledger_deletion_sec_{run}",
        task_queue_prefix=f"ld-sec-{run}",
        tenant_topics="",
        # model_copy does not validate: pass the SecretStr the environment would have produced.
        pulsar_token=SecretStr(token),
        zookeeper_digest=SecretStr(f"deleter:{digest_password}"),
    )
    caplog.set_level(logging.DEBUG)
    redaction.install(settings)  # what observed_client() does in every worker process
    client = await Client.connect(stack.temporal_address, interceptors=interceptors(settings))
    tenant = f"sec-{run}"
    _, requests = orphan_requests(cluster, tenant)
    async with running_pools(settings, client):
        with RequestPublisher(settings) as publisher:
            for request in requests:
                publisher.publish(
                    request, {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"}
                )
            publisher.publish_raw(b"\x01definitely not avro", {"origin": "security-test"})
        results = await results_of(client, requests)
        assert {r.outcome for r in results.values()} == {Outcome.DELETED}

        async def dead_lettered() -> None:
            assert any(d.properties.get("origin") == "security-test" for d in read_dead_letters(settings))

        await eventually(dead_lettered)

    exposed: list[str] = [record.getMessage() for record in caplog.records]
    exposed += [str(record.args) for record in caplog.records]
    captured = capfd.readouterr()
    exposed += [captured.out, captured.err]
    for workflow_id in results:
        description = await client.get_workflow_handle(workflow_id).describe()
        exposed += [f"{pair.key.name}={pair.value}" for pair in description.typed_search_attributes]
        exposed.append(str(await description.static_summary()))
    for span in observed.spans.get_finished_spans():
        exposed += [f"{k}={v!s}" for k, v in (span.attributes or {}).items()]
        exposed.append(span.name)
    for letter in read_dead_letters(settings):
        exposed += [f"{k}={v}" for k, v in letter.properties.items()]
    exposed.append(scrape(observed.metrics_url))
    text = "\n".join(exposed)
    assert tenant in text  # the evidence above really covers this run
    for secret in secrets:
        assert secret not in text
