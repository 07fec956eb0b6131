"""Redirects are followed only as Pulsar sends them, and only into the configured cluster: a 307 to the admin
URL's own address, a trusted host, or a broker the cluster lists; never https → http, never 301/302/303/308,
and nothing at all (token or not) is sent to a target outside (ledger_deletion/adapters/pulsar_admin.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.errors import AdminApiUnavailable, AuthorizationError, RedirectRefused

TOKEN = "tok"
STATS = "/admin/v2/persistent/t/n/x/internalStats"


class Cluster:
    """Brokers by netloc, each answering a fixed response; records every request."""

    def __init__(self, routes: dict[str, httpx.Response], brokers: list[str] | None = None) -> None:
        self.routes = routes
        self.brokers = brokers  # what /admin/v2/brokers/<cluster> lists
        self.seen: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.path == "/admin/v2/brokers/c1":
            return httpx.Response(200, json=self.brokers or [])
        return self.routes[request.url.netloc.decode()]

    def client(self, base: str, token: str | None = TOKEN, **kw: object) -> PulsarAdminClient:
        admin = PulsarAdminClient(base, token, **kw)  # type: ignore[arg-type]
        admin._http = httpx.Client(transport=httpx.MockTransport(self.handle), follow_redirects=False)
        return admin

    def contacted(self) -> list[str]:
        return [f"{r.url.netloc.decode()}{r.url.path}" for r in self.seen]


def to(url: str, status: int = 307) -> httpx.Response:
    return httpx.Response(status, headers={"Location": url})


OK = httpx.Response(200, json={"ledgers": []})


def test_a_307_to_a_broker_the_cluster_lists_is_followed_with_the_token() -> None:
    cluster = Cluster(
        {"a:8080": to(f"http://b.pulsar:8080{STATS}?authoritative=true"), "b.pulsar:8080": OK},
        brokers=["a:8080", "b.pulsar:8080"],
    )
    answer = cluster.client("http://a:8080", cluster="c1").internal_stats("t/n/x")
    assert answer.found and answer.served_by == "http://b.pulsar:8080"
    assert cluster.contacted() == [f"a:8080{STATS}", "a:8080/admin/v2/brokers/c1", f"b.pulsar:8080{STATS}"]
    assert {r.headers.get("Authorization") for r in cluster.seen} == {f"Bearer {TOKEN}"}


def test_a_broker_that_joined_is_found_on_a_fresh_list() -> None:
    cluster = Cluster({"a:8080": to(f"http://c:8080{STATS}"), "c:8080": OK}, brokers=["a:8080"])
    client = cluster.client("http://a:8080", cluster="c1")
    with pytest.raises(RedirectRefused):
        client.internal_stats("t/n/x")
    cluster.brokers = ["a:8080", "c:8080"]  # c registered (it took over a bundle in a rolling restart)
    client._brokers_read_at = -1e9  # the refresh interval has passed
    assert client.internal_stats("t/n/x").found


def test_a_trusted_host_is_followed() -> None:
    cluster = Cluster({"a:8080": to(f"http://b:9090{STATS}"), "b:9090": OK})
    assert cluster.client("http://a:8080", trusted_hosts=frozenset({"b"})).internal_stats("t/n/x").found
    assert cluster.client("http://a:8080", trusted_hosts=frozenset({"b:9090"})).internal_stats("t/n/x").found
    with pytest.raises(RedirectRefused):
        cluster.client("http://a:8080", trusted_hosts=frozenset({"b:8080"})).internal_stats("t/n/x")


def test_over_https_a_listed_brokers_tls_port_is_followed() -> None:
    """A broker's id carries its plain web port; a redirect over https names its TLS port."""
    cluster = Cluster({"a:8443": to(f"https://b:8443{STATS}"), "b:8443": OK}, brokers=["a:8080", "b:8080"])
    assert cluster.client("https://a:8443", cluster="c1").internal_stats("t/n/x").found


@pytest.mark.parametrize("token", [TOKEN, None])
@pytest.mark.parametrize(
    ("base", "target", "status"),
    [
        ("http://a:8080", "http://evil.example:8080/x", 307),  # another host
        ("http://a:8080", "http://a:9999/x", 307),  # another port of the admin host, not listed
        ("http://a:8080", "http://a.evil.example:8080/x", 307),  # look-alike host name
        ("https://a:8443", "http://a:8080/x", 307),  # https → http, same host, a listed broker
        ("https://a:8443", "http://b:8080/x", 307),  # https → http to a listed broker
        ("http://a:8080", "http://b:8080/x", 302),  # a listed broker, but not Pulsar's redirect
        ("http://a:8080", "http://b:8080/x", 301),
        ("http://a:8080", "http://b:8080/x", 303),
        ("http://a:8080", "http://b:8080/x", 308),
        ("http://a:8080", "ftp://b:8080/x", 307),
        # validateGlobalNamespaceOwnership: a V1 global namespace owned by a peer cluster
        ("http://a:8080", "http://peer-cluster:8080/admin/persistent/t/global/ns/x/internalStats", 307),
    ],
)
def test_a_redirect_out_of_the_cluster_is_refused_and_nothing_is_sent_there(
    base: str, target: str, status: int, token: str | None
) -> None:
    here = urlsplit(base).netloc
    cluster = Cluster(
        {here: to(target, status), urlsplit(target).netloc: httpx.Response(404, json={"reason": "gone"})},
        brokers=["a:8080", "b:8080"],
    )
    with pytest.raises(RedirectRefused):
        cluster.client(base, token, cluster="c1").internal_stats("t/n/x")
    assert all(r.url.netloc.decode() == here for r in cluster.seen)  # only the configured broker was asked


def test_without_a_cluster_only_the_admin_address_and_trusted_hosts_are_followed() -> None:
    cluster = Cluster({"a:8080": to(f"http://a:8080{STATS}?authoritative=true"), "b:8080": OK})
    with pytest.raises(AdminApiUnavailable, match="more than 2 redirects"):
        cluster.client("http://a:8080", max_redirects=2).internal_stats("t/n/x")  # a loop on itself
    cluster.routes["a:8080"] = to(f"http://b:8080{STATS}")
    with pytest.raises(RedirectRefused):
        cluster.client("http://a:8080").internal_stats("t/n/x")
    assert not any(r.url.path.startswith("/admin/v2/brokers") for r in cluster.seen)


def test_a_broker_list_refused_to_us_is_an_authorization_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/admin/v2/brokers/"):
            return httpx.Response(401, json={"reason": "This operation requires super-user access"})
        return to(f"http://b:8080{STATS}")

    admin = PulsarAdminClient("http://a:8080", TOKEN, cluster="c1")
    admin._http = httpx.Client(transport=httpx.MockTransport(handle), follow_redirects=False)
    with pytest.raises(AuthorizationError):
        admin.internal_stats("t/n/x")
