"""Batched ZooKeeper reads for the extract: many znodes per request where the server allows it.

ZooKeeper 3.6 and later answer a *multi-read* (``ZooDefs.OpCode.multiRead``): one request carrying many
``getData`` / ``getChildren`` operations, each answered on its own (``FinalRequestProcessor`` runs them one
by one and puts an ``ErrorResult`` in the place of one that fails, e.g. a znode deleted meanwhile), so a
request that reads hundreds of znodes costs the ensemble one packet, one queue slot and one reply. kazoo
has no call for it; :class:`MultiRead` is the request record (the same wire format as kazoo's own
``Transaction``: a ``MultiHeader`` before each operation and a closing one, and per result a
``MultiHeader`` naming its type), sent through the client's connection like any of kazoo's requests.

A server without it (3.5 and older) answers ``UNIMPLEMENTED`` (``ZooKeeperServer.submitRequest`` hands an
unknown type to ``UnimplementedRequestProcessor``); then, and when ``multi_read=False``, the same reads go
out as single asynchronous requests pipelined on the session, which is what the extract did everywhere
before. Either way :attr:`ZkReads.requests` counts the requests sent, so the extract can say what it cost.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from kazoo.exceptions import (
    ConnectionLoss,
    MarshallingError,
    NoNodeError,
    UnimplementedError,
    ZookeeperError,
)
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import (
    EXCEPTIONS,
    GetChildren,
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat

__all__ = ["MultiRead", "ZkReads"]

log = logging.getLogger(__name__)

MULTI_READ_OPCODE = 22  # ZooDefs.OpCode.multiRead
_ERROR_TYPE = -1  # ZooDefs.OpCode.error: the header of a failed operation's result
_RESULT_TIMEOUT = 120.0


class MultiRead:
    """A multi-read request: ``operations`` are kazoo ``GetData`` / ``GetChildren`` records (paths with the
    chroot already applied). The answer is a list, in order: ``(data, ZnodeStat)`` for a ``GetData``, the
    child names for a ``GetChildren``, a kazoo exception instance for an operation that failed."""

    type = MULTI_READ_OPCODE  # read by kazoo's connection as ``request.type``
    __slots__ = ("operations",)

    def __init__(self, operations: Sequence[Any]) -> None:
        self.operations = operations

    def serialize(self) -> bytearray:
        out = bytearray()
        for op in self.operations:
            out.extend(MultiHeader(op.type, False, -1).serialize())
            out.extend(op.serialize())
        out.extend(multiheader_struct.pack(-1, True, -1))
        return out

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        kind, done, _ = multiheader_struct.unpack_from(buffer, offset)
        offset += multiheader_struct.size
        while not done:
            if kind == GetData.type:
                data, offset = read_buffer(buffer, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                offset += stat_struct.size
                results.append((data, stat))
            elif kind == GetChildren.type:
                (count,) = int_struct.unpack_from(buffer, offset)
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buffer, offset)
                    children.append(child)
                results.append(children)
            elif kind == _ERROR_TYPE:
                (code,) = int_struct.unpack_from(buffer, offset)
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise MarshallingError(f"multi-read result of unexpected type {kind}")
            kind, done, _ = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
        return results


class ZkReads:
    """Reads on one started kazoo client, batched into multi-reads when the server has them.

    ``batch`` operations go in one multi-read and ``in_flight`` multi-reads are pipelined on the session;
    without multi-read, ``window`` single requests are. A znode that no longer exists is left out of the
    answers (deleted between listing and reading: nothing to reconcile); any other error is raised.
    """

    def __init__(
        self,
        client: Any,
        *,
        multi_read: bool = True,
        batch: int = 500,
        in_flight: int = 8,
        window: int = 4000,
    ) -> None:
        self.client = client
        self.requests = 0
        self._multi: bool | None = None if multi_read else False
        self._batch = max(1, batch)
        self._in_flight = max(1, in_flight)
        self._window = max(1, window)

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    @property
    def multi_read(self) -> bool | None:
        """Whether reads go out as multi-reads (None: not known until the first batched read)."""
        return self._multi

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    # -- single requests -----------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        self.requests += 1
        return self.client.exists(path) is not None

    def children(self, path: str) -> list[str]:
        """The sorted child names of ``path`` ([] when it does not exist)."""
        self.requests += 1
        try:
            return sorted(self.client.get_children(path))
        except NoNodeError:
            return []

    # -- batched -------------------------------------------------------------------------------------------

    def get_many(self, paths: Sequence[str]) -> Iterator[tuple[str, bytes, Any]]:
        """``(path, data, stat)`` for each path that exists, in the order given."""
        for path, (data, stat) in self._read_many(GetData, paths):
            yield path, data or b"", stat

    def children_many(self, paths: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
        """``(path, sorted child names)`` for each path that exists, in the order given."""
        for path, children in self._read_many(GetChildren, paths):
            yield path, sorted(children)

    def _read_many(self, op: Any, paths: Sequence[str]) -> Iterator[tuple[str, Any]]:
        start = 0
        if self._multi is None and paths:
            # The first batch of the session alone: whether the server has multi-read is known after it.
            first = paths[: self._batch]
            answer = self._probe(op, first)
            if answer is not None:
                yield from _present(first, answer)
                start = len(first)
        if self._multi:
            yield from self._multi_reads(op, paths[start:])
        else:
            yield from self._single_reads(op, paths[start:])

    def _probe(self, op: Any, paths: Sequence[str]) -> list[Any] | None:
        try:
            answer = self._submit(op, paths).get(timeout=_RESULT_TIMEOUT)
        except (UnimplementedError, MarshallingError, ConnectionLoss) as exc:
            # A server before 3.6 answers UNIMPLEMENTED and drops the connection (kazoo reconnects the
            # session); single requests always work.
            log.warning("ZooKeeper multi-read unavailable (%r): reading one znode per request", exc)
            self._multi = False
            return None
        self._multi = True
        return list(answer)

    def _submit(self, op: Any, paths: Sequence[str]) -> Any:
        chroot = self.client.chroot
        request = MultiRead([op(_prefix_root(chroot, path), None) for path in paths])
        result = self.client.handler.async_result()
        self.requests += 1
        # kazoo's own calls go through the same private entry point (KazooClient._call).
        self.client._call(request, result)
        return result

    def _multi_reads(self, op: Any, paths: Sequence[str]) -> Iterator[tuple[str, Any]]:
        pending: deque[tuple[Sequence[str], Any]] = deque()
        for start in range(0, len(paths), self._batch):
            chunk = paths[start : start + self._batch]
            pending.append((chunk, self._submit(op, chunk)))
            if len(pending) >= self._in_flight:
                chunk, result = pending.popleft()
                yield from _present(chunk, result.get(timeout=_RESULT_TIMEOUT))
        while pending:
            chunk, result = pending.popleft()
            yield from _present(chunk, result.get(timeout=_RESULT_TIMEOUT))

    def _single_reads(self, op: Any, paths: Sequence[str]) -> Iterator[tuple[str, Any]]:
        call = self.client.get_async if op is GetData else self.client.get_children_async
        for start in range(0, len(paths), self._window):
            chunk = paths[start : start + self._window]
            self.requests += len(chunk)
            pending = [(path, call(path)) for path in chunk]
            for path, result in pending:
                try:
                    yield path, result.get(timeout=_RESULT_TIMEOUT)
                except NoNodeError:
                    continue


def _present(paths: Sequence[str], answers: Sequence[Any]) -> Iterator[tuple[str, Any]]:
    """Pair each path with its answer; leave out the ones that no longer exist, raise any other error."""
    if len(answers) != len(paths):
        raise MarshallingError(f"multi-read answered {len(answers)} of {len(paths)} operations")
    for path, answer in zip(paths, answers, strict=True):
        if isinstance(answer, NoNodeError):
            continue
        if isinstance(answer, ZookeeperError):
            raise answer
        yield path, answer
