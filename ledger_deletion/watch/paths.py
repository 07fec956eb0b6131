"""Which Pulsar metadata record a znode is, from its path alone.

``MetaStoreImpl`` keeps a managed ledger at ``/managed-ledgers/<ml name>`` and its cursors as children of it;
``BookkeeperSchemaStorage`` keeps a schema's locator at ``/schemas/<schema id>``. A managed-ledger name is
``tenant/ns/persistent/local`` (V2) or ``tenant/cluster/ns/persistent/local`` (V1); the local name and the
cursor name are encoded (``Codec.encode``), so neither holds a ``/``. Everything else under the roots (the
tenant, namespace and ``persistent`` levels) holds no references.

A five-part path whose third part is ``persistent`` is read as a V2 cursor: only a V1 namespace named
``persistent`` could make it a V1 managed ledger instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "MANAGED_LEDGERS_ROOT",
    "ROOTS",
    "SCHEMAS_ROOT",
    "CursorRecord",
    "ManagedLedgerRecord",
    "Record",
    "SchemaRecord",
    "classify",
]

MANAGED_LEDGERS_ROOT: Final = "/managed-ledgers"  # MetaStoreImpl.BASE_NODE
SCHEMAS_ROOT: Final = "/schemas"  # BookkeeperSchemaStorage's SchemaPath
ROOTS: Final = (MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT)
_PERSISTENT: Final = "persistent"


@dataclass(frozen=True)
class ManagedLedgerRecord:
    name: str  # tenant/ns/persistent/local


@dataclass(frozen=True)
class CursorRecord:
    managed_ledger: str
    cursor: str


@dataclass(frozen=True)
class SchemaRecord:
    schema_id: str  # tenant/ns/topic


Record = ManagedLedgerRecord | CursorRecord | SchemaRecord


def classify(path: str) -> Record | None:
    """The record at ``path`` (an absolute znode path), or None for a znode that holds no references."""
    if path.startswith(MANAGED_LEDGERS_ROOT + "/"):
        parts = path[len(MANAGED_LEDGERS_ROOT) + 1 :].split("/")
        if "" in parts:
            return None
        for depth in (2, 3):  # index of "persistent": V2, then V1
            if len(parts) > depth + 1 and parts[depth] == _PERSISTENT:
                name = "/".join(parts[: depth + 2])
                if len(parts) == depth + 2:
                    return ManagedLedgerRecord(name)
                if len(parts) == depth + 3:
                    return CursorRecord(name, parts[-1])
                return None
        return None
    if path.startswith(SCHEMAS_ROOT + "/"):
        parts = path[len(SCHEMAS_ROOT) + 1 :].split("/")
        if len(parts) == 3 and "" not in parts:
            return SchemaRecord("/".join(parts))
    return None
