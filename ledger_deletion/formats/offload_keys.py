"""Object keys of offloaded ledgers in tiered storage (jclouds offloaders: S3, GCS, Azure, Aliyun).

Keys are flat in the bucket root (``DataBlockUtils`` / ``BlobStoreManagedLedgerOffloader``):

* classic per-ledger offload: ``<uuid>-ledger-<ledgerId>`` and ``<uuid>-ledger-<ledgerId>-index``;
* streaming (segment) offload: ``<uuid>`` and ``<uuid>-index``, one pair per ``OffloadSegment``.

The uuid is ``new java.util.UUID(uidMsb, uidLsb).toString()`` of the ids stored in the ``OffloadContext``
(signed 64-bit longs, as protobuf ``int64`` hands them to us).

The keys only mean something in the object store the offload went to: :class:`ObjectStoreLocation` tells
whether the driver metadata's ``serviceEndpoint`` / ``region`` name the store this service reaches.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

# offload_uuid lives with the request, which derives its workflow ids from it (and sits below the formats).
from ledger_deletion.request import OffloadContext, OffloadDriverMetadata, offload_uuid

__all__ = [
    "BUCKET_PROPERTY",
    "ENDPOINT_PROPERTY",
    "MANAGED_LEDGER_NAME_TAG",
    "REGION_PROPERTY",
    "ROLE_TAG",
    "ObjectStoreLocation",
    "java_uuid_parts",
    "ledger_object_keys",
    "normalise_endpoint",
    "object_role",
    "offload_keys_for_context",
    "offload_uuid",
    "segment_object_keys",
]

BUCKET_PROPERTY: Final = "bucket"
"""Driver-metadata property naming the bucket an offload went to (``TieredStorageConfiguration``)."""
ENDPOINT_PROPERTY: Final = "serviceEndpoint"
"""Driver-metadata property naming the offloader's endpoint URL; ``""`` when the broker set none."""
REGION_PROPERTY: Final = "region"
"""Driver-metadata property naming the offloader's region; ``""`` when the broker set none."""

# User metadata a classic offload writes on both objects since apache/pulsar#14907, lower-cased as S3 hands
# keys back: ``role`` (data | index) and the ``ManagedLedgerName`` extra metadata ManagedLedgerImpl passes.
MANAGED_LEDGER_NAME_TAG: Final = "managedledgername"
ROLE_TAG: Final = "role"

_U64 = 2**64 - 1
_S64_MAX = 2**63 - 1


def java_uuid_parts(uuid_str: str) -> tuple[int, int]:
    """The reverse of :func:`offload_uuid`: Java's ``(getMostSignificantBits(), getLeastSignificantBits())``.

    Both parts come back signed, as protobuf ``int64`` fields hold them.
    """
    value = uuid.UUID(uuid_str).int
    return _signed(value >> 64), _signed(value & _U64)


def _signed(value: int) -> int:
    return value - 2**64 if value > _S64_MAX else value


def ledger_object_keys(uuid: str, ledger_id: int) -> tuple[str, str]:
    """(data key, index key) of a classic per-ledger offload (``DataBlockUtils`` key rules)."""
    data = f"{uuid}-ledger-{ledger_id}"
    return data, f"{data}-index"


def object_role(key: str) -> str:
    """The ``role`` Pulsar writes on the object under ``key``: ``index`` for ``…-index``, else ``data``."""
    return "index" if key.endswith("-index") else "data"


def segment_object_keys(uuid: str) -> tuple[str, str]:
    """(data key, index key) of one streaming-offload segment."""
    return uuid, f"{uuid}-index"


def _bucket(*drivers: OffloadDriverMetadata | None, default: str) -> str:
    """The first non-empty ``bucket`` property of the given driver metadata, else the configured bucket.

    The broker uses the stored driver metadata when it is present, so an offload keeps pointing at the
    bucket it went to even after the broker's configured bucket changed.
    """
    for driver in drivers:
        if driver is not None and driver.properties.get(BUCKET_PROPERTY):
            return driver.properties[BUCKET_PROPERTY]
    return default


def offload_keys_for_context(
    ctx: OffloadContext, ledger_id: int, default_bucket: str
) -> list[tuple[str, str]]:
    """Every (bucket, key) an offloaded ledger may occupy, data key before index key.

    The per-ledger pair comes from the context's own uid (when set); each segment adds its pair, in the
    bucket of its own driver metadata, falling back to the context's, then to ``default_bucket``. Duplicates
    (a segment repeating the context's uid) are listed once.
    """
    keys: list[tuple[str, str]] = []
    if ctx.has_uid:
        bucket = _bucket(ctx.driver_metadata, default=default_bucket)
        ledger_uuid = offload_uuid(ctx.uid_msb, ctx.uid_lsb)
        keys.extend((bucket, key) for key in ledger_object_keys(ledger_uuid, ledger_id))
    for segment in ctx.offload_segment:
        bucket = _bucket(segment.driver_metadata, ctx.driver_metadata, default=default_bucket)
        segment_uuid = offload_uuid(segment.uid_msb, segment.uid_lsb)
        keys.extend((bucket, key) for key in segment_object_keys(segment_uuid))
    return list(dict.fromkeys(keys))


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# AWS's own S3 endpoints: the global s3.amazonaws.com (it serves every region's buckets, by redirect),
# s3.<region>.amazonaws.com, the legacy s3-<region>.amazonaws.com, and their FIPS / dual-stack variants.
_AWS_S3_HOST: Final = re.compile(
    r"s3(?:-fips)?(?:\.dualstack)?(?:[.-](?P<region>[a-z]{2}(?:-[a-z]+)+-\d+))?\.amazonaws\.com(?:\.cn)?"
)
_AWS_US_EAST_1_ALIAS: Final = "s3-external-1.amazonaws.com"


def normalise_endpoint(endpoint: str) -> str:
    """``scheme://host:port[/path]``: one spelling for every way of writing the same endpoint URL.

    Scheme and host are lower-cased, the scheme's default port is made explicit, and a trailing slash (or
    the host's trailing dot) dropped. A URL without a scheme is taken as ``https``, the default of both
    jclouds' S3 providers and the AWS SDKs.

    Raises:
        ValueError: not an http(s) URL with a host, or a port that is not a number.
    """
    text = endpoint.strip()
    parts = urlsplit(text if "://" in text else f"https://{text}")
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")  # urllib lower-cases the host already
    if scheme not in _DEFAULT_PORTS or not host:
        raise ValueError(f"{endpoint!r} is not an http(s) URL with a host")
    port = parts.port or _DEFAULT_PORTS[scheme]  # .port raises ValueError for a port that is not a number
    if ":" in host:  # IPv6 literal: keep it readable as a URL
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def _aws_region(normalised: str) -> str | None:
    """The region of an AWS S3 endpoint (``""`` for the global one), ``None`` for any other endpoint."""
    parts = urlsplit(normalised)
    host = parts.hostname or ""
    if parts.port != _DEFAULT_PORTS.get(parts.scheme) or parts.path:
        return None
    if host == _AWS_US_EAST_1_ALIAS:
        return "us-east-1"
    match = _AWS_S3_HOST.fullmatch(host)
    return None if match is None else match["region"] or ""


@dataclass(frozen=True)
class ObjectStoreLocation:
    """The object store this service's S3 client reaches, as an offload's driver metadata would name it.

    ``endpoint`` is the configured endpoint URL, empty for AWS's own (then the region picks it, as botocore
    does); ``aliases`` are other URLs of that same endpoint (a proxy, a load balancer, another DNS name),
    which no comparison of URLs could find out by itself.

    Raises:
        ValueError: ``endpoint`` or an alias is not an http(s) URL.
    """

    endpoint: str | None
    region: str
    aliases: tuple[str, ...] = ()
    _urls: frozenset[str] = field(init=False, repr=False, compare=False)
    _aws_region: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        own = [normalise_endpoint(self.endpoint)] if self.endpoint else []
        urls = frozenset(own + [normalise_endpoint(alias) for alias in self.aliases])
        # None unless the client goes to AWS's S3; then the region it reaches (an endpoint naming one wins).
        aws_region = _aws_region(own[0]) if own else ""
        if aws_region is not None:
            aws_region = aws_region or self.region.strip().lower()
        object.__setattr__(self, "_urls", urls)
        object.__setattr__(self, "_aws_region", aws_region)

    def describe(self) -> str:
        """The store, for messages: its endpoint (or AWS S3) and region."""
        return f"{self.endpoint or 'AWS S3'} (region {self.region})"

    def refusal(self, driver: OffloadDriverMetadata | None) -> str:
        """Why ``driver`` names another object store than this one; empty when it names this one.

        An empty or missing ``region`` / ``serviceEndpoint`` names nothing: the store is then the one the
        broker's offloader is configured with, which this service is deployed to reach.
        (``TieredStorageConfiguration`` writes ``""`` for a setting the broker left unset, and the current
        ``BlobStoreManagedLedgerOffloader`` reads and deletes through its configured store in any case.)
        Anything named must be this store: a HEAD of its keys here answers 404 whether or not the objects
        are still there, and "already deleted" would ack the request and leave them for ever.
        """
        if driver is None:
            return ""
        region = driver.properties.get(REGION_PROPERTY, "").strip()
        if region and region.lower() != self.region.strip().lower():
            return f"driver metadata names region {region!r}"
        named = driver.properties.get(ENDPOINT_PROPERTY, "").strip()
        if not named:
            return ""
        try:
            url = normalise_endpoint(named)
        except ValueError:
            return f"driver metadata names serviceEndpoint {named!r}, which is not an http(s) URL"
        if url in self._urls:
            return ""
        named_aws_region = _aws_region(url)
        if self._aws_region is not None and named_aws_region is not None:
            # Both are AWS S3, where a bucket name is unique across regions: only a region can differ.
            if named_aws_region in ("", self._aws_region):
                return ""
            return f"driver metadata names serviceEndpoint {named!r}, in region {named_aws_region!r}"
        return f"driver metadata names serviceEndpoint {named!r}"
