"""Token-exact replay (issue 17), per model family and per wire API.

The model writes its turn in a form the family's template would not (no newlines around reasoning markers,
compact JSON, arguments whose key order the client changes on the way back). With kept turns, the next prompt
holds the generated tokens verbatim: the doctor's reuse is 1.000. Without (the switch off), the template's
re-rendering parts from the engine's cache inside the previous output and the doctor names `output_rerendered`.
Families whose template drops earlier reasoning by design keep that choice: nothing is spliced.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentserve.doctor.report import diagnose
from agentserve.preprocess.turn_digest import assistant_content, key_after
from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, Turn
from agentserve.state.backend import StoreBounds
from agentserve.state.kept_turns import KeptTurnStore
from agentserve.state.sqlite import SQLiteBackend

from .test_prefix_per_family import APIS, FAMILIES, History, Segment, parse

SCOPE = "caller-a"


def non_canonical(output: str) -> str:
    """The family's output as a model drifting from its template writes it: the framing newlines around reasoning
    markers the other way round (gone where the template writes them, added where it does not), JSON compact."""
    if "<think>" in output and "<think>\n" not in output:  # GLM, Kimi: the template writes <think>R</think>
        return output.replace("<think>", "<think>\n").replace("</think>", "\n</think>")
    if "<seed:think>" in output:  # Seed-OSS: the template writes <seed:think>R</seed:think>
        return output.replace("<seed:think>", "<seed:think>\n").replace("</seed:think>", "\n</seed:think>")
    if "<channel|>" in output:  # Gemma 4: the template writes thought\nR\n<channel|>
        return output.replace("\n<channel|>", "<channel|>")
    for marker in ("<think>\n", "[THINK]\n"):
        output = output.replace(marker, marker.rstrip("\n"))
    for marker in ("\n</think>\n\n", "\n</think>\n", "\n</think>"):
        output = output.replace(marker, "</think>")
    return output.replace('", "', '","').replace('": ', '":').replace("}, {", "},{")


class Reordering(History):
    """A client that rebuilds tool arguments on the way back: keys sorted, spaced JSON."""

    def assistant(self, segs):
        segs = [Segment(s.kind, s.text, s.id, s.name, json.dumps(dict(sorted(json.loads(s.arguments).items()))))
                if s.kind == "call" else s for s in segs]
        super().assistant(segs)


def kept_turn(segs: list[Segment]) -> Turn:
    """The turn as the ingress collects it from the stream (what the client was sent)."""
    blocks = []
    for s in segs:
        if s.kind == "reasoning":
            blocks.append(ReasoningBlock(text=s.text))
        elif s.kind == "text":
            blocks.append(TextBlock(text=s.text))
        else:
            blocks.append(ToolCallBlock(id=s.id, name=s.name, arguments=s.arguments))
    return Turn(role="assistant", blocks=tuple(blocks))


def store() -> KeptTurnStore:
    return KeptTurnStore(SQLiteBackend(":memory:"), StoreBounds(1000, 1 << 30, 3600))


def run(make_preprocessor, fam, api: str, splicing: bool, turns: int = 2):
    """Drive `turns` agent turns; return the doctor's report for each follow-up and the last request."""
    kept = store() if splicing else None
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    pre._kept = kept  # the family's Preprocessor, with or without kept turns
    tok = pre._tok
    history = Reordering(api)
    reports = []
    last = None
    try:
        outputs = [non_canonical(o) for o in fam.outputs] * turns
        for output in outputs[:turns]:
            before = pre.preprocess(history.request(), SCOPE)
            if last is not None:
                reports.append(diagnose([*last[0], *last[1]], len(last[0]), before.engine.token_ids, tok.decode,
                                        frozenset(tok.all_special_ids), before.report.replay_last_rerendered))
            generated = tok.encode(output + fam.eot, add_special_tokens=False)
            segs = parse(fam, output, before.engine.reasoning_started, before.report.parse_reasoning)
            if kept is not None:
                assert kept.put(key_after(before.report.replay_prefix, kept_turn(segs)), before.engine.token_ids,
                                generated).result(timeout=5)
            last = (before.engine.token_ids, generated)
            history.assistant(segs)
            history.results(segs)
        final = pre.preprocess(history.request(), SCOPE)
        reports.append(diagnose([*last[0], *last[1]], len(last[0]), final.engine.token_ids, tok.decode,
                                frozenset(tok.all_special_ids), final.report.replay_last_rerendered))
        return reports, final
    finally:
        pre._kept = None
        if kept is not None:
            kept.close()


KEEPING = [n for n, f in FAMILIES.items() if f.keeps and not f.xfail]
DROPPING = [n for n, f in FAMILIES.items() if not f.keeps]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", KEEPING)
def test_non_canonical_output_replays_exactly_with_kept_turns(make_preprocessor, name, api):
    fam = FAMILIES[name]
    reports, final = run(make_preprocessor, fam, api, splicing=True)
    for r in reports:
        assert r.reuse_ratio == 1.0 and r.cause is None, r.header()
    assert dict(final.report.replay_outcomes).get("spliced", 0) >= 1
    assert not final.report.replay_last_rerendered


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", KEEPING)
def test_without_kept_turns_the_rerendered_output_diverges(make_preprocessor, name, api):
    fam = FAMILIES[name]
    reports, final = run(make_preprocessor, fam, api, splicing=False)
    assert final.report.replay_last_rerendered
    assert any(r.reuse_ratio < 1.0 for r in reports), [r.header() for r in reports]
    for r in reports:
        if r.reuse_ratio < 1.0:
            assert r.cause == "output_rerendered", r.header()


@pytest.mark.parametrize("name", DROPPING)
def test_templates_that_drop_reasoning_keep_their_choice(make_preprocessor, name):
    """DeepSeek-R1 / Nemotron v2 drop every earlier turn's reasoning: the kept tokens (which carry it) are not
    placed, and the reasoning stays out of the prompt."""
    fam = FAMILIES[name]
    _, final = run(make_preprocessor, fam, "anthropic", splicing=True)
    outcomes = dict(final.report.replay_outcomes)
    assert outcomes.get("spliced", 0) == 0 and outcomes.get("template_changed", 0) >= 1, outcomes
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    text = pre._tok.decode(final.engine.token_ids)
    assert "I should read a.py first" not in text


_WORD = st.text(alphabet=st.sampled_from("abcXYZ019 .,:;'-_/()[]{}\"\\éü中文🙂"), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(
    reasoning=st.lists(_WORD, min_size=1, max_size=6).map(" ".join),
    pad=st.sampled_from(["", "\n", "\n\n", " "]),
    args=st.dictionaries(st.sampled_from(["path", "cmd", "cwd", "limit"]), _WORD, min_size=1, max_size=4),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")]),
    api=st.sampled_from(APIS),
)
def test_any_spelling_of_a_turn_replays_as_generated(make_preprocessor, reasoning, pad, args, separators, api):
    """Whatever whitespace around the reasoning and whatever JSON spacing and key order the model wrote, the next
    prompt holds those tokens (reuse 1.0), and they parse to the content the client sent back."""
    fam = FAMILIES["agentserve_default"]
    reasoning = reasoning.strip() or "x"
    call = json.dumps({"name": "read", "arguments": args}, separators=separators, ensure_ascii=False)
    output = f"<think>{pad}{reasoning}{pad}</think>{pad}<tool_call>\n{call}\n</tool_call>"
    kept = store()
    pre = make_preprocessor(fam.template, fam.specials, fam.reasoning, fam.policy, fam.tools)
    pre._kept = kept
    try:
        history = Reordering(api)
        before = pre.preprocess(history.request(), SCOPE)
        generated = pre._tok.encode(output + fam.eot, add_special_tokens=False)
        assume(pre._tok.decode(generated) == output + fam.eot)  # text a model can write (the vocabulary spells it)
        segs = parse(fam, output, before.engine.reasoning_started, before.report.parse_reasoning)
        kept.put(key_after(before.report.replay_prefix, kept_turn(segs)), before.engine.token_ids, generated).result(timeout=5)
        history.assistant(segs)
        history.results(segs)
        after = pre.preprocess(history.request(), SCOPE)
        expected = [*before.engine.token_ids, *generated]
        assert after.engine.token_ids[: len(expected)].tolist() == expected
        # Meaning unchanged: the placed tokens, decoded and parsed, are the content the client sent back.
        placed = pre._tok.decode(after.engine.token_ids[len(before.engine.token_ids): len(expected) - 1])
        sent = next(t for t in history.request().conversation.turns if t.role == "assistant")
        assert assistant_content(kept_turn(parse(fam, placed, False)).blocks) == assistant_content(sent.blocks)
    finally:
        pre._kept = None
        kept.close()
