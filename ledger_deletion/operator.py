"""Operator-side Temporal setup: register the project's search attributes through the operator API."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.common import SearchAttributeIndexedValueType

from ledger_deletion import search_attributes as sa
from ledger_deletion.settings import Settings
from ledger_deletion.temporal_client import connect_temporal


async def register_search_attributes(settings: Settings) -> int:
    """Add the attributes that are missing; returns how many were added."""
    client = await connect_temporal(settings)
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=settings.temporal_namespace)
    )
    missing = {
        key.name: IndexedValueType.ValueType(int(key.indexed_value_type))
        for key in sa.ALL
        if key.name not in existing.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=settings.temporal_namespace, search_attributes=missing)
        )
    return len(missing)


_ = SearchAttributeIndexedValueType  # the SDK enum mirrors the API enum value for value
