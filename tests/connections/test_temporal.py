"""Temporal through the SDK's environment configuration: profiles, API key, TLS with a server CA, a client
certificate and a server name. The dev server speaks no TLS, so a TLS-terminating proxy stands in front of
it for the tests that connect for real; what reaches ``Client.connect`` is checked for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import TLSConfig

from ledger_deletion.errors import ConfigurationError
from ledger_deletion.loading import load_settings
from ledger_deletion.settings import TEMPORAL
from ledger_deletion.temporal_client import connect_options, connect_temporal
from tests.tls_support import Pki, make_pki, server_context, tls_proxy


def test_an_api_key_alone_means_tls_with_the_system_trust_store(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TEMPORAL_ADDRESS", "ns.acct.tmprl.cloud:7233")
    clean_env.setenv("TEMPORAL_NAMESPACE", "ns.acct")
    clean_env.setenv("TEMPORAL_API_KEY", "key-123456")
    options = connect_options(load_settings(require=TEMPORAL))
    assert options == {
        "target_host": "ns.acct.tmprl.cloud:7233",
        "namespace": "ns.acct",
        "api_key": "key-123456",
        "tls": True,
    }
    clean_env.setenv("TEMPORAL_TLS", "false")  # as the SDK reads it: explicitly off wins over the key
    assert connect_options(load_settings(require=TEMPORAL))["tls"] is False


def test_nothing_set_is_plain_and_the_default_namespace(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    assert connect_options(load_settings(require=TEMPORAL)) == {
        "target_host": "temporal:7233",
        "namespace": "default",
        "api_key": None,
        "tls": False,
    }


def test_mtls_files_and_the_server_name_reach_the_connect_call(
    clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    client = pki.issue("worker")
    clean_env.setenv("TEMPORAL_ADDRESS", "10.0.0.7:7233")
    clean_env.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))
    clean_env.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(client.cert))
    clean_env.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(client.key))
    clean_env.setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.internal")
    tls = connect_options(load_settings(require=TEMPORAL))["tls"]
    assert tls == TLSConfig(
        server_root_ca_cert=pki.ca_pem,
        domain="temporal.internal",
        client_cert=client.cert_pem,
        client_private_key=client.key_pem,
    )


def test_pem_text_in_variables_works_like_files(clean_env: pytest.MonkeyPatch, pki: Pki) -> None:
    client = pki.issue("worker")
    clean_env.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    clean_env.setenv("TEMPORAL_TLS_SERVER_CA_CERT_DATA", pki.ca_pem.decode())
    clean_env.setenv("TEMPORAL_TLS_CLIENT_CERT_DATA", client.cert_pem.decode())
    clean_env.setenv("TEMPORAL_TLS_CLIENT_KEY_DATA", client.key_pem.decode())
    tls = connect_options(load_settings(require=TEMPORAL))["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key) == (
        pki.ca_pem,
        client.cert_pem,
        client.key_pem,
    )


def _profiles(path: Path, pki: Pki) -> Path:
    client = pki.issue("worker")
    path.write_text(
        f"""
[profile.default]
address = "dev:7233"

[profile.prod]
address = "temporal.prod:7233"
namespace = "deletions"
api_key = "prod-key-abcdef"

[profile.prod.tls]
server_name = "frontend.prod"
server_ca_cert_path = "{pki.ca}"
client_cert_path = "{client.cert}"
client_key_path = "{client.key}"
"""
    )
    return path


def test_a_profile_gives_everything_and_variables_override_it(
    clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(_profiles(tmp_path / "temporal.toml", pki)))
    assert load_settings(require=TEMPORAL).temporal_address == "dev:7233"  # the default profile

    clean_env.setenv("TEMPORAL_PROFILE", "prod")
    options = connect_options(load_settings(require=TEMPORAL))
    assert (options["target_host"], options["namespace"], options["api_key"]) == (
        "temporal.prod:7233",
        "deletions",
        "prod-key-abcdef",
    )
    assert isinstance(options["tls"], TLSConfig)
    assert options["tls"].domain == "frontend.prod" and options["tls"].server_root_ca_cert == pki.ca_pem

    clean_env.setenv("TEMPORAL_NAMESPACE", "other")
    clean_env.setenv("TEMPORAL_ADDRESS", "override:7233")
    settings = load_settings(require=TEMPORAL)
    assert (settings.temporal_address, settings.temporal_namespace) == ("override:7233", "other")


def test_the_default_file_location_is_read(clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path) -> None:
    directory = tmp_path / "home" / ".config" / "temporalio"
    directory.mkdir(parents=True)
    _profiles(directory / "temporal.toml", pki)
    assert load_settings(require=TEMPORAL).temporal_address == "dev:7233"


def test_no_address_from_the_environment_or_a_profile_is_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=r"missing settings: TEMPORAL_ADDRESS \(Temporal frontend"):
        load_settings(require=TEMPORAL)
    profiles = tmp_path / "t.toml"
    profiles.write_text('[profile.default]\nnamespace = "n"\n')
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles))
    with pytest.raises(ConfigurationError, match="missing settings: TEMPORAL_ADDRESS"):
        load_settings(require=TEMPORAL)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}, "TEMPORAL_CONFIG_FILE: no such file"),
        ({"TEMPORAL_PROFILE": "nope"}, "TEMPORAL_PROFILE 'nope'.*not found"),
        ({"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/nonexistent/ca.pem"}, "CA_CERT_PATH: no such file"),
        ({"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"}, "TEMPORAL_TLS_SERVER_NAME to the name"),
        ({"TEMPORAL_TLS_SERVER_CA_CERT_DATA": "not a pem"}, "CA_CERT_DATA: its value is not a PEM cert"),
    ],
)
def test_wrong_configuration_is_refused_naming_the_variable(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str], message: str
) -> None:
    clean_env.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    if "TEMPORAL_PROFILE" in variables:
        profiles = tmp_path / "t.toml"
        profiles.write_text('[profile.default]\naddress = "a:1"\n')
        clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles))
    for name, value in variables.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigurationError, match=message):
        load_settings(require=TEMPORAL)


def test_a_key_that_is_not_a_key_and_a_certificate_without_its_key_are_refused(
    clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    client = pki.issue("worker")
    clean_env.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    clean_env.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(client.cert))
    with pytest.raises(ConfigurationError, match="TEMPORAL_TLS_CLIENT_KEY_PATH: a client certificate needs"):
        load_settings(require=TEMPORAL)
    clean_env.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(client.cert))  # the certificate, not the key
    with pytest.raises(ConfigurationError, match="CLIENT_KEY_PATH: .*worker.crt is not a PEM private key"):
        load_settings(require=TEMPORAL)


def test_commands_without_temporal_ignore_its_profile(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", "/nonexistent/temporal.toml")
    assert load_settings(require=("pulsar_url",), pulsar_url="pulsar://b:6650").pulsar_url


# --- for real, over TLS, through a TLS-terminating proxy in front of the dev server -----------------------


@pytest.mark.stack
async def test_a_worker_connects_over_mtls_by_the_servers_name(
    stack, clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    server = pki.issue("frontend", dns=("temporal.test",))  # no IP: only the server name can match it
    client = pki.issue("worker")
    host, port = stack.temporal_address.rsplit(":", 1)
    context = server_context(server, client_ca=pki.ca, alpn=("h2",))
    with tls_proxy(context, (host, int(port))) as proxy:
        clean_env.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{proxy.port}")
        clean_env.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))
        clean_env.setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.test")
        clean_env.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(client.cert))
        clean_env.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(client.key))
        temporal = await connect_temporal(load_settings(require=TEMPORAL))
        described = await temporal.workflow_service.get_system_info(GetSystemInfoRequest())
        assert described.server_version
        handshakes = proxy.handshakes
        assert handshakes >= 1

        # Without the client certificate the proxy refuses the handshake: nothing goes through.
        clean_env.delenv("TEMPORAL_TLS_CLIENT_CERT_PATH")
        clean_env.delenv("TEMPORAL_TLS_CLIENT_KEY_PATH")
        with pytest.raises(RuntimeError):
            await connect_temporal(load_settings(require=TEMPORAL))
        assert proxy.handshakes == handshakes


@pytest.mark.stack
async def test_a_frontend_certificate_from_another_ca_is_refused(
    stack, clean_env: pytest.MonkeyPatch, pki: Pki, tmp_path: Path
) -> None:
    other = make_pki(tmp_path / "other", "other-ca")
    server = other.issue("frontend", dns=("temporal.test",))
    host, port = stack.temporal_address.rsplit(":", 1)
    with tls_proxy(server_context(server, alpn=("h2",)), (host, int(port))) as proxy:
        clean_env.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{proxy.port}")
        clean_env.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))
        clean_env.setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.test")
        with pytest.raises(RuntimeError):
            await connect_temporal(load_settings(require=TEMPORAL))
        assert proxy.handshakes == 0
