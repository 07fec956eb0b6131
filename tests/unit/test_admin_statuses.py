"""Every answer the admin calls can get, classified as Pulsar means it: only a name Pulsar rejects as invalid
is permanent (dead-lettered at once); what a rolling restart, a bundle move, a rate limit or a proxy says is
retried. The reasons are the broker's own (ledger_deletion/adapters/pulsar_admin.py names where each comes
from)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.pulsar_admin import PulsarAdminActivities
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.contracts import AskOwnerBrokerInput
from ledger_deletion.errors import AdminApiUnavailable, AuthorizationError, InvalidRequestError
from tests.unit.admin_stub import AdminHandler, serving

TOPIC = "public/default/orders-partition-0"
FULL = f"persistent://{TOPIC}"


def reason(text: str) -> bytes:
    return ('{"reason":"' + text + '"}').encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    body = b"{}"
    content_type = "application/json"
    reset = False  # close the connection with an RST instead of answering
    cut_short = False  # announce a longer body than is sent, then close


class _Handler(AdminHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        srv = self.server
        if srv.reset:
            # SO_LINGER with a zero timeout: close() sends RST, as a broker killed mid-request does.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if srv.cut_short:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"ledgers": [')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.reply(srv.status, srv.body, srv.content_type)


@pytest.fixture
def server() -> Iterator[_Server]:
    with serving(_Server(("127.0.0.1", 0), _Handler)) as srv:
        yield srv


@pytest.fixture
def client(server: _Server) -> Iterator[PulsarAdminClient]:
    admin = PulsarAdminClient(f"http://127.0.0.1:{server.server_port}", timeout_seconds=5)
    yield admin
    admin.close()


TRANSIENT = [
    # validateTopicOwnershipAsync: no web service URL for the bundle (unloading, owner restarting)
    pytest.param(412, reason(f"Failed to find ownership for topic:{FULL}"), id="412-no-ownership"),
    # validateTopicOwnershipAsync: the lookup failed with IllegalArgumentException/IllegalStateException
    pytest.param(412, reason(f"Can't find owner for topic {FULL}"), id="412-no-owner"),
    # checkLocalOrGetPeerReplicationCluster: a global namespace's settings, fixed by configuration
    pytest.param(
        412,
        reason(f"Namespace missing local cluster name in clusters list: local_cluster=a ns={TOPIC}"),
        id="412-replication-settings",
    ),
    pytest.param(412, b"<html>Precondition Failed</html>", id="412-from-a-proxy"),
    pytest.param(429, b"Too Many Requests", id="429-rate-limit"),
    pytest.param(500, b"\n --- An unexpected error occurred in the server ---\n", id="500"),
    pytest.param(502, b"<html>Bad Gateway</html>", id="502-proxy"),
    pytest.param(503, reason("Failed to validate global cluster configuration"), id="503"),
    pytest.param(504, b"", id="504-proxy"),
    pytest.param(409, reason("Concurrent modification"), id="409-bad-version"),
    pytest.param(400, b"<html>Bad Request</html>", id="400-from-a-proxy"),
    pytest.param(301, b"", id="301-never-sent-by-pulsar"),
]


@pytest.mark.parametrize(("status", "body"), TRANSIENT)
def test_a_passing_answer_is_retried(
    server: _Server, client: PulsarAdminClient, status: int, body: bytes
) -> None:
    server.status, server.body = status, body
    with pytest.raises(AdminApiUnavailable):
        client.internal_stats(TOPIC)


@pytest.mark.parametrize(
    "text",
    [
        "Topic name is not valid",  # AdminResource.validateTopicName
        "Partitioned Topic Name should not contain '-partition-'",  # validatePartitionedTopicName
    ],
)
def test_a_name_pulsar_rejects_as_invalid_is_permanent(
    server: _Server, client: PulsarAdminClient, text: str
) -> None:
    server.status, server.body = 412, reason(text)
    with pytest.raises(InvalidRequestError):
        client.internal_stats(TOPIC)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_permanent(server: _Server, client: PulsarAdminClient, status: int) -> None:
    server.status, server.body = status, reason("HTTP 401 Unauthorized")
    with pytest.raises(AuthorizationError):
        client.internal_stats(TOPIC)


def test_a_connection_reset_is_retried(server: _Server, client: PulsarAdminClient) -> None:
    server.reset = True
    with pytest.raises(AdminApiUnavailable, match="unreachable"):
        client.internal_stats(TOPIC)


def test_a_body_cut_short_is_retried(server: _Server, client: PulsarAdminClient) -> None:
    server.cut_short = True
    with pytest.raises(AdminApiUnavailable):
        client.internal_stats(TOPIC)


def test_an_ownership_412_reaches_temporal_as_retryable(server: _Server, client: PulsarAdminClient) -> None:
    """At the activity boundary: the retry policy, not a dead letter at the first attempt."""
    server.status, server.body = 412, reason(f"Failed to find ownership for topic:{FULL}")
    activities = PulsarAdminActivities(client)
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(activities.ask_owner_broker, AskOwnerBrokerInput(TOPIC, 7))
    assert raised.value.type == "AdminApiUnavailable"
    assert not raised.value.non_retryable
