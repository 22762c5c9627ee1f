"""The `agentserve` command: prepare-model, prepare-adapter, serve, doctor, codex-config, trace, bench."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


def _prepare_adapter(ns: argparse.Namespace) -> int:
    from agentserve.prepare.adapter import prepare_adapter

    print(prepare_adapter(out_dir=Path(ns.out_dir) if ns.out_dir else None, force=ns.force))
    return 0


def _prepare_model(ns: argparse.Namespace) -> int:
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.tokenizer import remember_tokenizer_class

    path = prepare_model(Path(ns.cache_dir) if ns.cache_dir else None, force=ns.force)
    remember_tokenizer_class(path)
    print(path)
    return 0


def _serve(ns: argparse.Namespace) -> int:
    """`serve run CONFIG` with this environment's Ray: the config's deployment overrides apply."""
    serve_bin = Path(sys.executable).with_name("serve")
    os.execv(str(serve_bin), [str(serve_bin), "run", ns.config])
    return 1  # not reached


def _doctor(ns: argparse.Namespace) -> int:
    """With a trace: where each turn stopped extending the previous one, and why. Without: the environment."""
    if ns.trace:
        return _doctor_trace(ns.trace, ns.model_path)
    report: dict[str, object] = {"python": sys.version.split()[0]}
    try:
        import torch

        report["torch"] = torch.__version__
        report["cuda"] = torch.cuda.is_available()
    except Exception as exc:  # noqa: BLE001
        report["torch"] = f"unavailable: {exc}"
    try:
        import vllm

        report["vllm"] = vllm.__version__
    except Exception as exc:  # noqa: BLE001
        report["vllm"] = f"unavailable: {exc}"
    for banned in ("torchvision", "torchaudio", "torchcodec"):
        try:
            __import__(banned)
            report[banned] = "INSTALLED (breaks transformers beside CPU torch)"
        except ImportError:
            pass
    from agentserve.prepare.model import default_cache_dir, read_manifest

    report["model_checkpoint"] = str(default_cache_dir())
    report["model_ready"] = read_manifest(default_cache_dir()) is not None
    print(json.dumps(report, indent=2))
    return 0


def _doctor_trace(trace: str, model_path: str | None) -> int:
    from agentserve.doctor.trace import read_trace
    from agentserve.offline.doctor_replay import replay
    from agentserve.prepare.model import prepare_model
    from agentserve.preprocess.tokenizer import load_tokenizer

    tok = load_tokenizer(model_path or str(prepare_model()))
    print(f"{'session':<20} {'turn':>4} {'prompt':>7} {'reused':>7} {'of':>7} {'ratio':>6}  cause")
    turns: dict[str, int] = {}
    worst = 1.0
    for turn, report in replay(read_trace(trace), tok.decode, frozenset(tok.all_special_ids)):
        turns[turn.session] = turns.get(turn.session, 0) + 1
        if report is None:
            print(f"{turn.session[:20]:<20} {turns[turn.session]:>4} {len(turn.prompt_ids):>7}  (first turn)")
            continue
        worst = min(worst, report.reuse_ratio)
        print(
            f"{turn.session[:20]:<20} {turns[turn.session]:>4} {len(turn.prompt_ids):>7} "
            f"{report.reused_tokens:>7} {report.expected_tokens:>7} {report.reuse_ratio:>6.3f}  {report.cause or '-'}"
        )
    return 0 if worst >= 0.98 else 2


def _codex_config(ns: argparse.Namespace) -> int:
    """Print (or write into a CODEX_HOME) a Codex config.toml and model catalog for the served models."""
    from agentserve.apis.codex import config as codex_config

    models = codex_config.models_from_serve_config(Path(ns.serve_config) if ns.serve_config else None)
    served = [name for m in models for name in m.served_names()]
    if ns.model is not None and ns.model not in served:
        print(f"--model {ns.model!r} is not served by {ns.serve_config}; served: {', '.join(served)}", file=sys.stderr)
        return 2
    if ns.catalog_only:
        print(json.dumps(codex_config.catalog_json(models), indent=2))
    elif ns.codex_home:
        for path in codex_config.write(Path(ns.codex_home), models, base_url=ns.base_url, model=ns.model):
            print(path)
    else:
        catalog = str(Path("~/.codex").expanduser() / codex_config.CATALOG_FILE)
        print(codex_config.config_toml(models, base_url=ns.base_url, catalog_path=catalog, model=ns.model))
    return 0


def _trace_generate(ns: argparse.Namespace) -> int:
    """A seeded synthetic agent trace (agentserve/traces/synthetic.py; docs/TRACES.md) as JSON lines."""
    import dataclasses

    from agentserve.traces.jsonl import write_records
    from agentserve.traces.synthetic import TraceShape, generate

    fields = {f.name: f for f in dataclasses.fields(TraceShape)}
    changes: dict[str, object] = {"sessions": ns.sessions, "seed": ns.seed}
    for item in ns.set or ():
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in fields:
            print(f"--set {item}: TraceShape has no field {name!r}", file=sys.stderr)
            return 2
        default = getattr(TraceShape(), name)
        parts = [type(default[0])(v) for v in value.split(",")] if isinstance(default, tuple) else None
        changes[name] = tuple(parts) if parts is not None else type(default)(value)
    records = generate(TraceShape(**changes))  # type: ignore[arg-type]
    n = write_records(ns.output, records)
    from agentserve.traces.shape import describe

    print(json.dumps(describe(records)))
    print(f"{n} records, {len({r.session for r in records})} sessions -> {ns.output}")
    return 0


def _trace_timeline(ns: argparse.Namespace) -> int:
    """A trace's sessions as Chrome trace-event JSON (agentserve/traces/timeline.py), for Perfetto."""
    from agentserve.traces.jsonl import iter_records
    from agentserve.traces.timeline import timeline

    out = timeline((r for path in ns.trace for r in iter_records(path)), ns.session)
    slices = sum(1 for e in out["traceEvents"] if e["ph"] == "X" and e["cat"] == "request")
    if ns.session is not None and not slices:
        print(f"no request of session {ns.session!r} in {' '.join(ns.trace)}", file=sys.stderr)
        return 2
    Path(ns.output).write_text(json.dumps(out))
    print(f"{slices} requests -> {ns.output} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _bench(ns: argparse.Namespace) -> int:
    """`agentserve bench NAME [ARGS]`: one benchmark of agentserve.bench, its own arguments after the name."""
    from agentserve import bench

    if ns.list or not ns.name:
        width = max(len(n) for n in bench.BENCHMARKS)
        for b in bench.BENCHMARKS.values():
            print(f"{b.name:<{width}}  {b.summary}  [{b.needs}]")
        return 0 if ns.list else 2
    try:
        benchmark = bench.get(ns.name)
    except KeyError:
        print(f"no benchmark {ns.name!r}; `agentserve bench --list` lists them", file=sys.stderr)
        return 2
    # Warnings and errors only, as the scripts ran: httpx alone logs every request at INFO, and a benchmark client
    # must not spend its CPU on that. Benchmarks print what they measure.
    logging.getLogger().setLevel(logging.WARNING)
    if ns.out_dir:
        from agentserve.bench import results

        os.environ[results.OUT_ENV] = str(Path(ns.out_dir).resolve())  # Ray workers and subprocesses see it too
    return bench.run(benchmark.name, ns.args)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="agentserve")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare-model", help="convert the embedded SmolLM2 GGUF into a vLLM checkpoint")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=_prepare_model)

    a = sub.add_parser("prepare-adapter", help="train the embedded model's demo LoRA adapter (smollm2-pirate)")
    a.add_argument("--out-dir", default=None)
    a.add_argument("--force", action="store_true")
    a.set_defaults(func=_prepare_adapter)

    s = sub.add_parser("serve", help="deploy a Serve config (like `serve run`) and block")
    s.add_argument("config", nargs="?", default="serve_config.yaml")
    s.set_defaults(func=_serve)

    d = sub.add_parser(
        "doctor", help="analyse a recorded trace for prefix breaks, or report the engine and model checkpoint"
    )
    d.add_argument("trace", nargs="?", help="JSONL trace written with serve config `trace_path`")
    d.add_argument("--model-path", default=None, help="tokenizer to decode with (default: the embedded model)")
    d.set_defaults(func=_doctor)

    c = sub.add_parser("codex-config", help="Codex CLI config.toml and model catalog for this deployment")
    c.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    c.add_argument("--serve-config", default="serve_config.yaml", help="where the served models are declared")
    c.add_argument("--model", default=None, help="the id Codex should request (default: the first model's id)")
    c.add_argument("--codex-home", default=None, help="write config.toml and the catalog into this directory")
    c.add_argument("--catalog-only", action="store_true", help="print the model_catalog_json content")
    c.set_defaults(func=_codex_config)

    t = sub.add_parser("trace", help="request traces (traces/record.py): generate synthetic ones, view timelines")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    tg = tsub.add_parser("generate", help="a seeded synthetic agent trace in the published shapes (docs/TRACES.md)")
    tg.add_argument("-o", "--output", required=True, help="trace file (JSON lines; .gz compresses)")
    tg.add_argument("--sessions", type=int, default=200, help="top-level sessions (subagents come on top)")
    tg.add_argument("--seed", type=int, default=0)
    tg.add_argument("--set", action="append", metavar="FIELD=VALUE",
                    help="any TraceShape field, e.g. --set subagent_share=0.3 --set short_turns=2,8")
    tg.set_defaults(func=_trace_generate)
    tt = tsub.add_parser("timeline", help="a trace's sessions as Chrome trace-event JSON (Perfetto, chrome://tracing)")
    tt.add_argument("trace", nargs="+", help="request trace files (JSON lines, .gz read too): e.g. every Ingress "
                    "replica's requests-*.jsonl and their rotations")
    tt.add_argument("--session", default=None, help="only this session and the subagents it spawned")
    tt.add_argument("-o", "--output", required=True, help="the trace-event JSON file to write")
    tt.set_defaults(func=_trace_timeline)

    b = sub.add_parser("bench", help="run a benchmark (agentserve bench --list lists them)", add_help=True)
    b.add_argument("--list", action="store_true", help="list the benchmarks")
    b.add_argument("--out-dir", default=None,
                   help="write results here instead of docs/benchmarks/ (a smoke run must not overwrite the figures)")
    b.add_argument("name", nargs="?", help="the benchmark (see --list)")
    b.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own arguments (NAME --help shows them)")
    b.set_defaults(func=_bench)

    ns = parser.parse_args(argv)
    return ns.func(ns)


if __name__ == "__main__":
    sys.exit(main())
