"""Where BookKeeper keeps a ledger's metadata znode (``HierarchicalLedgerManager``, BK ``StringUtils``).

The default ("hierarchical") ledger manager is a hybrid: ids below ``Integer.MAX_VALUE`` use the legacy
10-digit layout ``/<2>/<4>/L<4>``, larger ids the long 19-digit layout ``/<3>/<4>/<4>/<4>/L<4>``. Pulsar's own
metadata-store driver (``PulsarLedgerManager``) uses the same rule, so one function serves both.

Deleting a ledger = deleting its znode, so these functions are the last line of defence against deleting the
wrong thing: they refuse anything that is not exactly a ledger path under the ledgers root.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

__all__ = [
    "DEFAULT_LEDGERS_ROOT",
    "LEDGER_PARENT_PATTERN",
    "SPECIAL_ZNODES",
    "is_special_znode",
    "is_under_root",
    "ledger_id_from_path",
    "ledger_path",
]

DEFAULT_LEDGERS_ROOT: Final = "/ledgers"
_INT_MAX: Final = 2**31 - 1  # Integer.MAX_VALUE: the boundary is strict, this id already takes the long form
_LONG_MAX: Final = 2**63 - 1

SPECIAL_ZNODES: Final = frozenset(
    {"available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long"}
)
"""Children of the ledgers root that are not ledgers (``AbstractZkLedgerManager.isSpecialZnode``)."""

LAYOUT_ZNODE: Final = "LAYOUT"
HIERARCHICAL_LAYOUT: Final = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"
"""What BookKeeper's format writes to ``<root>/LAYOUT`` with its default ledger manager (``LedgerLayout``:
layout format version, then ``<manager factory class>:<manager version>``)."""

LEDGER_PARENT_PATTERN: Final = re.compile(r"\d{2,3}")
"""Top-level ledger parents: 2 digits (legacy layout) or 3 digits (long layout). Use with ``fullmatch``."""

# Exact shapes of the part below the root; anything else (extra digits, no "L", special znodes) is refused.
_LEGACY_PATH = re.compile(r"(\d{2})/(\d{4})/L(\d{4})")
_LONG_PATH = re.compile(r"(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})")


def is_special_znode(name: str) -> bool:
    """True for a child of the ledgers root that BookKeeper itself never treats as a ledger."""
    return name in SPECIAL_ZNODES or name.startswith("ID-")


def _normalize_root(root: str) -> str:
    if not root.startswith("/") or root == "/":
        raise ValueError(f"ledgers root must be an absolute path other than '/', got {root!r}")
    normalized = posixpath.normpath(root)
    if normalized != root.rstrip("/"):
        raise ValueError(f"ledgers root {root!r} is not a normalized path")
    return normalized


def ledger_path(ledger_id: int, root: str = DEFAULT_LEDGERS_ROOT) -> str:
    """The znode holding ledger ``ledger_id``'s metadata (``getHybridHierarchicalLedgerPath``).

    >>> ledger_path(123456789)
    '/ledgers/01/2345/L6789'
    >>> ledger_path(2147483647)
    '/ledgers/000/0000/0021/4748/L3647'

    Raises:
        ValueError: a negative id, an id beyond 2^63-1, or a root that is not a normalized absolute path.
    """
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
        raise ValueError(f"ledger id must be an int, got {type(ledger_id).__name__}")
    if not 0 <= ledger_id <= _LONG_MAX:
        raise ValueError(f"ledger id {ledger_id} is outside 0..2^63-1")
    base = _normalize_root(root)
    if ledger_id < _INT_MAX:
        s = f"{ledger_id:010d}"
        return f"{base}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{base}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(path: str, root: str = DEFAULT_LEDGERS_ROOT) -> int:
    """The ledger id a znode path stands for (``stringToHierarchicalLedgerId`` and the long variant).

    Only exact ledger paths are accepted: 3 parts (legacy) or 5 parts (long) under ``root``. Each id has one
    canonical path, so a path that does not round-trip (e.g. a small id spelled in the long layout, which
    BookKeeper would never read) is rejected too.

    Raises:
        ValueError: not a ledger path under ``root`` (special znodes, intermediate znodes, other roots).
    """
    base = _normalize_root(root)
    prefix = base + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path!r} is not under the ledgers root {base!r}")
    rest = path[len(prefix) :]
    match = _LEGACY_PATH.fullmatch(rest) or _LONG_PATH.fullmatch(rest)
    if match is None:
        raise ValueError(f"{path!r} is not a ledger znode path")
    ledger_id = int("".join(match.groups()))
    if ledger_id > _LONG_MAX or ledger_path(ledger_id, base) != path:
        raise ValueError(f"{path!r} is not the canonical znode path of any ledger")
    return ledger_id


def is_under_root(path: str, root: str = DEFAULT_LEDGERS_ROOT) -> bool:
    """True if ``path`` is strictly below ``root`` (not the root itself), after refusing tricks.

    A guard for every ZooKeeper write: relative paths, ``.``/``..`` segments, empty segments and prefix
    look-alikes (``/ledgers-other``) are all refused, so a bug elsewhere cannot reach outside the root.
    """
    try:
        base = _normalize_root(root)
    except ValueError:
        return False
    if not path.startswith(base + "/") or path.endswith("/"):
        return False
    return all(seg not in ("", ".", "..") for seg in path[len(base) + 1 :].split("/"))
