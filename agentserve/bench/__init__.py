"""agentserve's benchmarks as a library: `agentserve bench NAME [ARGS]` runs one, `agentserve bench --list` lists them.

Shared by every benchmark: `stats` (the one percentile definition), `conditions` (load average, git head, the
client's scheduling), `results` (JSON + PNG under docs/benchmarks/), `client` (one streaming client for the three
APIs), `graph` (the real Ray Serve graph in this process; the tests import it). One module per benchmark, each with
`main(argv) -> int | None`. Nothing here is imported by the serving path.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Benchmark:
    name: str
    module: str
    summary: str
    needs: str  # what it starts: "nothing", "graph (scripted)", "vLLM", ...

    def main(self) -> Callable[[Sequence[str] | None], int | None]:
        return importlib.import_module(f"agentserve.bench.{self.module}").main


_ALL = (
    Benchmark("serving-overhead", "serving_overhead", "TTFT the serving layer adds, per API, c=1 and c=64",
              "graph (scripted)"),
    Benchmark("hop-costs", "hop_costs", "each deployment call of the request path alone", "graph (scripted)"),
    Benchmark("ingress-paths", "ingress_paths", "HAProxy vs the Ingress replica's port vs Serve's Python proxy",
              "graph (scripted)"),
    Benchmark("ingress-capacity", "ingress_capacity", "output tokens/s one ingress replica carries, parsers on",
              "graph (scripted)"),
    Benchmark("vs-vllm", "vs_vllm", "the graph against `vllm serve` (and Ray Serve LLM): TTFT and tokens/s",
              "make serve + vllm serve (+ Ray Serve LLM)"),
    Benchmark("idle", "idle", "CPU at rest and start-up time: make serve vs vllm serve", "make serve + vllm serve"),
    Benchmark("request-pickle", "request_pickle", "what a long prompt costs to carry across a replica boundary",
              "nothing"),
    Benchmark("tokenizer-load", "tokenizer_load", "loading the tokenizer: AutoTokenizer vs the remembered class",
              "nothing"),
    Benchmark("long-window", "long_window", "SmolLM2 with a 32K YaRN window: prefill and NLL by position", "vLLM"),
    Benchmark("rope-variants", "rope_variants", "one rope scaling variant's short greedy answers", "vLLM"),
    Benchmark("claude-code-session", "claude_code_session", "a Claude Code session against make serve",
              "make serve + Claude Code"),
    Benchmark("first-task", "first_task", "a newcomer's first harness task on make serve, fresh and after a restart",
              "make serve + Claude Code, Codex, OpenClaw"),
    Benchmark("constrained", "constrained", "what constrained decoding (grammars) costs", "vLLM"),
    Benchmark("parsers", "parsers", "streaming reasoning and tool-call parsers vs vLLM's", "nothing (vLLM's parsers)"),
    Benchmark("preamble", "preamble", "Claude Code's billing header vs the prefix cache", "graph (vLLM) x2"),
    Benchmark("reasoning-replay", "replay", "reasoning replay keeps the prefix (three variants)", "graph (vLLM)"),
    Benchmark("replay", "trace_replay", "replay a request trace: router simulator (--sim) or a running graph (--live)",
              "nothing (--sim); a running graph (--live); graph (vLLM xN) per condition (--live --vllm-replicas N)"),
    Benchmark("token-exact-replay", "token_exact_replay", "kept turns on vs off: the previous output as generated",
              "graph (vLLM) x2"),
    Benchmark("splice-cost", "splice_cost", "what splicing kept turns costs the preprocessor", "nothing"),
    Benchmark("long-session", "long_session", "a long Claude Code-shaped session's next turn, 10-300 turns, warm/cold",
              "graph (scripted)"),
    Benchmark("session-vs-vllm", "session_vs_vllm", "one session's turns to the 32K window: graph vs `vllm serve`",
              "make serve + vllm serve"),
    Benchmark("router", "router_sim", "simulated multi-turn agent sessions over 4-64 replicas", "nothing"),
    Benchmark("router-scheduling", "router_scheduling", "session-aware scheduling switches ablated on the router simulator",
              "nothing"),
    Benchmark("router-failover", "router_failover", "a Router replica killed under load vs one never killed",
              "graph (scripted) x2"),
    Benchmark("router-vllm", "router_vllm", "kv routing vs round-robin on 2 real vLLM replicas", "graph (vLLM x2)"),
    Benchmark("normalize", "normalize", "tool-order normalization and prefix reuse", "nothing"),
    Benchmark("tool-addition", "tool_addition", "a tool added mid-session: in place vs folded into the tool list",
              "nothing"),
    Benchmark("load-test", "load_test", "reliability under load, faults and disconnects", "graph (scripted, config)"),
    Benchmark("soak", "soak", "10 minutes on the multi-node cluster: replica, Router and node kills, memory",
              "local multi-node cluster + PostgreSQL (scripted)"),
    Benchmark("page-faults", "page_faults", "how fast this machine backs fresh anonymous memory", "nothing"),
    Benchmark("dashboard", "dashboard", "render the Grafana dashboard's panels from a local run (docs/dashboard.png)",
              "graph (scripted)"),
)
BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in _ALL}


def get(name: str) -> Benchmark:
    """A benchmark by its name (underscores or the module's name accepted too)."""
    key = name.replace("_", "-")
    if key in BENCHMARKS:
        return BENCHMARKS[key]
    for b in _ALL:
        if b.module == name:
            return b
    raise KeyError(name)


def run(name: str, argv: Sequence[str] | None = None) -> int:
    rc = get(name).main()(list(argv or ()))
    return int(rc or 0)
