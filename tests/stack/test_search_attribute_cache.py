"""The embedded Temporal server caches search attributes; the stack waits until any it adds late are usable.

``start-dev`` normally re-reads a namespace's search attributes from its database on every use; the stack
turns that off (production behaviour, ~3 % of the server's CPU). The price: an attribute added to a running
server is refused for a second or two. ``_ensure_search_attributes`` adds what an older database lacks on
``up``, so it must not return before the server accepts the new attributes, or the first deletions would fail
to start. A real dev server, started on a database created without the attributes.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributePair, TypedSearchAttributes

from devstack.stack import (
    _ensure_search_attributes,
    _registered_search_attributes,
    _temporal_healthy,
    temporal_server_argv,
)
from ledger_deletion import search_attributes as sa

pytestmark = pytest.mark.stack

CACHE_FLAG = "system.forceSearchAttributesCacheRefreshOnRead=false"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _without_search_attribute_flags(argv: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--search-attribute":
            skip = True
        else:
            kept.append(arg)
    return kept


def _every_attribute() -> TypedSearchAttributes:
    # A value of each attribute's own type: an INT attribute takes an int, a keyword a string.
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(key, 1)
        if key.indexed_value_type is SearchAttributeIndexedValueType.INT
        else SearchAttributePair(key, "x")
        for key in sa.ALL
    ]
    return TypedSearchAttributes(pairs)


def test_stack_server_caches_search_attributes() -> None:
    argv = temporal_server_argv(1, 2, Path("db"))
    assert CACHE_FLAG in argv and argv[argv.index(CACHE_FLAG) - 1] == "--dynamic-config-value"


async def test_attributes_added_on_up_are_usable_at_once(tmp_path: Path) -> None:
    port, ui_port = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    # A database created without the attributes, as by a stack older than them.
    argv = _without_search_attribute_flags(temporal_server_argv(port, ui_port, tmp_path / "temporal.db"))
    assert CACHE_FLAG in argv
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _temporal_healthy(address):
            assert time.monotonic() < deadline, "dev server did not start"
            time.sleep(0.5)
        assert not {key.name for key in sa.ALL} & _registered_search_attributes(address)

        _ensure_search_attributes(address)

        # Immediately: a start naming every attribute is accepted (the cache has them).
        client = await Client.connect(address)
        handle = await client.start_workflow(
            "NoSuchWorkflow",
            id=f"sa-cache-{uuid.uuid4().hex[:8]}",
            task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
            search_attributes=_every_attribute(),
        )
        described = await handle.describe()
        assert described.typed_search_attributes.get(sa.PULSAR_TOPIC) == "x"
        await handle.terminate("test cleanup")

        # Nothing missing now: a second `up` returns without creating anything.
        began = datetime.now(UTC)
        _ensure_search_attributes(address)
        assert (datetime.now(UTC) - began).total_seconds() < 5
        assert {key.name for key in sa.ALL} <= _registered_search_attributes(address)
    finally:
        server.terminate()
        server.wait(timeout=30)
