"""bench router-scheduling on a tiny generated trace: every variant runs on the same sessions and is compared with
FCFS + KV routing at its load."""

from __future__ import annotations

import json

from agentserve.bench import router_scheduling


def test_a_small_ablation_writes_every_variant_and_the_comparison(tmp_path):
    out = tmp_path / "sched.json"
    variants = "FCFS + KV routing (today),router queue (FCFS),all switches"
    assert router_scheduling.main(["--programs", "6", "--loads", "1.5", "--kv-blocks", "512", "--jobs", "1",
                                   "--variants", variants, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["rows"]] == variants.split(",")
    assert all(r["requests"] > 0 and r["served"] > 0 for r in doc["rows"])
    md = out.with_suffix(".md").read_text()
    assert "| 150% | all switches |" in md and out.with_suffix(".png").exists()


def test_the_ranked_after_rows_differ_from_their_at_once_rows_only_by_rank_after_wait_s():
    from agentserve.routing.scheduling import SchedulingConfig

    after = SchedulingConfig().rank_after_wait_s
    assert after > 0 and not any("," in name for name in router_scheduling.VARIANTS)  # --variants splits on commas
    for name in ("+ session fairness", "+ key shares", "all switches"):
        at_once = router_scheduling.VARIANTS[name]
        ranked = router_scheduling.VARIANTS[f"{name} (ranked after {after:g}s)"]
        assert at_once["rank_after_wait_s"] == 0.0 and ranked["rank_after_wait_s"] == after
        assert at_once | {"rank_after_wait_s": after} == ranked
