"""A session's next turn extended from its kept prompt (preprocess/incremental.py) is token for token the full path's.

Random agent sessions per family and wire API: tool results, new user queries and both, the model's output written
off its template's canonical form (so only kept turns keep the prefix). Each turn is preprocessed three ways on the
same kept-turn store: the full path (whole conversation rendered, every kept turn spliced), the incremental path on
the replica that made the previous prompt (its memo), and on a replica that never saw the session (the prompt
rebuilt from the kept turns' links). The three must agree; where the family's template allows, the incremental path
must have been taken, and a Qwen3-style template that drops earlier reasoning once a new user query arrives must
fall back rather than keep the dropped reasoning.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.kv_events.block_hash import block_hashes
from agentserve.preprocess.incremental import PromptMemo
from agentserve.preprocess.turn_digest import key_after

from .test_prefix_per_family import APIS, FAMILIES, History, parse
from .test_token_exact_replay import KEEPING, SCOPE, kept_turn, non_canonical, store

NEXT = ("results", "user", "results+user")


class Session(History):
    """A History that can also send a new user query after the tool results."""

    def user(self, text: str) -> None:
        if self.api == "chat":
            self.items.append({"role": "user", "content": text})
        elif self.api == "anthropic":
            last = self.items[-1] if self.items else None
            if last is not None and last["role"] == "user":  # beside the tool results, as Claude Code sends it
                last["content"] = [*last["content"], {"type": "text", "text": text}]
            else:
                self.items.append({"role": "user", "content": text})
        else:
            self.items.append({"type": "message", "role": "user", "content": text})


def drive(pre, fam, api: str, steps: list[str]) -> int:
    """Run the session; assert the three paths agree on every turn; return how many turns extended."""
    kept = store()
    pre._kept = kept
    memo = pre._prompts
    tok = pre._tok
    session = Session(api)
    extended = 0
    try:
        for step, nxt in enumerate([*steps, "results"]):
            request = session.request()
            pre._incremental = False
            full = pre.preprocess(request, SCOPE)
            pre._incremental = True
            pre._prompts = PromptMemo()
            cold = pre.preprocess(request, SCOPE)
            pre._prompts = memo
            warm = pre.preprocess(request, SCOPE)
            assert warm.engine.token_ids == full.engine.token_ids, f"turn {step}: warm differs from the full path"
            assert cold.engine.token_ids == full.engine.token_ids, f"turn {step}: cold differs from the full path"
            hashes = block_hashes(full.engine.token_ids, 16)  # the router's key: the engine's blocks as hashed afresh
            assert warm.route.block_hashes == hashes and cold.route.block_hashes == hashes
            extended += dict(warm.report.replay_outcomes).get("extended", 0)
            if step == len(steps):
                break
            output = non_canonical(fam.outputs[step % len(fam.outputs)])
            generated = tok.encode(output + fam.eot, add_special_tokens=False)
            segs = parse(fam, output, warm.engine.reasoning_started, warm.report.parse_reasoning)
            assert kept.put(
                key_after(warm.report.replay_prefix, kept_turn(segs)), warm.engine.token_ids, generated,
                base=warm.report.replay_base, tail_from=warm.report.replay_tail_from,
            ).result(timeout=5)
            session.assistant(segs)
            if "results" in nxt:
                session.results(segs)
            if "user" in nxt:
                session.user(f"Now look at part {step}.")
        return extended
    finally:
        pre._kept = None
        pre._incremental = True
        kept.close()


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.sampled_from(NEXT), min_size=1, max_size=5), api=st.sampled_from(APIS))
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_incremental_prompt_equals_the_full_path(make_preprocessor, name, steps, api):
    fam = FAMILIES[name]
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    drive(pre, fam, api, steps)


# Templates that render a turn's text after the tool results that answer its calls (Gemma 4: calls, results, then the
# content, all in one model turn): a turn with text and calls renders differently once its results arrive.
TEXT_AFTER_RESULTS = {"gemma4"}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", [n for n in KEEPING if n not in TEXT_AFTER_RESULTS])
def test_tool_result_turns_extend_the_kept_prompt(make_preprocessor, name, api):
    """An agent loop of tool results: after the first turn, every turn is extended, not re-rendered."""
    fam = FAMILIES[name]
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    assert drive(pre, fam, api, ["results"] * 4) >= 3


@pytest.mark.parametrize("name", sorted(TEXT_AFTER_RESULTS))
def test_a_template_that_moves_text_after_the_results_takes_the_full_path(make_preprocessor, name):
    """The probe finds that tool results rewrite such a turn's rendering, so the tool role is not cleared: every turn
    is rendered whole (and still agrees with the kept prompt), never extended from a window that would differ."""
    fam = FAMILIES[name]
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    cleared = pre._windows.cleared(True, pre.template_kwargs({}, None), fam.eot)
    assert frozenset({"tool"}) not in cleared
    assert drive(pre, fam, "chat", ["results"] * 3) == 0


def test_a_new_user_query_under_a_template_that_drops_earlier_reasoning_falls_back(make_preprocessor):
    """Qwen3's template keeps reasoning only after the last user query: a new query rewrites the earlier turns, so
    the window cannot stand for the whole; the probe finds that and the full path renders those turns."""
    fam = FAMILIES["qwen3"]
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    end_token = fam.eot
    kwargs = pre.template_kwargs({}, None)
    cleared = pre._windows.cleared(True, kwargs, end_token)
    assert frozenset({"tool"}) in cleared and frozenset({"user"}) not in cleared
    assert drive(pre, fam, "chat", ["user", "user"]) == 0


@pytest.mark.parametrize("name", [n for n in KEEPING if n not in TEXT_AFTER_RESULTS])
def test_a_replica_probes_its_template_as_it_starts_not_on_a_sessions_first_turn(make_preprocessor, name):
    """What a replica probes at start (Preprocessor.probe_windows) covers a default agent loop: its turns extend
    without probing again, so a new replica's first long session does not pay the probe."""
    fam = FAMILIES[name]
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    pre._kept = store()
    pre.probe_windows()

    def probed_late(*_: object) -> frozenset:
        raise AssertionError(f"probed on a request: {_}, after {list(pre._windows._cleared)}")

    pre._windows._probe = probed_late
    assert drive(pre, fam, "chat", ["results"] * 3) >= 2
