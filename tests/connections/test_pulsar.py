"""Pulsar over TLS and with OAuth2, for the binary client and the admin REST alike.

pulsar-lite and the admin emulator speak no TLS: a TLS-terminating proxy in front of each stands in for a
broker's TLS port. Through it the binary client does what needs only its service URL (the partitioned
metadata of a topic; pulsar-lite's lookups name no TLS URL, so producing over TLS cannot be shown here) and
the admin client its calls. OAuth2 runs against a local issuer, for the C++ client as for the admin REST.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pulsar
import pytest

from ledger_deletion import connections
from ledger_deletion.adapters.messaging import client_options
from ledger_deletion.errors import AdminApiUnavailable, AuthorizationError, ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import Settings
from tests.connections.issuer import Issuer, issuer
from tests.tls_support import Pki, make_pki, server_context, tls_proxy
from tests.unit.admin_stub import AdminHandler, serving

PULSAR = ("pulsar_url", "pulsar_admin_url")
TOPIC = "persistent://public/default/tls-probe"


def _settings(env: pytest.MonkeyPatch, **variables: str) -> Settings:
    values = {
        "LEDGER_DELETION_PULSAR_URL": "pulsar://127.0.0.1:6650",
        "LEDGER_DELETION_PULSAR_ADMIN_URL": "http://127.0.0.1:8080",
    }
    values.update(variables)
    for name, value in values.items():
        env.setenv(name, value)
    return load_settings(require=PULSAR)


def _credentials(path: Path, state: Issuer) -> Path:
    path.write_text(json.dumps({"client_id": state.client_id, "client_secret": state.client_secret}))
    return path


# --- what the binary client is given -----------------------------------------------------------------------


def test_the_client_gets_the_trust_store_hostname_check_and_client_certificate(
    clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    client = pki.issue("svc")
    settings = _settings(
        clean_env,
        LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca),
        LEDGER_DELETION_PULSAR_TLS_CERT_FILE=str(client.cert),
        LEDGER_DELETION_PULSAR_TLS_KEY_FILE=str(client.key),
    )
    options = client_options(settings.pulsar_token_value, connections.pulsar_security(settings))
    assert isinstance(
        options.pop("authentication"), pulsar.AuthenticationTLS
    )  # the certificate authenticates
    assert options == {
        "tls_trust_certs_file_path": str(pki.ca),
        "tls_validate_hostname": True,
        "tls_certificate_file_path": str(client.cert),
        "tls_private_key_file_path": str(client.key),
    }
    with_token = client_options("a-token", connections.pulsar_security(settings))
    assert isinstance(with_token["authentication"], pulsar.AuthenticationToken)
    assert with_token["tls_certificate_file_path"] == str(client.cert)  # still presented (mTLS)


# --- the binary client over TLS, for real ---------------------------------------------------------------


@contextmanager
def _broker_tls(stack: Any, pki: Pki, **names: tuple[str, ...]) -> Iterator[str]:
    server = pki.issue("broker", **names)
    address = urlsplit(stack.pulsar_url)
    with tls_proxy(server_context(server), (address.hostname, address.port)) as proxy:
        yield f"pulsar+ssl://127.0.0.1:{proxy.port}"


def _partitions(settings: Settings) -> list[str]:
    client = connections.pulsar_client(settings)
    try:
        return list(client.get_topic_partitions(TOPIC))
    finally:
        client.close()


@pytest.mark.stack
def test_the_client_reaches_a_broker_over_tls_with_the_trust_store(
    stack: Any, clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    with _broker_tls(stack, pki, ips=("127.0.0.1",)) as url:
        trusted = _settings(
            clean_env, LEDGER_DELETION_PULSAR_URL=url, LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca)
        )
        assert _partitions(trusted)  # the topic's partitioned metadata, over TLS
        other = make_pki(tmp_path / "other", "other-ca")
        untrusted = trusted.with_overrides(pulsar_tls_trust_certs_file=str(other.ca))
        with pytest.raises(pulsar.ConnectError):
            _partitions(untrusted)


@pytest.mark.stack
def test_the_client_checks_the_brokers_name_unless_told_not_to(
    stack: Any, clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    with _broker_tls(stack, pki, dns=("broker.test",)) as url:  # a name, not the address dialled
        settings = _settings(
            clean_env, LEDGER_DELETION_PULSAR_URL=url, LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca)
        )
        with pytest.raises(pulsar.ConnectError):
            _partitions(settings)
        assert _partitions(settings.with_overrides(pulsar_tls_validate_hostname=False))


@pytest.mark.stack
def test_the_client_authenticates_with_oauth2_client_credentials(
    stack: Any, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with issuer() as state:
        settings = _settings(
            clean_env,
            LEDGER_DELETION_PULSAR_URL=stack.pulsar_url,
            LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL=state.url,
            LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY=f"file://{_credentials(tmp_path / 'c.json', state)}",
            LEDGER_DELETION_PULSAR_OAUTH2_AUDIENCE="urn:pulsar:cluster-a",
            LEDGER_DELETION_PULSAR_OAUTH2_SCOPE="pulsar:admin",
        )
        assert _partitions(settings)
    # pulsar-lite accepts any credentials: what shows the client used the settings is its token request.
    assert state.requests == [
        {
            "grant_type": "client_credentials",
            "client_id": state.client_id,
            "client_secret": state.client_secret,
            "audience": "urn:pulsar:cluster-a",
            "scope": "pulsar:admin",
        }
    ]


# --- the admin REST over HTTPS, for real ----------------------------------------------------------------


@pytest.mark.stack
def test_the_admin_client_calls_the_emulator_over_mtls(
    stack: Any, clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    server, client = pki.issue("broker", ips=("127.0.0.1",)), pki.issue("svc")
    admin = urlsplit(stack.pulsar_admin_url)
    with tls_proxy(server_context(server, client_ca=pki.ca), (admin.hostname, admin.port)) as proxy:
        settings = _settings(
            clean_env,
            LEDGER_DELETION_PULSAR_ADMIN_URL=f"https://127.0.0.1:{proxy.port}",
            LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca),
            LEDGER_DELETION_PULSAR_TLS_CERT_FILE=str(client.cert),
            LEDGER_DELETION_PULSAR_TLS_KEY_FILE=str(client.key),
        )
        # The partitioned metadata, which any broker answers (a topic's stats may redirect to its owner,
        # over plain http here, which the client refuses from https).
        assert _call(settings) in (None, 0, 4)  # not found, or tls-probe's partitions
        assert proxy.handshakes >= 1

        without_certificate = settings.with_overrides(pulsar_tls_cert_file="", pulsar_tls_key_file="")
        with pytest.raises(AdminApiUnavailable, match="unreachable"):
            _call(without_certificate)
        other = make_pki(tmp_path / "other", "other-ca")
        with pytest.raises(AdminApiUnavailable, match="certificate verify failed.*TRUST_CERTS_FILE"):
            _call(settings.with_overrides(pulsar_tls_trust_certs_file=str(other.ca)))


def _call(settings: Settings) -> int | None:
    admin_client = connections.admin_client(settings)
    try:
        return admin_client.partition_count(TOPIC)
    finally:
        admin_client.close()


class _Broker(AdminHandler):
    """An admin API over HTTPS that records the bearer of each call and refuses the tokens it is told to."""

    seen: list[str]
    refuse: set[str]

    def do_GET(self) -> None:
        bearer = self.headers.get("Authorization", "")
        self.seen.append(bearer)
        if bearer.removeprefix("Bearer ") in self.refuse:
            self.reply(401, b'{"reason": "Authentication required"}')
            return
        self.reply(200, b'{"partitions": 0}')


@contextmanager
def _https_broker(pki: Pki) -> Iterator[tuple[str, type[_Broker]]]:
    handler = type("Broker", (_Broker,), {"seen": [], "refuse": set()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = server_context(pki.issue("broker", ips=("127.0.0.1",)))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server):
        yield f"https://127.0.0.1:{server.server_port}", handler


def test_admin_calls_carry_an_oauth2_token_fetched_once_and_again_before_it_expires(
    clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    with issuer(expires_in=1.0) as state, _https_broker(pki) as (url, broker):
        settings = _settings(
            clean_env,
            LEDGER_DELETION_PULSAR_ADMIN_URL=url,
            LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca),
            LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL=state.url,
            LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY=str(_credentials(tmp_path / "c.json", state)),
            LEDGER_DELETION_PULSAR_OAUTH2_AUDIENCE="urn:pulsar:cluster-a",
        )
        admin_client = connections.admin_client(settings)
        try:
            assert admin_client.partition_count(TOPIC) == 0
            assert admin_client.partition_count(TOPIC) == 0
            assert broker.seen == ["Bearer token-1", "Bearer token-1"]  # kept, not fetched per call
            time.sleep(0.9)  # past 80% of its one-second life: fetched again before it lapses
            admin_client.partition_count(TOPIC)
            assert broker.seen[-1] == "Bearer token-2"

            broker.refuse.add("token-2")  # revoked: the call fails, the next one brings a fresh token
            with pytest.raises(AuthorizationError):
                admin_client.partition_count(TOPIC)
            admin_client.partition_count(TOPIC)
            assert broker.seen[-1] == "Bearer token-3"
        finally:
            admin_client.close()
        assert [r["audience"] for r in state.requests] == ["urn:pulsar:cluster-a"] * 3
        assert {r["grant_type"] for r in state.requests} == {"client_credentials"}


def test_credentials_the_issuer_refuses_are_an_authorization_error(
    clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    with issuer() as state, _https_broker(pki) as (url, broker):
        credentials = tmp_path / "c.json"
        credentials.write_text(json.dumps({"client_id": state.client_id, "client_secret": "wrong"}))
        settings = _settings(
            clean_env,
            LEDGER_DELETION_PULSAR_ADMIN_URL=url,
            LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE=str(pki.ca),
            LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL=state.url,
            LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY=str(credentials),
        )
        with pytest.raises(AuthorizationError, match=f"refused client {state.client_id}: 401 invalid_client"):
            _call(settings)
        assert broker.seen == []  # nothing was sent without a token


# --- refused at start --------------------------------------------------------------------------------------


def _refusals(tmp_path: Path, pki: Pki) -> list[tuple[dict[str, str], str]]:
    client = pki.issue("svc")
    not_json = tmp_path / "not.json"
    not_json.write_text("client_id=x")
    no_secret = tmp_path / "no-secret.json"
    no_secret.write_text('{"client_id": "x"}')
    return [
        (
            {"LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE": "/nonexistent/ca.pem"},
            "TRUST_CERTS_FILE: no such file",
        ),
        (
            {"LEDGER_DELETION_PULSAR_TLS_CERT_FILE": str(client.cert)},
            "PULSAR_TLS_KEY_FILE: needed with LEDGER_DELETION_PULSAR_TLS_CERT_FILE",
        ),
        (
            {
                "LEDGER_DELETION_PULSAR_TLS_CERT_FILE": str(client.cert),
                "LEDGER_DELETION_PULSAR_TLS_KEY_FILE": str(client.cert),
            },
            "PULSAR_TLS_KEY_FILE: .*svc.crt is not a PEM private key",
        ),
        (
            {
                "LEDGER_DELETION_PULSAR_TOKEN": "t0ken",
                "LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL": "https://i",
            },
            "choose one way to authenticate",
        ),
        (
            {"LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL": "https://i"},
            "OAuth2 needs the client-credentials file",
        ),
        (
            {
                "LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL": "https://i",
                "LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY": str(not_json),
            },
            "not.json is not JSON",
        ),
        (
            {
                "LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL": "https://i",
                "LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY": str(no_secret),
            },
            "has no client_id and client_secret",
        ),
        (
            {
                "LEDGER_DELETION_PULSAR_OAUTH2_ISSUER_URL": "https://i",
                "LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY": "file:///nonexistent/c.json",
            },
            "cannot read /nonexistent/c.json",
        ),
    ]


def test_wrong_configuration_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    for variables, message in _refusals(tmp_path, pki):
        with clean_env.context() as env, pytest.raises(ConfigurationError, match=message):
            _settings(env, **variables)


def test_a_command_that_does_not_talk_to_pulsar_does_not_check_its_files(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("LEDGER_DELETION_PULSAR_TLS_TRUST_CERTS_FILE", "/nonexistent/ca.pem")
    clean_env.setenv("LEDGER_DELETION_ZOOKEEPER", "zk:2181")
    assert load_settings(require=("zookeeper",)).zookeeper == "zk:2181"
