"""A histogram's mean between two scrapes, as the benchmarks read a replica's /metrics."""

from __future__ import annotations

import http.server
import threading

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from agentserve.bench.scrape import mean_between, scrape


def _serving(registry: CollectorRegistry) -> tuple[str, http.server.HTTPServer]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/metrics", server


def test_the_mean_counts_only_what_was_observed_between_the_scrapes_and_only_the_named_series():
    registry = CollectorRegistry()
    h = Histogram("agentserve_queue_time_seconds", "q", ["model", "stage"], registry=registry)
    url, server = _serving(registry)
    try:
        h.labels("m", "route").observe(5.0)  # before: not counted
        before = scrape(url)
        for v in (0.010, 0.030):
            h.labels("m", "route").observe(v)
        h.labels("m", "preprocess").observe(1.0)  # another stage: not counted
        after = scrape(url)
        mean, n = mean_between(before, after, "agentserve_queue_time_seconds", stage="route")
        assert n == 2 and abs(mean - 0.020) < 1e-9
        assert mean_between(before, after, "agentserve_queue_time_seconds", stage="admit") == (None, 0)
    finally:
        server.shutdown()
