"""How the service reaches Pulsar's brokers, for the binary client and the admin REST alike: TLS (trust
store, hostname check, client certificate) and OAuth2 client credentials (a token is passed apart)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger_deletion.adapters.oauth2 import ClientCredentials


@dataclass(frozen=True)
class PulsarSecurity:
    trust_certs_file: str = ""  # PEM CA bundle; empty: the system's trust store
    validate_hostname: bool = True
    cert_file: str = ""  # PEM client certificate (mTLS)
    key_file: str = ""
    oauth2: ClientCredentials | None = None


NO_PULSAR_SECURITY = PulsarSecurity()
