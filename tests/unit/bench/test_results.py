"""The results writer: JSON and PNG where `agentserve bench --out-dir` (AGENTSERVE_BENCH_OUT) says, else docs/benchmarks/."""

from __future__ import annotations

import json

from agentserve.bench import conditions, results


def test_out_dir_defaults_to_docs_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(results.OUT_ENV, raising=False)
    assert results.out_dir() == results.REPO / "docs" / "benchmarks"
    assert (results.REPO / "agentserve" / "bench" / "results.py").exists()
    monkeypatch.setenv(results.OUT_ENV, str(tmp_path))
    assert results.out_path("x.json") == tmp_path / "x.json"


def test_write_json_round_trips_and_makes_directories(tmp_path):
    doc = {"ttft_ms": {"chat/c1": {"n": 3, "p50": 1.5}}, "conditions": {"loadavg": [0.1, 0.2, 0.3]}}
    path = results.write_json(tmp_path / "a" / "b.json", doc)
    assert path.read_text().endswith("}\n")
    assert results.read_json(path) == doc
    results.write_json(tmp_path / "c.json", doc, indent=1, newline=False)
    assert json.loads((tmp_path / "c.json").read_text()) == doc
    assert not (tmp_path / "c.json").read_text().endswith("\n")


def test_save_figure_writes_a_png(tmp_path):
    plt = results.pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    path = results.save_figure(fig, tmp_path / "p" / "fig.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_names_the_benchmark():
    assert results.command("serving-overhead", ["--quick"]) == "agentserve bench serving-overhead --quick"
    assert results.command("rope-variants", ['{"a": 1}']) == "agentserve bench rope-variants '{\"a\": 1}'"
    assert results.command("normalize", None) == "agentserve bench normalize"


def test_conditions_snapshot():
    snap = conditions.snapshot(client_scheduling="x", note="y")
    assert len(snap["loadavg"]) == 3 and all(isinstance(v, float) for v in snap["loadavg"])
    assert isinstance(snap["git_head"], str) and snap["cpus"] >= 1
    assert snap["client_scheduling"] == "x" and snap["note"] == "y"
    assert set(conditions.git_state()) == {"head", "modified"}


def test_registry_and_cli_list(capsys):
    from agentserve import bench
    from agentserve.cli import main

    assert bench.get("serving_overhead") is bench.get("serving-overhead")
    assert bench.get("router_sim").name == "router"
    for b in bench.BENCHMARKS.values():
        assert callable(b.main())  # every module imports without Ray or vLLM started
    assert main(["bench", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in bench.BENCHMARKS)
    assert main(["bench", "no-such-benchmark"]) == 2
