"""bench/benchmark.py --server-metrics: the Temporal server's counts, scraped, per deletion, tabled."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from bench.report import server_work_lines
from bench.server_metrics import per_item, scrape, totals

EXPOSITION = """\
# HELP persistence_requests persistence_requests counter
# TYPE persistence_requests counter
persistence_requests{operation="UpdateWorkflowExecution",service_name="history",namespace="default"} 180
persistence_requests{operation="UpdateWorkflowExecution",namespace="temporal-system"} 20
persistence_requests{operation="CreateTasks",service_name="matching"} 4
service_requests{operation="PollActivityTaskQueue",service_name="frontend"} 45
service_requests{operation="PollActivityTaskQueue",service_name="matching"} 45
task_requests{operation="TimerActiveTaskActivityTimeout",service_name="history"} 1.2e+01
memory_heap{service_name="history"} 123456
"""


@pytest.fixture
def metrics_url() -> Iterator[str]:
    class Exposition(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Exposition)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_scrape_sums_every_other_label_and_keeps_the_serving_service_of_a_request(metrics_url: str) -> None:
    counts = scrape(metrics_url)

    assert counts == Counter(
        {
            "persistence_requests UpdateWorkflowExecution": 200,
            "persistence_requests CreateTasks": 4,
            "service_requests frontend:PollActivityTaskQueue": 45,
            "service_requests matching:PollActivityTaskQueue": 45,
            "task_requests TimerActiveTaskActivityTimeout": 12,
        }
    )
    assert scrape(metrics_url, ("persistence_requests",)) == Counter(
        {"persistence_requests UpdateWorkflowExecution": 200, "persistence_requests CreateTasks": 4}
    )


def test_per_item_keeps_what_grew_and_totals_group_it_by_metric() -> None:
    before = Counter(
        {"persistence_requests CreateTasks": 10, "task_requests TransferActiveTaskWorkflowTask": 5}
    )
    after = Counter(
        {
            "persistence_requests CreateTasks": 10,
            "persistence_requests UpdateWorkflowExecution": 37,
            "task_requests TransferActiveTaskWorkflowTask": 50,
            "task_requests TimerActiveTaskWorkflowTaskTimeout": 60,
        }
    )

    work = per_item(before, after, 10)

    assert work == {
        "persistence_requests UpdateWorkflowExecution": 3.7,
        "task_requests TimerActiveTaskWorkflowTaskTimeout": 6.0,
        "task_requests TransferActiveTaskWorkflowTask": 4.5,
    }
    assert totals(work) == {"persistence_requests": 3.7, "task_requests": 10.5}
    assert per_item(before, after, 0) == {}


def test_the_table_sums_by_metric_then_lists_the_busiest_operations() -> None:
    work = {
        "task_requests TimerActiveTaskActivityTimeout": 1.24,
        "persistence_requests UpdateWorkflowExecution": 18.6,
    }

    lines = server_work_lines(work)

    assert lines[2].split() == ["persistence_requests", "18.60"]
    assert lines[3].split() == ["task_requests", "1.24"]
    assert lines[4].split() == ["persistence_requests", "UpdateWorkflowExecution", "18.60"]
    assert lines[5].split() == ["task_requests", "TimerActiveTaskActivityTimeout", "1.24"]
