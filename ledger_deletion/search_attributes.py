"""Custom search attributes that make every deletion findable in the Temporal UI.

Pure module (imported by workflow code). The embedded dev server registers them at start; production
registers them with ``ledger-deletion setup``.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

LEDGER_ID = SearchAttributeKey.for_int("LedgerId")
LEDGER_TYPE = SearchAttributeKey.for_keyword("LedgerType")
LEDGER_COMPONENT = SearchAttributeKey.for_keyword("LedgerComponent")
PULSAR_TOPIC = SearchAttributeKey.for_keyword("PulsarTopic")
PULSAR_TENANT = SearchAttributeKey.for_keyword("PulsarTenant")
PULSAR_NAMESPACE = SearchAttributeKey.for_keyword("PulsarNamespace")
DELETION_STEP = SearchAttributeKey.for_keyword("DeletionStep")
DELETION_OUTCOME = SearchAttributeKey.for_keyword("DeletionOutcome")
# ``live`` or ``shadow`` (contracts.Mode), set at start: shadow runs also have their own workflow id prefix.
DELETION_MODE = SearchAttributeKey.for_keyword("DeletionMode")
# Bytes freed (DELETED) or that would be (WOULD_DELETE), written with the outcome: what ``ledger-deletion
# report`` adds up per namespace without reading any history.
DELETION_BYTES = SearchAttributeKey.for_int("DeletionBytes")

ALL: tuple[SearchAttributeKey, ...] = (  # type: ignore[type-arg]
    LEDGER_ID,
    LEDGER_TYPE,
    LEDGER_COMPONENT,
    PULSAR_TOPIC,
    PULSAR_TENANT,
    PULSAR_NAMESPACE,
    DELETION_STEP,
    DELETION_OUTCOME,
    DELETION_MODE,
    DELETION_BYTES,
)


_CLI_TYPE = {SearchAttributeIndexedValueType.INT: "Int", SearchAttributeIndexedValueType.KEYWORD: "Keyword"}


def cli_types() -> dict[str, str]:
    """Each attribute's type as the ``temporal`` CLI names it (``Int``, ``Keyword``)."""
    return {key.name: _CLI_TYPE[key.indexed_value_type] for key in ALL}


def dev_server_flags() -> list[str]:
    """``--search-attribute Name=Type`` flags for ``temporal server start-dev``."""
    flags: list[str] = []
    for name, kind in cli_types().items():
        flags += ["--search-attribute", f"{name}={kind}"]
    return flags
