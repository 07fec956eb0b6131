"""The instrument table (``metrics.INSTRUMENTS``) is what the service records: every instrument it declares is
recorded with exactly the labels it declares, and nothing else is recorded. docs/metrics.md is generated from
that table, so a label added to a call without the table would otherwise go undocumented."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ledger_deletion.observability.metrics import INSTRUMENTS, Labels, Metrics


def _recorded(reader: InMemoryMetricReader) -> dict[str, set[tuple[str, ...]]]:
    """Each recorded instrument's label sets (the keys of every data point's attributes)."""
    data = reader.get_metrics_data()
    assert data is not None
    recorded: dict[str, set[tuple[str, ...]]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                keys = recorded.setdefault(metric.name, set())
                keys.update(tuple(sorted(point.attributes or {})) for point in metric.data.data_points)
    return recorded


def test_every_instrument_is_recorded_with_the_labels_it_declares() -> None:
    reader = InMemoryMetricReader()
    recorder = Metrics(MeterProvider(metric_readers=[reader]))
    labels = Labels("pulsar", "acme", "MANAGED_LEDGER")
    # Every recording method once, with a value that records (a skip outcome also counts as skipped).
    recorder.request_received(labels)
    recorder.request_completed(labels, "SKIPPED_IN_USE")
    recorder.bk_ledger_deleted(labels)
    recorder.offloaded_ledger_deleted(labels)
    recorder.bk_delete_failed(labels, "MetadataStoreUnavailable")
    recorder.offload_delete_failed(labels, "ObjectStoreUnavailable")
    recorder.messages_acked(labels, 2)
    recorder.dead_lettered(labels, "decode")
    recorder.step_finished(labels, "check_topic", 0.01, ok=True)
    unregister = recorder.observe_pending_acks("pulsar", lambda: 3)
    recorder.inflight_estimated({"acme": 4}, backlog_measured=True)
    unregister_switch = recorder.observe_kill_switch("bookkeeper", lambda: True, lambda: 1.5)
    recorder.shared_bookkeeper_evidence("other/ns")
    recorder.watch_unknown_namespace("other/ns", 2)
    unregister_tripwire = recorder.observe_tripwire(lambda: ("other/ns",))
    recorder.audited("DELETED", "acme/orders", "MANAGED_LEDGER", 4096)
    recorder.audit_batch_written()

    recorded = _recorded(reader)
    unregister()
    unregister_switch()
    unregister_tripwire()

    declared = {instrument.name: {tuple(sorted(instrument.labels))} for instrument in INSTRUMENTS}
    assert recorded == declared


def test_instrument_names_are_unique_and_kinds_known() -> None:
    names = [instrument.name for instrument in INSTRUMENTS]
    assert len(names) == len(set(names))
    assert {instrument.kind for instrument in INSTRUMENTS} <= {"counter", "histogram", "gauge"}
    assert all(instrument.description for instrument in INSTRUMENTS)
