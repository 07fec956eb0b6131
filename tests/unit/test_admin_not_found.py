"""Only Pulsar's own 404 says a topic is gone: that answer skips the in-use check, so it must not be faked.

A proxy, an ingress with a wrong path prefix or a broker without the endpoint also answer 404, with an HTML
page or an empty body. Taking that for "no such topic" would delete ledgers the owner broker still lists.
"""

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.contracts import AskOwnerBrokerInput, CheckTopicInput
from tests.unit.admin_stub import AdminHandler, serving

TOPIC = "public/default/orders-partition-0"
PULSAR_404 = (b'{"reason":"Topic not found"}', "application/json")


class _NotFoundServer(ThreadingHTTPServer):
    daemon_threads = True
    status = 404
    body, content_type = PULSAR_404
    partitions_body = b'{"partitions":0}'


class _Handler(AdminHandler):
    server: _NotFoundServer

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.split("?")[0].endswith("/partitions"):
            # Pulsar answers partitioned metadata of a missing topic with 0 partitions.
            self.reply(200, self.server.partitions_body)
        else:
            self.reply(self.server.status, self.server.body, self.server.content_type)


@pytest.fixture
def server() -> Iterator[_NotFoundServer]:
    with serving(_NotFoundServer(("127.0.0.1", 0), _Handler)) as srv:
        yield srv


@pytest.fixture
def activities(server: _NotFoundServer) -> Iterator[PulsarAdminActivities]:
    client = PulsarAdminClient(f"http://127.0.0.1:{server.server_port}", timeout_seconds=5)
    yield PulsarAdminActivities(client)
    client.close()


def test_pulsars_404_means_the_topic_is_gone(activities: PulsarAdminActivities) -> None:
    env = ActivityEnvironment()
    assert env.run(activities.check_topic, CheckTopicInput(TOPIC)).exists is False
    answer = env.run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7))
    assert (answer.topic_exists, answer.in_use) == (False, False)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html><body><h2>HTTP ERROR 404 Not Found</h2></body></html>", "text/html"),  # Jetty, no route
        (b"", "text/plain"),  # an ingress or load balancer
        (b'{"message":"no Route matched with those values"}', "application/json"),  # an API gateway
        (b'"Topic not found"', "application/json"),  # JSON, but not Pulsar's error entity
    ],
)
def test_any_other_404_is_an_admin_api_we_cannot_read(
    server: _NotFoundServer, activities: PulsarAdminActivities, body: bytes, content_type: str
) -> None:
    server.body, server.content_type = body, content_type
    env = ActivityEnvironment()
    for call in (
        lambda: env.run(activities.check_topic, CheckTopicInput(TOPIC)),
        lambda: env.run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7)),
    ):
        with pytest.raises(ApplicationError, match="404 without Pulsar's error body") as raised:
            call()
        # Retried like any unreachable admin API, then dead-lettered: never taken as "topic gone".
        assert (raised.value.type, raised.value.non_retryable) == ("AdminApiUnavailable", False)


@pytest.mark.parametrize(
    "body",
    [
        b"{}",  # a proxy's empty JSON
        b'{"partitions":{},"metadata":{"partitions":2}}',  # partitioned-internalStats of a base name
        b"[]",
        b'{"ledgers":null,"cursors":{}}',
    ],
)
def test_a_200_that_is_not_internal_stats_is_no_answer(
    server: _NotFoundServer, activities: PulsarAdminActivities, body: bytes
) -> None:
    """Only internalStats' ``ledgers`` list can show a ledger unused: anything else would read as "nothing
    referenced" and let a ledger in use be deleted."""
    server.status, server.body, server.content_type = 200, body, "application/json"
    with pytest.raises(ApplicationError, match="not internalStats") as raised:
        ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7))
    assert (raised.value.type, raised.value.non_retryable) == ("AdminApiUnavailable", False)


def test_internal_stats_without_the_ledger_say_it_is_unused(
    server: _NotFoundServer, activities: PulsarAdminActivities
) -> None:
    server.status, server.body = 200, b'{"ledgers":[{"ledgerId":8}],"cursors":{}}'
    answer = ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7))
    assert (answer.in_use, answer.topic_exists) == (False, True)


@pytest.mark.parametrize("body", [b"{}", b'{"partitions":"2"}', b"null"])
def test_partitioned_metadata_without_a_count_is_no_answer(
    server: _NotFoundServer, activities: PulsarAdminActivities, body: bytes
) -> None:
    """A 200 without ``{"partitions": N}`` used to read as 0 partitions: "no such topic", no in-use check."""
    server.partitions_body = body
    with pytest.raises(ApplicationError, match="no partition count") as raised:
        ActivityEnvironment().run(activities.check_topic, CheckTopicInput(TOPIC))
    assert (raised.value.type, raised.value.non_retryable) == ("AdminApiUnavailable", False)
