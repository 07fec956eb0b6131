"""Activities that ask Pulsar (admin REST) about a topic: does it exist, does its owner still use a ledger."""

from __future__ import annotations

from temporalio import activity

from activities._boundary import translate_errors
from ledger_deletion.adapters.pulsar_admin import (
    PulsarAdminClient,
    completely_offloaded,
    ledgers_in_use,
    listed_ledgers,
)
from ledger_deletion.contracts import (
    AskOwnerBrokerInput,
    AskOwnerBrokerResult,
    CheckTopicInput,
    CheckTopicResult,
)
from ledger_deletion.formats.managed_ledger import ledger_list_digest


class PulsarAdminActivities:
    def __init__(self, admin: PulsarAdminClient) -> None:
        self._admin = admin

    @activity.defn(name="check_topic")
    @translate_errors
    def check_topic(self, inp: CheckTopicInput) -> CheckTopicResult:
        # A partition or non-partitioned topic has a managed ledger; the base name of a partitioned topic
        # (schema ledgers are requested under it) exists when its partition metadata does.
        if self._admin.internal_info(inp.topic_name).found:
            return CheckTopicResult(exists=True)
        partitions = self._admin.partitions(inp.topic_name)
        return CheckTopicResult(exists=partitions > 0, partitions=partitions)

    @activity.defn(name="ask_owner_broker")
    @translate_errors
    def ask_owner_broker(self, inp: AskOwnerBrokerInput) -> AskOwnerBrokerResult:
        response = self._admin.internal_stats(inp.topic_name)
        if not response.found:
            partitions = self._admin.partitions(inp.topic_name)
            if partitions == 0:
                return AskOwnerBrokerResult(in_use=False, topic_exists=False, owner_url=response.served_by)
            # Base name of a partitioned topic: schema ledgers are shared by all partitions, ask partition 0.
            response = self._admin.internal_stats(f"{inp.topic_name}-partition-0")
            if not response.found:
                return AskOwnerBrokerResult(in_use=False, topic_exists=False, owner_url=response.served_by)
        referenced = ledgers_in_use(response.body)
        where = referenced.get(inp.ledger_id, "")
        listed = where == "ledgers"
        return AskOwnerBrokerResult(
            in_use=bool(where),
            referenced_as=where,
            owner_url=response.served_by,
            offloaded=listed and inp.ledger_id in completely_offloaded(response.body),
            listed_digest=ledger_list_digest(listed_ledgers(response.body)) if listed else "",
        )
