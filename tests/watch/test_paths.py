"""Which record a znode under Pulsar's metadata roots is."""

from __future__ import annotations

import pytest

from ledger_deletion.watch.paths import CursorRecord, ManagedLedgerRecord, SchemaRecord, classify


@pytest.mark.parametrize(
    ("path", "record"),
    [
        ("/managed-ledgers/t/ns/persistent/a", ManagedLedgerRecord("t/ns/persistent/a")),
        ("/managed-ledgers/t/ns/persistent/a/sub%2F1", CursorRecord("t/ns/persistent/a", "sub%2F1")),
        ("/managed-ledgers/t/c/ns/persistent/a", ManagedLedgerRecord("t/c/ns/persistent/a")),
        ("/managed-ledgers/t/c/ns/persistent/a/s", CursorRecord("t/c/ns/persistent/a", "s")),
        ("/schemas/t/ns/orders", SchemaRecord("t/ns/orders")),
    ],
)
def test_records_are_told_by_their_path(path: str, record: object) -> None:
    assert classify(path) == record


@pytest.mark.parametrize(
    "path",
    [
        "/managed-ledgers",
        "/managed-ledgers/t",
        "/managed-ledgers/t/ns",
        "/managed-ledgers/t/ns/persistent",
        "/managed-ledgers/t/ns/persistent/a/s/deeper",
        "/managed-ledgers/t/ns/persistent//x",
        "/schemas/t/ns",
        "/schemas/t/ns/orders/x",
        "/ledgers/00/0000/L0001",
        "/managed-ledgers-other/t/ns/persistent/a",
    ],
)
def test_everything_else_holds_no_references(path: str) -> None:
    assert classify(path) is None
