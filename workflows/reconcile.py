"""ReconcileWorkflow: one run of the periodic reconcile, started by its Temporal Schedule.

The watcher catches what leaves Pulsar's metadata while it watches; the reconcile finds everything else
(offloaded objects that left while no watcher ran, ledgers an interrupted watch could not see). Kept as a
Schedule, it shows in Temporal's UI with its runs, and an operator pauses, triggers or edits it there.
The run is one activity that runs the job as a subprocess (locally or through ``spark-submit``) on a watcher
process, heartbeating while it runs; it is not retried: the next scheduled run is the retry.

Deterministic code only; the activity is called by name.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from ledger_deletion.watch_contracts import RUN_RECONCILE, ReconcileRunInput, ReconcileRunResult

WORKFLOW_NAME = "ReconcileWorkflow"
HEARTBEAT_SECONDS = 60.0


@workflow.defn(name=WORKFLOW_NAME)
class ReconcileWorkflow:
    @workflow.run
    async def run(self, inp: ReconcileRunInput) -> ReconcileRunResult:
        result: ReconcileRunResult = await workflow.execute_activity(
            RUN_RECONCILE,
            inp,
            result_type=ReconcileRunResult,
            start_to_close_timeout=timedelta(seconds=inp.timeout_seconds),
            heartbeat_timeout=timedelta(seconds=HEARTBEAT_SECONDS),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        if result.exit_code != 0:
            # A failed run shows as failed among the schedule's recent runs, its output in the error.
            raise ApplicationError(
                f"reconcile exited with {result.exit_code}: {result.output_tail[-2000:]}",
                type="ReconcileFailed",
                non_retryable=True,
            )
        return result
