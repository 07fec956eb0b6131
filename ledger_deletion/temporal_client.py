"""Connecting to Temporal the way Temporal's own tools do: the SDK's environment configuration.

A profile of Temporal's TOML configuration file (``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE``) gives the
address, namespace, API key and TLS (server CA, client certificate and key, server name); the ``TEMPORAL_*``
variables override it, as ``temporalio.envconfig`` and the Temporal CLI read them. The edge
(:func:`ledger_deletion.loading.load_settings`) merges the profile into the settings once
(:func:`resolve_profile`) and refuses what cannot work (:func:`connection_problems`); every client of the
process is then connected from those settings (:func:`connect_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from temporalio.client import Client, Interceptor
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from ledger_deletion.adapters.tls import pem_problem, pem_text_problem
from ledger_deletion.errors import ConfigurationError
from ledger_deletion.settings import Settings, env_name

# The settings the SDK's environment configuration reads, each under its own TEMPORAL_* name.
ENVCONFIG_FIELDS = (
    "temporal_address",
    "temporal_namespace",
    "temporal_api_key",
    "temporal_tls",
    "temporal_tls_server_name",
    "temporal_tls_server_ca_cert_path",
    "temporal_tls_server_ca_cert_data",
    "temporal_tls_client_cert_path",
    "temporal_tls_client_cert_data",
    "temporal_tls_client_key_path",
    "temporal_tls_client_key_data",
    "temporal_profile",
    "temporal_config_file",
)
# (path field, data field, what it holds) of each TLS file.
TLS_MATERIAL = (
    ("temporal_tls_server_ca_cert_path", "temporal_tls_server_ca_cert_data", "certificate"),
    ("temporal_tls_client_cert_path", "temporal_tls_client_cert_data", "certificate"),
    ("temporal_tls_client_key_path", "temporal_tls_client_key_data", "private key"),
)


def resolve_profile(settings: Settings) -> Settings:
    """The settings with the Temporal profile merged in; the variables that were set win over the file.

    Raises:
        ConfigurationError: a configuration file that does not exist or does not parse, or a profile it
            does not have.
    """
    from temporalio.envconfig import ClientConfigProfile

    config_file = settings.temporal_config_file
    if config_file and not Path(config_file).is_file():
        raise ConfigurationError(f"TEMPORAL_CONFIG_FILE: no such file {config_file}")
    given = {
        env_name(name): _as_variable(getattr(settings, name))
        for name in ENVCONFIG_FIELDS
        if name in settings.model_fields_set
    }
    try:
        profile = ClientConfigProfile.load(
            profile=settings.temporal_profile or None,
            config_source=Path(config_file) if config_file else None,
            override_env_vars=given,
        )
    except Exception as exc:  # the SDK's bridge raises its own, unexported ConfigError, or a TOML error
        named = f"TEMPORAL_PROFILE {settings.temporal_profile!r}" if settings.temporal_profile else "profile"
        raise ConfigurationError(f"Temporal {named} of {config_file or 'the default file'}: {exc}") from None
    updates: dict[str, Any] = {}
    if profile.address:
        updates["temporal_address"] = profile.address
    if profile.namespace:
        updates["temporal_namespace"] = profile.namespace
    if profile.api_key:
        updates["temporal_api_key"] = SecretStr(profile.api_key)
    tls = profile.tls
    if tls is not None:
        if tls.disabled is not None:
            updates["temporal_tls"] = not tls.disabled
        if tls.server_name:
            updates["temporal_tls_server_name"] = tls.server_name
        sources = (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key)
        for (path_field, data_field, _), source in zip(TLS_MATERIAL, sources, strict=True):
            if isinstance(source, Path):
                updates[path_field] = str(source)
            elif source is not None:
                text = source.decode() if isinstance(source, bytes) else source
                updates[data_field] = SecretStr(text) if data_field.endswith("key_data") else text
    return settings.with_overrides(**updates) if updates else settings


def connection_problems(settings: Settings) -> list[str]:
    """What in the Temporal settings cannot work, each naming its variable (empty: nothing)."""
    problems = []
    if settings.temporal_tls_disable_host_verification:
        problems.append(
            "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: the Temporal Python SDK always verifies the frontend's "
            "name; set TEMPORAL_TLS_SERVER_NAME to the name its certificate carries"
        )
    for path_field, data_field, kind in TLS_MATERIAL:
        path, data = getattr(settings, path_field), _clear(getattr(settings, data_field))
        if path and data:
            problems.append(f"{env_name(path_field)} and {env_name(data_field)}: set one of them")
        elif path:
            problems.extend(filter(None, [pem_problem(path, env_name(path_field), kind)]))
        elif data:
            problems.extend(filter(None, [pem_text_problem(data.encode(), env_name(data_field), kind)]))
    has_cert = bool(settings.temporal_tls_client_cert_path or settings.temporal_tls_client_cert_data)
    has_key = bool(settings.temporal_tls_client_key_path or _clear(settings.temporal_tls_client_key_data))
    if has_cert != has_key:
        given, missing = ("certificate", "key") if has_cert else ("key", "certificate")
        problems.append(
            f"TEMPORAL_TLS_CLIENT_{missing.upper()}_PATH: a client {given} needs its {missing} (mTLS)"
        )
    return problems


def connect_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``Client.connect`` (target_host, namespace, api_key, tls) for ``settings``.

    TLS as Temporal's environment configuration decides it: off when ``temporal_tls`` is false; with the
    given CA, client certificate and server name when any is set; else on with the system's trust store when
    ``temporal_tls`` is true or an API key is set (Temporal Cloud), off otherwise.
    """
    api_key = _clear(settings.temporal_api_key) or None
    return {
        "target_host": settings.temporal_address,
        "namespace": settings.temporal_namespace,
        "api_key": api_key,
        "tls": _tls(settings, api_key is not None),
    }


def _tls(settings: Settings, has_api_key: bool) -> bool | TLSConfig:
    if settings.temporal_tls is False:
        return False
    ca, cert, key = (
        _material(getattr(settings, path), getattr(settings, data)) for path, data, _ in TLS_MATERIAL
    )
    if ca or cert or key or settings.temporal_tls_server_name:
        return TLSConfig(
            server_root_ca_cert=ca,
            domain=settings.temporal_tls_server_name or None,
            client_cert=cert,
            client_private_key=key,
        )
    return bool(settings.temporal_tls) or has_api_key


def _material(path: str, data: str | SecretStr | None) -> bytes | None:
    if path:
        return Path(path).read_bytes()
    text = _clear(data)
    return text.encode() if text else None


def _clear(value: str | SecretStr | None) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return value or ""


def _as_variable(value: object) -> str:
    """A setting as the environment variable the SDK would have read."""
    if isinstance(value, bool):
        return str(value).lower()
    return _clear(value) if isinstance(value, SecretStr | str) or value is None else str(value)


async def connect_temporal(
    settings: Settings, *, runtime: Runtime | None = None, interceptors: Sequence[Interceptor] = ()
) -> Client:
    return await Client.connect(**connect_options(settings), runtime=runtime, interceptors=interceptors)
