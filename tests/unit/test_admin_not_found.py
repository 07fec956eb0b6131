"""Only Pulsar's own 404 says a topic is gone: that answer skips the in-use check, so it must not be faked.

A proxy, an ingress with a wrong path prefix or a broker without the endpoint also answer 404, with an HTML
page or an empty body. Taking that for "no such topic" would delete ledgers the owner broker still lists.

A real broker answers internal-info for a managed ledger that does not exist with a bare 500 (an exception
no ExceptionMapper maps, apache/pulsar#17121), the same answer as for a metadata-store timeout on that path:
the topic is then gone only if Pulsar's partitioned-metadata endpoint answers its own 404.
"""

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.contracts import AskOwnerBrokerInput, CheckTopicInput
from ledger_deletion.errors import AdminApiUnavailable
from tests.unit.admin_stub import AdminHandler, serving

TOPIC = "public/default/orders-partition-0"
PULSAR_404 = (b'{"reason":"Topic not found"}', "application/json")
# What a 2.10-4.x broker (Jersey 2 on Jetty) sends for internal-info of a missing managed ledger: Jersey's
# sendError(500, "Request failed.") as Jetty's error page, JSON for Accept: application/json.
UNMAPPED_500_JSON = (
    b'{"servlet":"org.glassfish.jersey.servlet.ServletContainer-6d4e5011","message":"Request failed.",'
    b'"url":"/admin/v2/persistent/public/default/orders-partition-0/internal-info","status":"500"}',
    "application/json",
)
UNMAPPED_500_HTML = (  # the same page for a client that accepts HTML
    b"<html>\n<head>\n<title>Error 500 Request failed.</title>\n</head>\n<body><h2>HTTP ERROR 500 "
    b"Request failed.</h2>\n<table>\n<tr><th>URI:</th><td>/admin/v2/persistent/public/default/"
    b"orders-partition-0/internal-info</td></tr>\n</table>\n</body>\n</html>\n",
    "text/html;charset=iso-8859-1",
)
# internalGetPartitionedMetadataAsync (2.8+) after checkNonPartitionedTopicExists found no managed ledger.
PARTITIONS_PULSAR_404 = b'{"reason":"Topic persistent://public/default/orders-partition-0 not found"}'


class _NotFoundServer(ThreadingHTTPServer):
    daemon_threads = True
    status = 404
    body, content_type = PULSAR_404
    partitions_status = 200
    partitions_body = b'{"partitions":0}'


class _Handler(AdminHandler):
    server: _NotFoundServer

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.split("?")[0].endswith("/partitions"):
            # 0 partitions by default: a broker before 2.8 says so for a missing topic too.
            self.reply(self.server.partitions_status, self.server.partitions_body)
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


@pytest.mark.parametrize("answer", [UNMAPPED_500_JSON, UNMAPPED_500_HTML], ids=["json", "html"])
def test_real_pulsars_answers_for_a_missing_managed_ledger_mean_the_topic_is_gone(
    server: _NotFoundServer, activities: PulsarAdminActivities, answer: tuple[bytes, str]
) -> None:
    """internal-info's bare 500, then the partitioned metadata's Pulsar 404: what a real broker says for a
    deleted topic. Before, the 500 was retried and the request dead-lettered, never decided."""
    server.status, (server.body, server.content_type) = 500, answer
    server.partitions_status, server.partitions_body = 404, PARTITIONS_PULSAR_404
    result = ActivityEnvironment().run(activities.check_topic, CheckTopicInput(TOPIC))
    assert (result.exists, result.partitions) == (False, 0)


def test_a_partitioned_topic_behind_the_bare_500_exists(
    server: _NotFoundServer, activities: PulsarAdminActivities
) -> None:
    server.status, (server.body, server.content_type) = 500, UNMAPPED_500_JSON
    server.partitions_body = b'{"partitions":3}'
    result = ActivityEnvironment().run(activities.check_topic, CheckTopicInput("public/default/orders"))
    assert (result.exists, result.partitions) == (True, 3)


@pytest.mark.parametrize(
    ("partitions_status", "partitions_body", "reason"),
    [
        # A non-partitioned topic that exists (a 2.8+ broker checked its managed ledger), or a broker before
        # 2.8 that answers 0 for a missing topic too: the bare 500 was some other failure.
        (200, b'{"partitions":0}', "does not say the topic is gone"),
        (
            404,
            b"<html><body><h2>HTTP ERROR 404 Not Found</h2></body></html>",
            "404 without Pulsar's error body",
        ),
        (500, b'{"reason":"org.apache.pulsar.metadata.api.MetadataStoreException: timeout"}', "answered 500"),
    ],
    ids=["zero-partitions", "proxy-404", "pulsar-500"],
)
def test_the_bare_500_without_pulsars_404_for_the_topic_is_retried(
    server: _NotFoundServer,
    activities: PulsarAdminActivities,
    partitions_status: int,
    partitions_body: bytes,
    reason: str,
) -> None:
    server.status, (server.body, server.content_type) = 500, UNMAPPED_500_JSON
    server.partitions_status, server.partitions_body = partitions_status, partitions_body
    with pytest.raises(ApplicationError, match=reason) as raised:
        ActivityEnvironment().run(activities.check_topic, CheckTopicInput(TOPIC))
    assert (raised.value.type, raised.value.non_retryable) == ("AdminApiUnavailable", False)


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        # Pulsar's own 500 (RestException): a failure Pulsar knew, not the missing managed ledger.
        (500, b'{"reason":"\\n --- An unexpected error occurred in the server ---"}', "application/json"),
        (500, b"<html><body><h2>502 Bad Gateway</h2></body></html>", "text/html"),  # a proxy's 500 page
        (500, b"", "text/plain"),
        (503, UNMAPPED_500_JSON[0], "application/json"),  # Jersey's words, but not its status
    ],
    ids=["pulsar-reason", "proxy-page", "empty", "503"],
)
def test_any_other_failure_of_internal_info_is_retried_whatever_the_partitions_say(
    server: _NotFoundServer, activities: PulsarAdminActivities, status: int, body: bytes, content_type: str
) -> None:
    """Only the bare 500 a missing managed ledger produces leads to the second question: even with Pulsar's
    404 waiting on the partitions endpoint, any other failure is retried."""
    server.status, server.body, server.content_type = status, body, content_type
    server.partitions_status, server.partitions_body = 404, PARTITIONS_PULSAR_404
    with pytest.raises(ApplicationError, match=f"answered {status}") as raised:
        ActivityEnvironment().run(activities.check_topic, CheckTopicInput(TOPIC))
    assert (raised.value.type, raised.value.non_retryable) == ("AdminApiUnavailable", False)


def test_the_bare_500_is_no_answer_to_callers_that_did_not_ask_for_it(server: _NotFoundServer) -> None:
    """``internal_info`` without ``unmapped_500_ok`` raises on it, as on any 500: no caller can read its
    ``found=False`` as "not found" by mistake."""
    server.status, (server.body, server.content_type) = 500, UNMAPPED_500_JSON
    client = PulsarAdminClient(f"http://127.0.0.1:{server.server_port}", timeout_seconds=5)
    try:
        with pytest.raises(AdminApiUnavailable, match="answered 500"):
            client.internal_info(TOPIC)
        assert client.internal_info(TOPIC, unmapped_500_ok=True).unmapped_500
    finally:
        client.close()


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


PENDING_ACK = "public/default/orders-sub__transaction_pending_ack"


@pytest.mark.parametrize("status", [409, 500])
def test_an_owner_that_cannot_load_a_transaction_internal_topic_says_so(
    server: _NotFoundServer, activities: PulsarAdminActivities, status: int
) -> None:
    """BrokerService refuses to load a pending-ack store or the coordinator's log as a topic: 409 since 2.11,
    500 before, Pulsar's error body either way. The owner cannot tell what such a topic references; the
    answer says so, and reads as "in use" to a workflow that does not know the field."""
    reason = f"Can not create transaction system topic persistent://{PENDING_ACK}"
    server.status, server.body, server.content_type = (
        status,
        f'{{"reason":"{reason}"}}'.encode(),
        "application/json",
    )
    answer = ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(PENDING_ACK, 7))
    assert (answer.owner_cannot_load, answer.in_use) == (True, True)


def test_another_conflict_is_still_an_error(
    server: _NotFoundServer, activities: PulsarAdminActivities
) -> None:
    """Not an answer about the ledger: retried (the topic's deletion ends in Pulsar's 404 for it)."""
    server.status, server.body, server.content_type = (
        409,
        b'{"reason":"Topic is being deleted"}',
        "application/json",
    )
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7))
    assert raised.value.type == "AdminApiUnavailable" and not raised.value.non_retryable
