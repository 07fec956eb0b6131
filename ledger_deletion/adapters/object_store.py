"""S3-compatible object store (boto3) for offloaded ledgers: HEAD and DeleteObjects of exact keys only.

Never lists, never deletes by prefix: every key comes from an OffloadContext uuid. The only other request is
HeadBucket, to tell "the object is gone" from "the bucket is not here" (a HEAD of an object answers a bare 404
for both).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ledger_deletion.errors import AuthorizationError, BucketNotFound, ObjectStoreUnavailable

_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden"}
# A missing object. NoSuchBucket is deliberately not here: a wrong bucket or endpoint must not read as
# "already deleted" (the request would be acked and the objects kept for ever).
_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}
# The bucket is not at this endpoint / in this region. Redirects (301 PermanentRedirect) and a region mismatch
# in the signature come from AWS when the bucket lives in another region than LEDGER_DELETION_S3_REGION.
_WRONG_BUCKET_CODES = {
    "NoSuchBucket",
    "301",
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
}


@dataclass(frozen=True)
class ObjectHead:
    key: str
    size: int
    metadata: dict[str, str]
    # The version HEAD saw, in a bucket that has (or had) versioning; "null" for an object written while
    # versioning was off or suspended; None in a bucket that never had versioning.
    version_id: str | None = None
    etag: str = ""  # as S3 sends it (quoted); the audit log keeps it as evidence of which bytes went

    @property
    def versioned(self) -> bool:
        """A delete of this object leaves its bytes behind, as a noncurrent version."""
        return self.version_id not in (None, "null")


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
        """The object's size and user metadata, or None when S3 answers 404.

        A 404 on HEAD has no body, so it does not say whether the key or the bucket is missing: a caller that
        concludes "already deleted" from None must confirm the bucket with :meth:`require_bucket`.
        """
        with self._translated(bucket, f"HEAD s3://{bucket}/{key}"):
            try:
                response = self._client.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
        return ObjectHead(
            key=key,
            size=int(response.get("ContentLength", 0)),
            metadata=dict(response.get("Metadata", {})),
            version_id=response.get("VersionId"),
            etag=str(response.get("ETag", "")),
        )

    def require_bucket(self, bucket: str) -> None:
        """Raise :class:`BucketNotFound` unless ``bucket`` exists at this endpoint, in this region.

        HeadBucket needs s3:ListBucket, as a 404 (rather than 403) on HEAD of a missing object already does.
        """
        with self._translated(bucket, f"HeadBucket s3://{bucket}"):
            try:
                self._client.head_bucket(Bucket=bucket)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    raise self._bucket_not_found(bucket, _code(exc)) from exc
                raise

    def delete(self, bucket: str, keys: list[str]) -> list[str]:
        """DeleteObjects of exactly ``keys``; returns those S3 kept as a delete marker.

        In a bucket with versioning a delete without a version id does not remove the bytes: it writes a
        delete marker, and the object's versions stay (noncurrent) until a lifecycle rule expires them. The
        non-quiet answer says so per key (``DeleteMarker``), so the caller can report it.
        """
        with self._translated(bucket, f"DeleteObjects s3://{bucket}"):
            response = self._client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": False}
            )
        errors = response.get("Errors") or []
        if errors:
            codes = {e.get("Code", "") for e in errors}
            message = f"DeleteObjects s3://{bucket} failed for {len(errors)} key(s): {sorted(codes)}"
            if codes & _AUTH_CODES:
                raise AuthorizationError(message)
            if codes & _WRONG_BUCKET_CODES:
                raise self._bucket_not_found(bucket, ",".join(sorted(codes & _WRONG_BUCKET_CODES)))
            raise ObjectStoreUnavailable(message)
        return [str(d["Key"]) for d in response.get("Deleted") or [] if d.get("DeleteMarker")]

    def _bucket_not_found(self, bucket: str, code: str) -> BucketNotFound:
        where = self.endpoint_url or "AWS S3"
        return BucketNotFound(
            f"bucket {bucket!r} not found at {where} (region {self.region}): S3 answered {code}; check the "
            "offload driver metadata's bucket and LEDGER_DELETION_S3_ENDPOINT / LEDGER_DELETION_S3_REGION"
        )

    @contextmanager
    def _translated(self, bucket: str, what: str) -> Iterator[None]:
        try:
            yield
        except ClientError as exc:
            code = _code(exc)
            if code in _AUTH_CODES:
                raise AuthorizationError(f"{what}: {code}") from exc
            if code in _WRONG_BUCKET_CODES:
                raise self._bucket_not_found(bucket, code) from exc
            raise ObjectStoreUnavailable(f"{what}: {code or 'error'}") from exc
        except BotoCoreError as exc:
            raise ObjectStoreUnavailable(f"{what}: {type(exc).__name__}") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
