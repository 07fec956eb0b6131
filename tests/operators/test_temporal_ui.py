"""The Temporal UI as the operator's console, checked in a real browser (headless Chromium from Debian).

The check is skipped only where Chromium is missing and cannot be installed (``apt-get install chromium``
needs root and Debian's package archive); everywhere else it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.service import RPCError

from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion import explain
from ledger_deletion.contracts import DeletionStatus, Mode, Outcome
from ledger_deletion.request import PendingDeleteLedgerInfo
from ledger_deletion.settings import Settings
from ledger_deletion.submit import RequestPublisher
from tests.operators.support import Observed, orphan_requests, results_of
from tests.support import eventually, running_pools
from workflows.ledger_deletion import STATUS_QUERY

pytestmark = pytest.mark.stack

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_or_install_chromium() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Chromium is not installed and cannot be installed here (needs root and apt-get)")
    install = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if install.returncode != 0:
        update = subprocess.run(["apt-get", "update"], capture_output=True, timeout=600)
        if update.returncode == 0:
            install = subprocess.run(
                ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
    path = shutil.which("chromium")
    if install.returncode != 0 or path is None:
        pytest.skip(f"Chromium could not be installed: {install.stderr.strip()[-300:]}")
    return path


def render(browser: str, url: str, profile: Path, screenshot: Path | None = None) -> str:
    """The DOM after the single-page app has rendered (virtual time lets its fetches finish)."""
    base = [
        browser,
        "--headless",
        "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        "--window-size=1600,1000",
    ]
    if screenshot is not None and os.environ.get("LEDGER_DELETION_UI_SCREENSHOTS"):
        # Opt-in (a second browser run per page): PNGs to look at, e.g. when the DOM check fails.
        subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
    done = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    return done.stdout


def render_live(browser: str, url: str, profile: Path, until: str, timeout: float = 30.0) -> str:
    """The DOM of a page that keeps fetching, once it shows ``until`` (or at ``timeout``, whatever it shows),
    URL-decoded: the UI's Markdown panes (user metadata) are iframes whose text is in their ``src``.

    A running workflow's page long-polls its history, and virtual time waits for fetches: ``render`` would
    return only once the run has ended. This drives Chromium over its DevTools pipe instead (fd 3 in, fd 4
    out, NUL-terminated JSON) and reads the DOM in real time.
    """
    browser_reads, to_browser = os.pipe()
    from_browser, browser_writes = os.pipe()

    # A small exec puts the pipe ends on the fds Chromium expects (no preexec_fn: this process has threads;
    # no shell: dash redirects single-digit fds only).
    wire = (
        "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
        "os.execvp(sys.argv[3], sys.argv[3:])"
    )
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            wire,
            str(browser_reads),
            str(browser_writes),
            *command,
            "--remote-debugging-pipe",
            "--window-size=1600,1000",
            "about:blank",
        ],
        pass_fds=(browser_reads, browser_writes),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(browser_reads)
    os.close(browser_writes)
    pending = b""
    calls = 0

    def call(method: str, params: dict[str, object], session: str = "") -> dict[str, Any]:
        nonlocal pending, calls
        calls += 1
        message: dict[str, object] = {"id": calls, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in pending:
                chunk = os.read(from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium closed its DevTools pipe (during {method})")
                pending += chunk
            raw, pending = pending.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == calls:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result

    try:
        target = call("Target.createTarget", {"url": url})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        deadline = time.monotonic() + timeout
        while True:
            time.sleep(1.0)
            dom = call(
                "Runtime.evaluate",
                {"expression": "document.documentElement.outerHTML", "returnByValue": True},
                session,
            )
            html = urllib.parse.unquote(str(dom["result"]["value"]))
            if until in html or time.monotonic() > deadline:
                return html
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            call("Browser.close", {})
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(to_browser)
        os.close(from_browser)


async def test_ui_lists_the_workflows_and_finds_one_by_ledger_id(
    observed: Observed,
    observed_publisher: RequestPublisher,
    cluster: SimulatedCluster,
    stack: StackEndpoints,
    tmp_path: Path,
) -> None:
    browser = await asyncio.to_thread(find_or_install_chromium)
    _, requests = orphan_requests(cluster, f"ui-{uuid.uuid4().hex[:6]}", offloaded=False)
    for request in requests:
        observed_publisher.publish(request)
    results = await results_of(observed.client, requests)
    assert {r.outcome for r in results.values()} == {Outcome.DELETED}
    await asyncio.sleep(1.5)  # visibility is eventually consistent
    base = stack.temporal_ui_url.rstrip("/")
    namespace = observed.settings.temporal_namespace

    listing = await asyncio.to_thread(
        render, browser, f"{base}/namespaces/{namespace}/workflows", tmp_path / "p1", tmp_path / "list.png"
    )
    for request in requests:  # the newest workflows are on the first page
        assert request.workflow_id in listing, f"{request.workflow_id} not in the UI's workflow list"
    assert "LedgerDeletionWorkflow" in listing

    target = requests[0]
    query = urllib.parse.quote(f"LedgerId={target.ledger_id}")
    found = await asyncio.to_thread(
        render,
        browser,
        f"{base}/namespaces/{namespace}/workflows?query={query}",
        tmp_path / "p2",
        tmp_path / "search.png",
    )
    assert target.workflow_id in found
    assert requests[1].workflow_id not in found  # the search narrowed the list to that ledger


async def test_a_deletions_page_says_what_it_deletes_and_each_step_on_what(
    observed: Observed,
    observed_publisher: RequestPublisher,
    cluster: SimulatedCluster,
    stack: StackEndpoints,
    tmp_path: Path,
) -> None:
    """The run's summary (its user metadata) and its activities' summaries are on the workflow's page."""
    browser = await asyncio.to_thread(find_or_install_chromium)
    _, requests = orphan_requests(cluster, f"ui-{uuid.uuid4().hex[:6]}", offloaded=False)
    target = requests[0]
    observed_publisher.publish(target)
    [result] = (await results_of(observed.client, [target])).values()
    assert result.outcome is Outcome.DELETED
    run_id = (await observed.client.get_workflow_handle(target.workflow_id).describe()).run_id
    base = stack.temporal_ui_url.rstrip("/")
    namespace = observed.settings.temporal_namespace
    workflow_id = urllib.parse.quote(target.workflow_id, safe="")

    page = await asyncio.to_thread(
        render,
        browser,
        f"{base}/namespaces/{namespace}/workflows/{workflow_id}/{run_id}/history",
        tmp_path / "p3",
        tmp_path / "workflow.png",
    )
    summary = explain.summary(target, Mode.LIVE)
    assert f"of {target.topic_name} from BookKeeper" in summary
    assert summary in page, "the run's static summary is not on its page"
    # A local activity (its marker) and an activity, each naming the ledger and the topic.
    for step in ("verify_bk_metadata", "delete_bk_ledger"):
        said = f"{step}: ledger {target.ledger_id} of {target.topic_name}"
        assert said in page, f"{step}'s summary is not on the run's page"


async def test_a_waiting_deletions_page_names_the_broker_it_waits_for(
    observed: Observed,
    settings: Settings,
    cluster: SimulatedCluster,
    stack: StackEndpoints,
    tmp_path: Path,
) -> None:
    """While a ledger's topic still references it, the run's current details say whom it waits for."""
    browser = await asyncio.to_thread(find_or_install_chromium)
    run = uuid.uuid4().hex[:6]
    # Pools of its own with a grace of minutes: on a loaded machine reading a live page can take a while, and
    # the run must still be waiting when it is read.
    waiting_settings = settings.with_overrides(
        topic=f"persistent://pulsar/system/__ledger_deletion_ui_wait_{run}",
        task_queue_prefix=f"ld-ui-wait-{run}",
        in_use_rechecks=60,
        in_use_recheck_seconds=3.0,
    )
    topic = f"ui-wait-{run}/ns/orders"
    ids = cluster.new_ledger_ids(2)
    cluster.create_topic(topic, ids)
    request = cluster.requests_for_trim(topic, ids[:1])[0]  # published, but metadata not yet updated
    async with running_pools(waiting_settings, observed.client):
        with RequestPublisher(waiting_settings) as publisher:
            publisher.publish(request)
        await _read_the_waiting_page(
            observed, waiting_settings, cluster, stack, tmp_path, browser, topic, request
        )


async def _read_the_waiting_page(
    observed: Observed,
    settings: Settings,
    cluster: SimulatedCluster,
    stack: StackEndpoints,
    tmp_path: Path,
    browser: str,
    topic: str,
    request: PendingDeleteLedgerInfo,
) -> None:
    ids = [request.ledger_id]
    handle = observed.client.get_workflow_handle(request.workflow_id)

    async def waiting() -> None:
        try:
            status = await handle.query(STATUS_QUERY, result_type=DeletionStatus)
        except RPCError as exc:  # not started yet
            raise AssertionError(str(exc)) from exc
        assert status.step == "wait_in_use"

    await eventually(waiting)
    run_id = (await handle.describe()).run_id
    base = stack.temporal_ui_url.rstrip("/")
    workflow_id = urllib.parse.quote(request.workflow_id, safe="")
    said = f"to release ledger {request.ledger_id}"
    try:
        page = await asyncio.to_thread(
            render_live,
            browser,
            f"{base}/namespaces/{settings.temporal_namespace}/workflows/{workflow_id}/{run_id}/user-metadata",
            tmp_path / "p4",
            said,
        )
    finally:
        cluster.remove_ledgers_from_metadata(topic, ids[:1])  # the mark phase catches up: the grace ends
    # The owner broker is the admin emulator, whichever of its URLs served the answer.
    assert said in page, "the run's current details are not on its page"
    assert "waiting for broker http://127.0.0.1:" in page
    assert "re-check " in page
    # The user metadata tab also shows the summary and the details set at start.
    assert explain.summary(request, Mode.LIVE) in page
    assert f"**Ledger** {request.ledger_id}, a data ledger of `{topic}`" in page
    results = await results_of(observed.client, [request])
    assert results[request.workflow_id].outcome is Outcome.DELETED
