"""S3-compatible object store (boto3) for offloaded ledgers: HEAD and DeleteObjects of exact keys only.

Never lists, never deletes by prefix: every key comes from an OffloadContext uuid.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ledger_deletion.errors import AuthorizationError, ObjectStoreUnavailable

_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden"}
_MISSING_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


@dataclass(frozen=True)
class ObjectHead:
    key: str
    size: int
    metadata: dict[str, str]


@dataclass
class ObjectStore:
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # As many as the threads calling at once: past botocore's default of 10, each extra call opened and
    # discarded a connection of its own.
    max_connections: int = 10
    _client: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # Credentials come from the standard AWS chain (env, profile, instance role): never from our settings.
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url or None,
            region_name=self.region,
            config=Config(
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=5,
                read_timeout=20,
                max_pool_connections=self.max_connections,
            ),
        )

    def head(self, bucket: str, key: str) -> ObjectHead | None:
        with _translated(f"HEAD s3://{bucket}/{key}"):
            try:
                response = self._client.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
        return ObjectHead(
            key=key, size=int(response.get("ContentLength", 0)), metadata=dict(response.get("Metadata", {}))
        )

    def delete(self, bucket: str, keys: list[str]) -> None:
        with _translated(f"DeleteObjects s3://{bucket}"):
            response = self._client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
        errors = response.get("Errors") or []
        if errors:
            codes = {e.get("Code", "") for e in errors}
            message = f"DeleteObjects s3://{bucket} failed for {len(errors)} key(s): {sorted(codes)}"
            if codes & _AUTH_CODES:
                raise AuthorizationError(message)
            raise ObjectStoreUnavailable(message)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        code = _code(exc)
        if code in _AUTH_CODES:
            raise AuthorizationError(f"{what}: {code}") from exc
        raise ObjectStoreUnavailable(f"{what}: {code or 'error'}") from exc
    except BotoCoreError as exc:
        raise ObjectStoreUnavailable(f"{what}: {type(exc).__name__}") from exc
