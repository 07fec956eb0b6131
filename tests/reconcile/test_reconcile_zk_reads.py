"""Batched ZooKeeper reads: multi-read, and its pipelined fallback.

The reads run against the embedded stack's ZooKeeper (3.8: it has multi-read), under a chroot of their own;
the fallback is driven by a client whose multi-read the server refuses, as a server before 3.6 would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, UnimplementedError
from kazoo.security import make_digest_acl

from ledger_deletion.adapters.zk_reads import ZkReads

pytestmark = [pytest.mark.stack]


@pytest.fixture
def tree(stack: Any, zk: Any) -> Iterator[tuple[str, dict[str, bytes]]]:
    """A chroot holding 1,200 znodes with data (more than two multi-read batches) under /d."""
    chroot = f"/zk-reads-{uuid.uuid4().hex[:10]}"
    nodes = {f"/d/n{i:05d}": f"value {i}".encode() for i in range(1200)}
    zk.ensure_path(chroot + "/d")
    txn = zk.transaction()
    for path, data in nodes.items():
        txn.create(chroot + path, data)
    assert all(r is True or isinstance(r, str) for r in txn.commit())
    yield stack.zookeeper + chroot, nodes
    zk.delete(chroot, recursive=True)


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts)
    client.start()
    return client


@pytest.mark.parametrize("multi_read", [True, False])
def test_batched_reads_answer_as_single_reads(tree: tuple[str, dict[str, bytes]], multi_read: bool) -> None:
    hosts, nodes = tree
    client = _client(hosts)
    try:
        reads = ZkReads(client, multi_read=multi_read, batch=500)
        paths = sorted(nodes)
        asked = [*paths[:700], "/d/gone", *paths[700:]]  # one that does not exist, mid-batch

        got = list(reads.get_many(asked))

        assert [path for path, _, _ in got] == paths  # in order, the missing one left out
        assert {path: data for path, data, _ in got} == nodes
        assert all(stat.dataLength == len(nodes[path]) for path, _, stat in got)
        assert reads.multi_read is multi_read
        # 1,201 reads: three multi-reads of at most 500, or one request each.
        assert reads.requests == (3 if multi_read else 1201)
        children = dict(reads.children_many(["/d", "/nothing", "/"]))
        assert children == {"/d": [p.rsplit("/", 1)[1] for p in paths], "/": ["d"]}
    finally:
        client.stop()
        client.close()


def test_an_error_other_than_a_missing_znode_is_raised(stack: Any, zk: Any) -> None:
    """A znode the session may not read fails the read, as a single getData would; it is not skipped."""
    chroot = f"/zk-reads-acl-{uuid.uuid4().hex[:10]}"
    zk.ensure_path(chroot)
    zk.create(chroot + "/secret", b"x", acl=[make_digest_acl("someone", "else", all=True)])
    client = _client(stack.zookeeper + chroot)
    try:
        with pytest.raises(NoAuthError):
            list(ZkReads(client).get_many(["/secret"]))
    finally:
        client.stop()
        client.close()
        zk.delete(chroot + "/secret")  # deleting needs rights on the parent only; listing it would not
        zk.delete(chroot)


class _NoMultiRead:
    """Stands in for a server before 3.6: kazoo's connection answers a multi-read with UNIMPLEMENTED."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _call(self, request: Any, result: Any) -> None:
        self.refused += 1
        result.set_exception(UnimplementedError())


def test_without_multi_read_the_reads_go_one_by_one(tree: tuple[str, dict[str, bytes]]) -> None:
    hosts, nodes = tree
    client = _client(hosts)
    try:
        server = _NoMultiRead(client)
        reads = ZkReads(server, batch=500)

        got = {path: data for path, data, _ in reads.get_many(sorted(nodes))}

        assert got == nodes
        assert reads.multi_read is False and server.refused == 1  # asked once, then never again
        assert reads.requests == 1 + len(nodes)
    finally:
        client.stop()
        client.close()
