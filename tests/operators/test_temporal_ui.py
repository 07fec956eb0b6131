"""The Temporal UI as the operator's console, checked in a real browser (headless Chromium from Debian).

The check is skipped only where Chromium is missing and cannot be installed (``apt-get install chromium``
needs root and Debian's package archive); everywhere else it runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import urllib.parse
import uuid
from pathlib import Path

import pytest

from devstack.cluster import SimulatedCluster
from devstack.stack import StackEndpoints
from ledger_deletion.contracts import Outcome
from ledger_deletion.submit import RequestPublisher
from tests.operators.helpers import Observed, orphan_requests, results_of

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
