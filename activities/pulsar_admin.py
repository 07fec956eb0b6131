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
from ledger_deletion.errors import AdminApiUnavailable
from ledger_deletion.formats.managed_ledger import ledger_list_digest


class PulsarAdminActivities:
    def __init__(self, admin: PulsarAdminClient) -> None:
        self._admin = admin

    @activity.defn(name="check_topic")
    @translate_errors
    def check_topic(self, inp: CheckTopicInput) -> CheckTopicResult:
        # A partition or non-partitioned topic has a managed ledger; the base name of a partitioned topic
        # (schema ledgers are requested under it) exists when its partition metadata does.
        info = self._admin.internal_info(inp.topic_name, unmapped_500_ok=True)
        if info.found:
            return CheckTopicResult(exists=True)
        if info.unmapped_500:
            return self._settle_unmapped_500(inp.topic_name, info.unmapped_500)
        partitions = self._admin.partitions(inp.topic_name)
        return CheckTopicResult(exists=partitions > 0, partitions=partitions)

    def _settle_unmapped_500(self, topic_name: str, failure: str) -> CheckTopicResult:
        """internal-info failed with an unmapped exception: how a broker answers for a managed ledger that
        does not exist (``PulsarAdminClient.internal_info``), and for a metadata-store timeout alike. That
        500 never says "gone" by itself: only Pulsar's own 404 for the topic's partitioned metadata, which
        a broker since 2.8 answers after finding no managed ledger, does. Anything else is retried.
        """
        count = self._admin.partition_count(topic_name)
        if count is None:
            return CheckTopicResult(exists=False)
        if count > 0:
            return CheckTopicResult(exists=True, partitions=count)
        # 0 partitions: the broker says a non-partitioned topic exists (or is older than 2.8 and cannot
        # tell), yet could not read its managed ledger.
        raise AdminApiUnavailable(
            f"internal-info of {topic_name[:80]} failed ({failure}) and its partitioned metadata does not "
            "say the topic is gone (0 partitions)"
        )

    @activity.defn(name="ask_owner_broker")
    @translate_errors
    def ask_owner_broker(self, inp: AskOwnerBrokerInput) -> AskOwnerBrokerResult:
        response = self._admin.internal_stats(inp.topic_name)
        if response.owner_refuses:
            return AskOwnerBrokerResult(
                in_use=True,
                referenced_as="unknown: the owner cannot load it",
                owner_url=response.served_by,
                owner_cannot_load=True,
            )
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
