"""Connecting to Temporal with the service's settings (address, namespace, TLS, API key)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import Client, Interceptor
from temporalio.runtime import Runtime

from ledger_deletion.settings import Settings


async def connect_temporal(
    settings: Settings, *, runtime: Runtime | None = None, interceptors: Sequence[Interceptor] = ()
) -> Client:
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=api_key,
        tls=settings.temporal_tls or bool(api_key),
        runtime=runtime,
        interceptors=interceptors,
    )
