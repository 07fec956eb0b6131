"""The scheduled reconcile's activity: run the job's command line as a subprocess, heartbeating meanwhile."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import CancelledError

from ledger_deletion.watch_contracts import RUN_RECONCILE, ReconcileRunInput, ReconcileRunResult

TAIL_LINES = 40
POLL_SECONDS = 10.0  # how often the activity heartbeats (and notices a cancellation) while the job runs


class ReconcileJobActivities:
    def __init__(self, env: Mapping[str, str]) -> None:
        """``env``: the job's environment (the watcher's own: the same settings, as the same command would
        have from a shell)."""
        self._env = dict(env)

    @activity.defn(name=RUN_RECONCILE)
    def run_reconcile(self, inp: ReconcileRunInput) -> ReconcileRunResult:
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        # A session of its own: a cancelled or timed-out run stops the job and whatever it started (Spark's
        # JVM, the extract's process pool) as one process group.
        proc = subprocess.Popen(
            inp.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self._env,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert proc.stdout is not None
        reader = threading.Thread(target=lambda: tail.extend(proc.stdout or ()), daemon=True)
        reader.start()
        try:
            while True:
                try:
                    code = proc.wait(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    activity.heartbeat(f"pid {proc.pid} running")
                    if activity.is_cancelled() or activity.is_worker_shutdown():
                        raise CancelledError("reconcile cancelled") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()  # the pipe's end in this process: a worker runs the job every schedule period
        return ReconcileRunResult(exit_code=code, output_tail="".join(tail))
