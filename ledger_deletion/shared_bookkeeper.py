"""Who else writes to this BookKeeper: ``LEDGER_DELETION_BOOKKEEPER_SHARED_WITH``, parsed.

Pulsar lets several clusters share one BookKeeper (``PulsarClusterMetadataSetup
--existing-bk-metadata-service-uri``, the broker's ``bookkeeperMetadataServiceUri``). The tags a broker
writes on a ledger (``LedgerMetadataUtils.buildBaseManagedLedgerMetadata``, ``buildMetadataForSchema``) name
no cluster and every cluster draws ids from the one generator, so only the other clusters' metadata stores
can say a ledger is theirs. The operator declares them: ``none`` or their ZooKeeper connect strings, each
with its chroot.

A ground-floor module: imports nothing of the service, so settings, activities and the workflow can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SETTING = "LEDGER_DELETION_BOOKKEEPER_SHARED_WITH"
DOCS = "docs/deployment.md#shared-bookkeeper"
ALONE = "none"
RULE = (
    f"'{ALONE}' (this Pulsar cluster alone uses this BookKeeper), or the other clusters' metadata stores, "
    "comma-separated, each a ZooKeeper connect string host:port[,host:port...]/chroot whose last host "
    "carries the store's chroot ('/' for a store at the root, e.g. zkb:2181/)"
)

_HOST = re.compile(r"[A-Za-z0-9._-]+(:[0-9]{1,5})?")
_CHROOT = re.compile(r"/|(/[^/\s,]+)+")


@dataclass(frozen=True)
class SharedBookKeeper:
    """``alone``: this cluster alone writes to its BookKeeper (``none``); else ``other_stores`` are the
    metadata stores of every other cluster that does, as ZooKeeper connect strings with their chroot."""

    alone: bool
    other_stores: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.alone == bool(self.other_stores):
            raise ValueError("a BookKeeper is either used by this cluster alone or shared with other stores")

    @classmethod
    def parse(cls, value: str) -> SharedBookKeeper:
        """``none`` or the stores, e.g. ``zk1:2181,zk2:2181/pulsar-b,zkc:2181/``.

        A connect string is itself comma-separated, so an entry ends at the host carrying its chroot; the
        chroot cannot be left out (a store at the root is written ``host:port/``), because a connect string
        without one would swallow the next store's hosts.

        Raises:
            ValueError: naming the rule and what broke it.
        """
        text = value.strip()
        if text == ALONE:
            return cls(alone=True)
        if not text:
            raise ValueError(f"empty; expected {RULE}")
        stores: list[str] = []
        hosts: list[str] = []
        for raw in text.split(","):
            token = raw.strip()
            host, slash, chroot = token.partition("/")
            if token == ALONE:
                raise ValueError(f"'{ALONE}' cannot be listed with stores; expected {RULE}")
            if not _HOST.fullmatch(host):
                raise ValueError(f"{token!r} is not host:port[/chroot]; expected {RULE}")
            hosts.append(host)
            if not slash:
                continue
            if not _CHROOT.fullmatch(slash + chroot):
                raise ValueError(f"{token!r} has a chroot that is not a ZooKeeper path; expected {RULE}")
            store = ",".join(hosts) + slash + chroot
            if store in stores:
                raise ValueError(f"{store!r} is listed twice; expected {RULE}")
            stores.append(store)
            hosts = []
        if hosts:
            raise ValueError(f"{','.join(hosts)!r} ends without a chroot; expected {RULE}")
        return cls(alone=False, other_stores=tuple(stores))


def namespace_of(name: str) -> str | None:
    """The namespace (``tenant/ns`` or v1's ``tenant/cluster/ns``) of a managed ledger name
    (``<namespace>/persistent/<topic>[/<cursor>]``) or a schema id (``tenant/ns/topic``), or None.

    The managed ledger name is Pulsar's ``TopicName.getPersistenceNamingEncoding`` (the domain after the
    namespace); a schema id is ``TopicName.getSchemaName``, the topic's name without its domain.
    """
    parts = name.split("/")
    if "persistent" in parts[2:4]:
        index = parts.index("persistent", 2)
        namespace = parts[:index]
    elif len(parts) in (3, 4):
        namespace = parts[:-1]
    else:
        return None
    if len(namespace) not in (2, 3) or any(part in ("", ".", "..") for part in namespace):
        return None
    return "/".join(namespace)
