"""OAuth2 client credentials as Pulsar's clients use them (AuthenticationOAuth2, client-credentials flow).

The binary client (pulsar-client's ``AuthenticationOauth2``) fetches and refreshes its own tokens from the
same settings. The admin REST calls are plain HTTP, so :class:`TokenSource` does what Pulsar's Java client
does there (``ClientCredentialsFlow``): read the token endpoint from the issuer's
``/.well-known/openid-configuration``, post ``grant_type=client_credentials`` with the client id and secret
of the credentials file (and the audience and scope), and send the ``access_token`` as a bearer token. The
token is kept and fetched again before it expires, so no admin call waits for one in the common case.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from ledger_deletion.adapters.tls import client_context
from ledger_deletion.errors import AdminApiUnavailable, AuthorizationError, ConfigurationError

WELL_KNOWN = "/.well-known/openid-configuration"
# A token is used for this share of its lifetime, then fetched again: a call never carries one about to lapse.
REFRESH_AT = 0.8
DEFAULT_LIFETIME_SECONDS = 300.0  # an answer without expires_in


@dataclass(frozen=True)
class ClientCredentials:
    """Pulsar's OAuth2 parameters: ``issuerUrl``, ``privateKey`` (the credentials file), audience, scope."""

    issuer_url: str
    credentials_file: str  # a path, or a file:// URL, as Pulsar's privateKey
    audience: str = ""
    scope: str = ""

    @property
    def path(self) -> Path:
        parts = urlsplit(self.credentials_file)
        if parts.scheme == "file":
            return Path(unquote(parts.path))
        return Path(self.credentials_file)

    def client_params(self) -> dict[str, str]:
        """The parameters of pulsar-client's ``AuthenticationOauth2`` (its JSON keys)."""
        params = {"issuer_url": self.issuer_url, "private_key": str(self.path)}
        if self.audience:
            params["audience"] = self.audience
        if self.scope:
            params["scope"] = self.scope
        return params

    def client_id_and_secret(self) -> tuple[str, str]:
        """Raises ConfigurationError: a file missing, unreadable, or without client_id and client_secret."""
        try:
            content = json.loads(self.path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigurationError(
                f"LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY: cannot read {self.path} "
                f"({exc.strerror or type(exc).__name__})"
            ) from None
        except ValueError:
            raise ConfigurationError(
                f"LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY: {self.path} is not JSON"
            ) from None
        client_id = content.get("client_id") if isinstance(content, dict) else None
        secret = content.get("client_secret") if isinstance(content, dict) else None
        if not isinstance(client_id, str) or not isinstance(secret, str) or not client_id or not secret:
            raise ConfigurationError(
                f"LEDGER_DELETION_PULSAR_OAUTH2_PRIVATE_KEY: {self.path} has no client_id and client_secret"
            )
        return client_id, secret


class TokenSource:
    """Access tokens of the client-credentials flow, fetched when needed and kept until near their expiry."""

    def __init__(
        self,
        credentials: ClientCredentials,
        *,
        timeout_seconds: float = 10.0,
        verify: ssl.SSLContext | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.credentials = credentials
        # The issuer is checked against the system's trust store, as Pulsar's clients check it.
        self._http = httpx.Client(timeout=timeout_seconds, verify=verify or client_context())
        self._clock = clock
        self._lock = threading.Lock()
        self._endpoint: str | None = None
        self._token: str | None = None
        self._refresh_at = 0.0
        self.fetched = 0  # tokens fetched (tests, logs)

    def token(self) -> str:
        """A valid access token.

        Raises:
            AuthorizationError: the issuer refused the client's credentials (400/401/403).
            AdminApiUnavailable: the issuer could not be reached or answered something else.
            ConfigurationError: the credentials file cannot be used.
        """
        with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._fetch()
            assert self._token is not None
            return self._token

    def invalidate(self) -> None:
        """Forget the token (a server refused it): the next call fetches a new one."""
        with self._lock:
            self._token = None

    def close(self) -> None:
        self._http.close()

    def _fetch(self) -> None:
        client_id, secret = self.credentials.client_id_and_secret()
        form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
        if self.credentials.audience:
            form["audience"] = self.credentials.audience
        if self.credentials.scope:
            form["scope"] = self.credentials.scope
        started = self._clock()
        response = self._request("POST", self._token_endpoint(), data=form)
        if response.status_code in (400, 401, 403):
            raise AuthorizationError(
                f"OAuth2 issuer {self.credentials.issuer_url} refused client {client_id}: "
                f"{response.status_code} {_error_of(response)}"
            )
        body = _json_object(response, "token")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise AdminApiUnavailable(f"OAuth2 issuer {self.credentials.issuer_url} sent no access_token")
        lifetime = body.get("expires_in")
        seconds = float(lifetime) if isinstance(lifetime, int | float) else DEFAULT_LIFETIME_SECONDS
        self._token, self._refresh_at = token, started + seconds * REFRESH_AT
        self.fetched += 1

    def _token_endpoint(self) -> str:
        if self._endpoint is None:
            url = self.credentials.issuer_url.rstrip("/") + WELL_KNOWN
            body = _json_object(self._request("GET", url), "discovery document")
            endpoint = body.get("token_endpoint")
            if not isinstance(endpoint, str) or not endpoint:
                raise AdminApiUnavailable(f"OAuth2 issuer's {url} names no token_endpoint")
            self._endpoint = endpoint
        return self._endpoint

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, url, headers={"Accept": "application/json"}, **kwargs)
        except httpx.RequestError as exc:
            raise AdminApiUnavailable(
                f"OAuth2 issuer {urlsplit(url).netloc} unreachable: {type(exc).__name__}"
            ) from exc


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    where = urlsplit(str(response.request.url)).netloc
    if response.status_code != 200:
        raise AdminApiUnavailable(f"OAuth2 issuer {where}: {what} answered {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise AdminApiUnavailable(f"OAuth2 issuer {where}: {what} is not a JSON object")
    return body


def _error_of(response: httpx.Response) -> str:
    """The OAuth2 error code of a refusal (RFC 6749 5.2), never the request's secret."""
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("error", ""))[:100] if isinstance(body, dict) else ""
