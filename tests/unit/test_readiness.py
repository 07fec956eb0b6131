"""``/ready``: 200 only while every check of the process passed lately, served beside ``/metrics``."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from ledger_deletion.observability import readiness
from ledger_deletion.observability.readiness import Readiness


class Switchable:
    """A check whose answer the test sets."""

    def __init__(self) -> None:
        self.problem = ""
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        return self.problem


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Readiness, str]]:
    """A Readiness of the test's own behind a real HTTP server on a free port."""
    mine = Readiness(period_seconds=0.05, timeout_seconds=0.2)
    monkeypatch.setattr(readiness, "_current", mine)
    server, thread = readiness.start_server(0, "127.0.0.1")
    yield mine, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read()


async def test_ready_only_while_every_check_passes(served: tuple[Readiness, str]) -> None:
    mine, url = served
    status, body = await asyncio.to_thread(get, f"{url}/ready")
    # The server is up before the pools add their checks: not ready until they have.
    assert (status, json.loads(body)) == (503, {"ready": False, "checks": {}})
    temporal, pulsar = Switchable(), Switchable()
    mine.add("temporal", temporal)
    mine.add("pulsar", pulsar)
    status, body = await asyncio.to_thread(get, f"{url}/ready")
    assert (status, json.loads(body)["checks"]["temporal"]) == (503, "not checked yet")

    await mine.check_once()
    status, body = await asyncio.to_thread(get, f"{url}/ready")
    assert (status, json.loads(body)) == (200, {"ready": True, "checks": {"temporal": "ok", "pulsar": "ok"}})

    pulsar.problem = "consumer not connected to a broker"
    await mine.check_once()
    status, body = await asyncio.to_thread(get, f"{url}/ready")
    assert status == 503
    assert json.loads(body)["checks"] == {"temporal": "ok", "pulsar": "consumer not connected to a broker"}


async def test_metrics_still_served_beside_it(served: tuple[Readiness, str]) -> None:
    _, url = served
    status, body = await asyncio.to_thread(get, f"{url}/metrics")
    assert status == 200 and b"# HELP" in body


async def test_a_check_that_hangs_or_raises_is_a_problem() -> None:
    mine = Readiness(period_seconds=0.05, timeout_seconds=0.1)

    async def hangs() -> str:
        await asyncio.sleep(10)
        return ""

    async def raises() -> str:
        raise ConnectionError("refused")

    mine.add("hangs", hangs)
    mine.add("raises", raises)
    assert await mine.check_once() == {
        "hangs": "no answer within 0.1 s",
        "raises": "ConnectionError: refused",
    }
    assert mine.status()[0] is False


async def test_answers_older_than_three_periods_count_as_failed() -> None:
    """A wedged event loop stops answering: the process must not stay ready on its last good answer."""
    mine = Readiness(period_seconds=0.05, timeout_seconds=0.05)
    mine.add("temporal", Switchable())
    await mine.check_once()
    assert mine.status() == (True, {"temporal": "ok"})
    await asyncio.sleep(0.3)
    ready, states = mine.status()
    assert not ready and states["temporal"].startswith("no answer for")


async def test_run_checks_every_period_until_stopped() -> None:
    mine = Readiness(period_seconds=0.02)
    check = Switchable()
    mine.add("temporal", check)
    stop = asyncio.Event()
    task = asyncio.create_task(mine.run(stop))
    await asyncio.sleep(0.15)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert check.calls >= 3
