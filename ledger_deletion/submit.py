"""Producer side: publish deletion requests (from JSON lines, the reconcile job, or the demo's mark phase)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from ledger_deletion import connections
from ledger_deletion.adapters import messaging
from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.formats.avro import encode_request
from ledger_deletion.request import PendingDeleteLedgerInfo, request_from_wire
from ledger_deletion.settings import Settings


@dataclass(frozen=True)
class LineError:
    line_number: int
    reason: str


@dataclass
class ParsedLines:
    requests: list[tuple[int, PendingDeleteLedgerInfo]] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)


def parse_jsonl(stream: IO[str]) -> Iterator[tuple[int, PendingDeleteLedgerInfo | LineError]]:
    """Yield (line number, request or error) for each non-blank line; a bad line never stops the rest."""
    for number, line in enumerate(stream, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            yield number, request_from_wire(json.loads(text))
        except json.JSONDecodeError as exc:
            yield number, LineError(number, f"not JSON: {exc.msg} at column {exc.colno}")
        except InvalidRequestError as exc:
            yield number, LineError(number, str(exc))


class RequestPublisher:
    """Publishes requests as Avro to the deletion topic; each send is durable when it returns."""

    def __init__(self, settings: Settings) -> None:
        self._client = connections.pulsar_client(settings)
        self._publisher = messaging.Publisher(self._client, settings.topic)

    def publish(self, request: PendingDeleteLedgerInfo, properties: dict[str, str] | None = None) -> str:
        return self._publisher.send(encode_request(request), properties)

    def publish_raw(self, payload: bytes, properties: dict[str, str] | None = None) -> str:
        return self._publisher.send(payload, properties)

    def close(self) -> None:
        self._publisher.close()
        self._client.close()

    def __enter__(self) -> RequestPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def publish_requests(
    settings: Settings, requests: Iterable[PendingDeleteLedgerInfo], progress: bool = True
) -> int:
    """Publish requests; returns how many were published. Used by ``reconcile --submit``."""
    from rich.progress import track

    items = list(requests)
    with RequestPublisher(settings) as publisher:
        for request in track(items, description="publishing", disable=not progress):
            publisher.publish(request)
    return len(items)
