"""Per-namespace deletion topics (tenant isolation): which topics the settings name, and what a
message on each may ask for.

Only the broker writes the system deletion topic, so a request on it (or on one of its partitions) is taken as
sent: it may name any namespace and may skip the in-use check (PIP-186's ``checkLedgerStillInUse=false``, for
ledgers the broker has already dropped from its metadata). Anyone allowed to produce on a namespace can write
that namespace's deletion topic, so a request arriving there is confined to that namespace and always gets the
in-use check. Without that, a tenant could name another tenant's live ledger with the check off: the BK
metadata would match (the request names the victim's real managed ledger) and nothing else would stop it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ledger_deletion.errors import InvalidRequestError
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings

_DEFAULT_DOMAIN = "persistent://"
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")


def tenant_topics(settings: Settings) -> list[str]:
    """Explicit per-namespace deletion topics (``LEDGER_DELETION_TENANT_TOPICS``, comma-separated)."""
    return [t.strip() for t in settings.tenant_topics.split(",") if t.strip() and t.strip() != settings.topic]


def topic_patterns(settings: Settings) -> list[str]:
    """Regexes (``LEDGER_DELETION_TOPIC_PATTERN``, whitespace-separated), each within one namespace."""
    return settings.topic_pattern.split()


def tenant_of_topic(topic: str) -> str:
    """``persistent://tenant/ns/local`` or ``tenant/ns/local`` → ``tenant``."""
    return topic.split("://", 1)[-1].split("/", 1)[0]


def namespace_of_topic(topic: str) -> str:
    """``persistent://tenant/ns/local`` or ``tenant/ns/local`` → ``tenant/ns`` (V1: ``tenant/cluster/ns``).

    A partition (``local-partition-3``) is in its topic's namespace: only the local name carries the suffix.
    """
    return topic.split("://", 1)[-1].rsplit("/", 1)[0]


def partitioned_topic(topic: str) -> str:
    """The topic a partition belongs to (``…/local-partition-3`` → ``…/local``); any other topic unchanged.

    Pulsar reserves ``-partition-N`` for partitions, so the suffix always names one.
    """
    return _PARTITION_SUFFIX.sub("", topic)


def is_system_topic(topic: str, system_topic: str) -> bool:
    """Did a message on ``topic`` (as the client names it) come on ``system_topic`` or a partition of it?"""
    arrived = _qualified(topic)
    system = _qualified(system_topic)
    return arrived == system or partitioned_topic(arrived) == system


def confine_to_topic(
    request: PendingDeleteLedgerInfo, topic: str, system_topic: str
) -> PendingDeleteLedgerInfo:
    """The request as a message that arrived on ``topic`` may make it.

    From the system topic: unchanged. From any other topic (a namespace's own deletion topic): only if every
    name it carries is in that topic's namespace, and with ``check_ledger_still_in_use`` set, whatever it
    said. The managed-ledger name and a cursor derive from ``topic_name``; a schema ledger is also named by
    ``schema_id``.

    Raises:
        InvalidRequestError: the request names a namespace other than its topic's (both are in the message).
    """
    if is_system_topic(topic, system_topic):
        return request
    allowed = namespace_of_topic(topic)
    named = [("topicName", request.topic_name)]
    if request.schema_id:
        named.append(("schemaId", request.schema_id))
    for field_name, name in named:
        if (namespace := namespace_of_topic(name)) != allowed:
            raise InvalidRequestError(
                f"{field_name} {name!r} is in namespace {namespace!r}, but the request came on {topic} of "
                f"namespace {allowed!r}: a namespace's deletion topic may only name that namespace"
            )
    return replace(request, check_ledger_still_in_use=True)


def _qualified(topic: str) -> str:
    """The topic with its domain: Pulsar reads a name without one as ``persistent://``."""
    return topic if "://" in topic else _DEFAULT_DOMAIN + topic
