"""The audit log's objects in S3: added under fresh keys, never overwritten, never deleted; listed and read.

Every write is ``PutObject`` with ``If-None-Match: *`` under a key nobody wrote before (the batch's own
uuid), so the service needs ``s3:PutObject`` and no delete right, and a bucket with S3 Object Lock keeps
every record as written (docs/security.md gives the bucket policy).
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
from ledger_deletion.settings import Settings

_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden"}
PARTITION = "dt"  # Hive-style: <prefix>/dt=YYYY-MM-DD/<file>.parquet, which Spark and DuckDB read as a column


@dataclass
class AuditStore:
    bucket: str
    prefix: str = "ledger-deletion/audit"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    _client: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.prefix = self.prefix.strip("/")
        # Credentials come from the standard AWS chain, as for the offload bucket: never from our settings.
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url or None,
            region_name=self.region,
            config=Config(
                retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20
            ),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> AuditStore:
        return cls(
            settings.audit_bucket,
            settings.audit_prefix,
            settings.audit_store_endpoint,
            settings.audit_s3_region or settings.s3_region,
        )

    def key(self, day: str, name: str) -> str:
        return f"{self.prefix}/{PARTITION}={day}/{name}" if self.prefix else f"{PARTITION}={day}/{name}"

    def add(self, key: str, body: bytes) -> None:
        """Write a new object; an existing key is refused by S3 (412), never replaced."""
        with self._translated(f"PutObject s3://{self.bucket}/{key}"):
            self._client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
                ContentType="application/vnd.apache.parquet",
            )

    def days(self) -> list[str]:
        """The partitions there are (YYYY-MM-DD), oldest first."""
        base = f"{self.prefix}/" if self.prefix else ""
        out = []
        for common in self._pages(Prefix=f"{base}{PARTITION}=", Delimiter="/", key="CommonPrefixes"):
            out.append(str(common["Prefix"])[len(base) + len(PARTITION) + 1 :].rstrip("/"))
        return sorted(out)

    def keys(self, day: str) -> list[str]:
        return sorted(str(o["Key"]) for o in self._pages(Prefix=self.key(day, ""), key="Contents"))

    def get(self, key: str) -> bytes:
        with self._translated(f"GetObject s3://{self.bucket}/{key}"):
            body: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def _pages(self, *, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        # Called by name, not through a paginator: tests/deploy/test_iam.py finds every S3 call in the code.
        token: dict[str, str] = {}
        while True:
            with self._translated(f"ListObjectsV2 s3://{self.bucket}/{kwargs.get('Prefix', '')}"):
                page = self._client.list_objects_v2(Bucket=self.bucket, **kwargs, **token)
            yield from page.get(key) or []
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _AUTH_CODES:
                raise AuthorizationError(f"{what}: {code}") from exc
            raise ObjectStoreUnavailable(f"{what}: {code or 'error'}") from exc
        except BotoCoreError as exc:
            raise ObjectStoreUnavailable(f"{what}: {type(exc).__name__}") from exc
