"""Ledger id <-> znode path: BookKeeper's hybrid hierarchical layout, checked against worked examples."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_deletion.formats.bk_paths import (
    LEDGER_PARENT_PATTERN,
    is_special_znode,
    is_under_root,
    ledger_id_from_path,
    ledger_path,
)

EXAMPLES = [
    (0, "/ledgers/00/0000/L0000"),
    (1, "/ledgers/00/0000/L0001"),
    (123456789, "/ledgers/01/2345/L6789"),
    (2147483646, "/ledgers/21/4748/L3646"),  # last id on the legacy layout
    (2147483647, "/ledgers/000/0000/0021/4748/L3647"),  # Integer.MAX_VALUE: strict <, so already long
    (2147483653, "/ledgers/000/0000/0021/4748/L3653"),
    (2**32 + 7, "/ledgers/000/0000/0042/9496/L7303"),
    (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
]


@pytest.mark.parametrize(("ledger_id", "path"), EXAMPLES)
def test_worked_examples(ledger_id, path):
    assert ledger_path(ledger_id) == path
    assert ledger_id_from_path(path) == ledger_id


def test_custom_root():
    assert ledger_path(1, "/pulsar/ledgers") == "/pulsar/ledgers/00/0000/L0001"
    assert ledger_id_from_path("/pulsar/ledgers/00/0000/L0001", "/pulsar/ledgers") == 1
    assert ledger_path(1, "/ledgers/") == "/ledgers/00/0000/L0001"


@pytest.mark.parametrize("bad", [-1, -(2**63), 2**63, True, 1.0])
def test_ledger_path_rejects_bad_ids(bad):
    with pytest.raises(ValueError):
        ledger_path(bad)


@pytest.mark.parametrize("root", ["ledgers", "/", "", "/a/../ledgers", "/ledgers//x"])
def test_ledger_path_rejects_bad_roots(root):
    with pytest.raises(ValueError):
        ledger_path(1, root)


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers",
        "/ledgers/00",
        "/ledgers/00/0000",
        "/ledgers/00/0000/0001",  # no L
        "/ledgers/00/0000/L001",
        "/ledgers/000/0000/L0001",  # 3-digit parent in a 3-part path
        "/ledgers/00/0000/0000/0000/L0001",  # 2-digit parent in a 5-part path
        "/ledgers/000/0000/0000/0000/L0001",  # id 1 in the long layout: not where BK looks for it
        "/ledgers/21/4748/L3653",  # id >= 2^31-1 in the legacy layout: likewise
        "/ledgers/999/9999/9999/9999/L9999",  # beyond 2^63-1
        "/ledgers/available",
        "/ledgers/LAYOUT",
        "/ledgers/idgen/ID-0000000001",
        "/ledgers/00/0000/L0001/",
        "/ledgers/00/0000/L0001/x",
        "/other/00/0000/L0001",
        "/ledgers-x/00/0000/L0001",
        "ledgers/00/0000/L0001",
        "/ledgers/0a/0000/L0001",
        "/ledgers/00/0000/L000１",  # non-ASCII digit
    ],
)
def test_ledger_id_from_path_rejects(path):
    with pytest.raises(ValueError):
        ledger_id_from_path(path)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_round_trip(ledger_id):
    path = ledger_path(ledger_id)
    assert ledger_id_from_path(path) == ledger_id
    assert is_under_root(path)
    parts = path.split("/")[2:]
    assert LEDGER_PARENT_PATTERN.fullmatch(parts[0])
    assert len(parts) == (3 if ledger_id < 2**31 - 1 else 5)


@pytest.mark.parametrize(
    "name",
    ["available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long", "ID-1"],
)
def test_special_znodes(name):
    assert is_special_znode(name)
    assert not LEDGER_PARENT_PATTERN.fullmatch(name)


@pytest.mark.parametrize("name", ["00", "000", "12", "layout", "id-1"])
def test_not_special(name):
    assert not is_special_znode(name)


def test_parent_pattern():
    assert LEDGER_PARENT_PATTERN.fullmatch("00")
    assert LEDGER_PARENT_PATTERN.fullmatch("922")
    assert not LEDGER_PARENT_PATTERN.fullmatch("0")
    assert not LEDGER_PARENT_PATTERN.fullmatch("0000")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/ledgers/00/0000/L0001", True),
        ("/ledgers/00", True),
        ("/ledgers", False),  # the root itself is never a target
        ("/ledgers/", False),
        ("/ledgers-other/00", False),
        ("/ledgersx", False),
        ("/ledgers/../managed-ledgers", False),
        ("/ledgers/./00", False),
        ("/ledgers//00", False),
        ("/ledgers/00/", False),
        ("ledgers/00", False),
        ("/managed-ledgers/a", False),
    ],
)
def test_is_under_root(path, expected):
    assert is_under_root(path, "/ledgers") is expected


def test_is_under_root_bad_root():
    assert not is_under_root("/x/y", "/")
    assert not is_under_root("/x/y", "x")
    assert is_under_root("/pulsar/ledgers/00", "/pulsar/ledgers")
