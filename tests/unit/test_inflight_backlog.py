"""The in-flight estimate's backlog comes from Pulsar's topic stats, and is exposed as a gauge.

The deletion topic is configured by its full name (``persistent://pulsar/system/__ledger_deletion``): the
admin path must be built from that form too (it was refused as "5 parts, expected 3 or 4", so the backlog
was never measured).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient, topic_path
from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.observability.metrics import Metrics
from tests.unit.admin_stub import AdminHandler, serving

SUBSCRIPTION = "ledger-deletion-worker"


def test_the_admin_path_of_a_full_topic_name() -> None:
    full = "persistent://pulsar/system/__ledger_deletion"
    assert topic_path(full) == topic_path("pulsar/system/__ledger_deletion")
    assert topic_path(full) == "/admin/v2/persistent/pulsar/system/__ledger_deletion"
    assert topic_path("persistent://t/c/ns/x") == "/admin/persistent/t/c/ns/x"
    with pytest.raises(InvalidRequestError, match="not persistent"):
        topic_path("non-persistent://t/ns/x")


class _Stats(ThreadingHTTPServer):
    daemon_threads = True
    partitioned: dict[str, object] | None = None  # partitioned-stats body, None: Pulsar's 404
    single: dict[str, object] | None = None  # stats body, None: Pulsar's 404
    paths: list[str]


class _Handler(AdminHandler):
    server: _Stats

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        path = self.path.split("?")[0]
        self.server.paths.append(path)
        body = self.server.partitioned if path.endswith("/partitioned-stats") else self.server.single
        if body is None:
            self.reply(404, b'{"reason":"Topic not found"}')
        else:
            self.reply(200, json.dumps(body).encode())


@pytest.fixture
def stats() -> Iterator[_Stats]:
    server = _Stats(("127.0.0.1", 0), _Handler)
    server.paths = []
    with serving(server) as srv:
        yield srv


def subscriptions(backlog: int) -> dict[str, object]:
    return {"subscriptions": {SUBSCRIPTION: {"msgBacklog": backlog, "type": "Shared"}, "other": {}}}


def test_a_partitioned_topics_backlog_is_its_partitioned_stats(stats: _Stats) -> None:
    stats.partitioned = {"metadata": {"partitions": 4}, "partitions": {}, **subscriptions(7)}
    admin = PulsarAdminClient(f"http://127.0.0.1:{stats.server_port}")
    assert admin.subscription_backlog("persistent://pulsar/system/__ledger_deletion", SUBSCRIPTION) == 7
    assert stats.paths == ["/admin/v2/persistent/pulsar/system/__ledger_deletion/partitioned-stats"]
    admin.close()


def test_a_non_partitioned_topics_backlog_is_its_stats(stats: _Stats) -> None:
    stats.single = subscriptions(3)
    admin = PulsarAdminClient(f"http://127.0.0.1:{stats.server_port}")
    assert admin.subscription_backlog("persistent://acme/ns/deletions", SUBSCRIPTION) == 3
    assert admin.subscription_backlog("persistent://acme/ns/deletions", "never-subscribed") == 0
    admin.close()


def test_a_topic_that_does_not_exist_has_no_backlog(stats: _Stats) -> None:
    admin = PulsarAdminClient(f"http://127.0.0.1:{stats.server_port}")
    assert admin.subscription_backlog("persistent://acme/ns/none", SUBSCRIPTION) == 0
    admin.close()


def test_the_estimate_is_a_gauge_per_tenant() -> None:
    reader = InMemoryMetricReader()
    recorded = Metrics(MeterProvider(metric_readers=[reader]))

    def gauges() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        data = reader.get_metrics_data()
        assert data is not None
        found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = {
                        tuple(sorted((p.attributes or {}).items())): p.value  # type: ignore[union-attr]
                        for p in metric.data.data_points
                    }
        return found

    recorded.inflight_estimated({"(system topic)": 12, "acme": 3}, backlog_measured=True)
    first = gauges()
    assert first["ledger_deletion_inflight_estimate"] == {
        (("tenant", "(system topic)"),): 12,
        (("tenant", "acme"),): 3,
    }
    assert first["ledger_deletion_inflight_backlog_measured"] == {(): 1}
    recorded.inflight_estimated({"(system topic)": 0}, backlog_measured=False)
    second = gauges()
    # A tenant with nothing in flight any more drops to zero rather than keeping its last value.
    assert second["ledger_deletion_inflight_estimate"][(("tenant", "acme"),)] == 0
    assert second["ledger_deletion_inflight_backlog_measured"] == {(): 0}
