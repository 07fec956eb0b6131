"""The clients of the systems the service talks to, built from the settings the edge read, and the check
that refuses connection settings that cannot work before anything connects.

Each command checks only the systems it connects to (its required endpoints): a pool that never talks to
ZooKeeper does not need ZooKeeper's certificates mounted.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

import pulsar

from ledger_deletion.adapters import messaging
from ledger_deletion.adapters.oauth2 import ClientCredentials
from ledger_deletion.adapters.pulsar_admin import PulsarAdminClient
from ledger_deletion.adapters.pulsar_security import PulsarSecurity
from ledger_deletion.adapters.tls import pem_problem
from ledger_deletion.adapters.zookeeper import ZooKeeperSecurity
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings, env_name

PULSAR = frozenset({"pulsar_url", "pulsar_admin_url"})


# --- Pulsar ------------------------------------------------------------------------------------------------


def pulsar_security(settings: Settings) -> PulsarSecurity:
    oauth2 = None
    if settings.pulsar_oauth2_issuer_url:
        oauth2 = ClientCredentials(
            settings.pulsar_oauth2_issuer_url,
            settings.pulsar_oauth2_private_key,
            settings.pulsar_oauth2_audience,
            settings.pulsar_oauth2_scope,
        )
    return PulsarSecurity(
        trust_certs_file=settings.pulsar_tls_trust_certs_file,
        validate_hostname=settings.pulsar_tls_validate_hostname,
        cert_file=settings.pulsar_tls_cert_file,
        key_file=settings.pulsar_tls_key_file,
        oauth2=oauth2,
    )


def pulsar_client(settings: Settings) -> pulsar.Client:
    """The binary-protocol client of ``LEDGER_DELETION_PULSAR_URL``."""
    return messaging.connect(
        settings.pulsar_url, settings.pulsar_token_value, security=pulsar_security(settings)
    )


def admin_client(settings: Settings, threads: int = 20) -> PulsarAdminClient:
    """The admin REST client, one kept-alive connection per thread that calls it."""
    return PulsarAdminClient(
        settings.pulsar_admin_url,
        settings.pulsar_token_value,
        settings.admin_timeout_seconds,
        settings.admin_max_redirects,
        trusted_hosts=settings.admin_trusted_host_set,
        cluster=settings.pulsar_cluster,
        max_connections=threads,
        security=pulsar_security(settings),
    )


def pulsar_problems(settings: Settings) -> list[str]:
    problems = _files(
        settings,
        ("pulsar_tls_trust_certs_file", "certificate"),
        ("pulsar_tls_cert_file", "certificate"),
        ("pulsar_tls_key_file", "private key"),
    )
    problems += _pair(settings, "pulsar_tls_cert_file", "pulsar_tls_key_file")
    if settings.pulsar_oauth2_issuer_url:
        if settings.pulsar_token is not None:
            problems.append(
                f"{env_name('pulsar_token')} and {env_name('pulsar_oauth2_issuer_url')}: choose one way to "
                "authenticate"
            )
        if not settings.pulsar_oauth2_private_key:
            problems.append(
                f"{env_name('pulsar_oauth2_private_key')}: OAuth2 needs the client-credentials file"
            )
        else:
            credentials = pulsar_security(settings).oauth2
            assert credentials is not None
            try:
                credentials.client_id_and_secret()
            except ConfigurationError as exc:
                problems.append(str(exc))
    elif settings.pulsar_oauth2_private_key:
        problems.append(
            f"{env_name('pulsar_oauth2_private_key')} is set without {env_name('pulsar_oauth2_issuer_url')}"
        )
    return problems


# --- ZooKeeper ---------------------------------------------------------------------------------------------


# Which login each ZooKeeper client uses. Reading and deleting are two identities, so that ZooKeeper's own
# ACLs can refuse a reader's delete (docs/security.md); Pulsar's metadata store is only ever read.
#   deletes=True:         the bookkeeper pool's LedgerStore: LEDGER_DELETION_ZOOKEEPER_DIGEST / _SASL;
#   (default):            every LedgerReader and ledger scan: LEDGER_DELETION_ZOOKEEPER_READ_DIGEST / _SASL;
#   pulsar_metadata=True: Pulsar's metadata store: LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER_DIGEST / _SASL,
#                         else the reader's.


def zookeeper_digest(
    settings: Settings, *, pulsar_metadata: bool = False, deletes: bool = False
) -> str | None:
    """The digest login (``user:password``) of a ZooKeeper client, chosen as :func:`zookeeper_security`."""
    if pulsar_metadata:
        return settings.pulsar_metadata_digest_value
    return settings.zookeeper_digest_value if deletes else settings.zookeeper_read_digest_value


def zookeeper_security(
    settings: Settings, *, pulsar_metadata: bool = False, deletes: bool = False
) -> ZooKeeperSecurity:
    """SASL and TLS of a client of BookKeeper's ZooKeeper: the reading identity's login, or with ``deletes``
    the deleting identity's; with ``pulsar_metadata`` of Pulsar's metadata store (its own login, else the
    reading identity's). TLS is the same for all."""
    if pulsar_metadata:
        sasl = settings.pulsar_metadata_sasl_value
    else:
        sasl = settings.zookeeper_sasl_value if deletes else settings.zookeeper_read_sasl_value
    return ZooKeeperSecurity(
        sasl=sasl,
        tls=settings.zookeeper_tls,
        ca_file=settings.zookeeper_tls_ca_file,
        cert_file=settings.zookeeper_tls_cert_file,
        key_file=settings.zookeeper_tls_key_file,
        verify_hostname=settings.zookeeper_tls_verify_hostname,
    )


# Every ZooKeeper login (user:password each), and the deleting ones with the reading one a process that
# deletes nothing takes instead.
LOGINS = (
    "zookeeper_digest",
    "zookeeper_sasl",
    "zookeeper_read_digest",
    "zookeeper_read_sasl",
    "pulsar_metadata_zookeeper_digest",
    "pulsar_metadata_zookeeper_sasl",
)
DELETING_LOGINS = {"zookeeper_digest": "zookeeper_read_digest", "zookeeper_sasl": "zookeeper_read_sasl"}


def delete_credential_problems(settings: Settings, deletes: Iterable[str]) -> list[str]:
    """The deleting logins a process that deletes only in ``deletes`` holds anyway.

    A process that runs no bookkeeper pool never deletes a ledger, so holding the login that may is all risk:
    a bug or an intruder there could use it, and scaling the deleting pools to zero would no longer stop every
    delete. Mounting the deleters' secret into a reader's pod is the mistake this catches.
    """
    if "zookeeper" in set(deletes):
        return []
    return [
        f"{env_name(name)} is the ZooKeeper login that deletes ledgers, and this process deletes none (only "
        f"the bookkeeper pool does): give it {env_name(reader)} instead, or leave it out"
        for name, reader in DELETING_LOGINS.items()
        if getattr(settings, name) is not None
    ]


def zookeeper_problems(settings: Settings) -> list[str]:
    problems = _files(
        settings,
        ("zookeeper_tls_ca_file", "certificate"),
        ("zookeeper_tls_cert_file", "certificate"),
        ("zookeeper_tls_key_file", "private key"),
    )
    problems += _pair(settings, "zookeeper_tls_cert_file", "zookeeper_tls_key_file")
    tls_files = ("zookeeper_tls_ca_file", "zookeeper_tls_cert_file")
    if not settings.zookeeper_tls and any(getattr(settings, name) for name in tls_files):
        problems.append(
            f"{env_name('zookeeper_tls')} is off while ZooKeeper TLS files are set: set it to true (and "
            "name ZooKeeper's secureClientPort)"
        )
    for name in LOGINS:
        secret = getattr(settings, name)
        if secret is not None and ":" not in secret.get_secret_value():
            problems.append(f"{env_name(name)}: not user:password")
    # kazoo's SASL needs pure-sasl, and says so only when it connects.
    sasl = any(getattr(settings, name) for name in LOGINS if name.endswith("_sasl"))
    if sasl and importlib.util.find_spec("puresasl") is None:
        problems.append(f"{env_name('zookeeper_sasl')}: the pure-sasl package is not installed")
    return problems


# --- all ---------------------------------------------------------------------------------------------------


def problems(settings: Settings, require: Iterable[str]) -> list[str]:
    """What cannot work in the connection settings of the systems ``require`` names (endpoints)."""
    from ledger_deletion.temporal_client import connection_problems as temporal_problems

    required = set(require)
    found: list[str] = []
    if "temporal_address" in required:
        found += temporal_problems(settings)
    if required & PULSAR:
        found += pulsar_problems(settings)
    if "zookeeper" in required:
        found += zookeeper_problems(settings)
    return found


def _files(settings: Settings, *files: tuple[str, str]) -> list[str]:
    found = []
    for name, kind in files:
        path = getattr(settings, name)
        if path and (problem := pem_problem(path, env_name(name), kind)):
            found.append(problem)
    return found


def _pair(settings: Settings, cert: str, key: str) -> list[str]:
    if bool(getattr(settings, cert)) != bool(getattr(settings, key)):
        given, missing = (cert, key) if getattr(settings, cert) else (key, cert)
        return [f"{env_name(missing)}: needed with {env_name(given)}"]
    return []
