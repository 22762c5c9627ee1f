"""Freeform (custom) tools under their grammar, from a Codex-shaped Responses request to the engine: the grammar the
preprocessor writes (preprocess/constrain.py, preprocess/freeform.py) accepts a call exactly when its input is a
sentence of the tool's grammar, written as the template replays it; the hermes parser and custom_tool_input read it
back to the exact text; a scripted engine refuses a reply the grammar does not accept, and the vLLM engine hands
vLLM the same tag. The Lark grammar is Codex's own (tests/support/codex_apply_patch.lark, from openai/codex
codex-rs/core/src/tools/handlers/tool_apply_patch.lark)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.apis.responses import ResponsesRequest, Sealer, decode
from agentserve.apis.responses.decode import custom_tool_arguments, custom_tool_input
from agentserve.config import EngineSpec, ModelSpec
from agentserve.engines.scripted import ScriptedEngine
from agentserve.parsers import StreamParser
from agentserve.parsers.events import ToolCallEnd, ToolCallStart
from agentserve.preprocess.constrain import ReasoningMarkers, check, structural_tag
from agentserve.preprocess.freeform import Untranslatable, json_string_ebnf
from agentserve.preprocess.preprocessor import Preprocessor
from tests.support.keys import signing_key

CODEX_GRAMMAR = (Path(__file__).parents[2] / "support" / "codex_apply_patch.lark").read_text()
# Newer Codex builds with several environments let a patch name one (codex-rs/apply-patch/src/parser.rs).
CODEX_ENV_GRAMMAR = CODEX_GRAMMAR.replace(
    "start: begin_patch hunk+ end_patch",
    'start: begin_patch environment_id? hunk+ end_patch\nenvironment_id: "*** Environment ID: " filename LF',
)
PATCH = (
    "*** Begin Patch\n*** Update File: src/app.py\n@@ def greet():\n-print(\"Hi\")\n+print(\"Hello, \\\"wörld\\\" 😀\")\n"
    "+\tindent\n*** Add File: notes/é.txt\n+line\n*** Delete File: old.txt\n*** End Patch\n"
)
MALFORMED = [
    "*** Begin Patch\n*** End Patch\n",  # no hunk
    "*** Begin Patch\n*** Edit File: a.py\n+x\n*** End Patch\n",  # no such header
    "*** Begin Patch\n*** Update File: a.py\nx = 1\n*** End Patch\n",  # a line without its +/-/space
    "*** Begin Patch\n*** Add File: a.py\n+x\n",  # never ends
    "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n",  # a unified diff
]
EXEC = {"type": "function", "name": "exec_command", "description": "Run a command.", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
SEALER = Sealer(signing_key("unit"))
OPTIONAL = ReasoningMarkers("optional")


def _custom(name: str, fmt: dict | None) -> dict:
    return {"type": "custom", "name": name, "description": f"The {name} tool.", **({"format": fmt} if fmt else {})}


def _patch_tool(definition: str = CODEX_GRAMMAR) -> dict:
    return _custom("apply_patch", {"type": "grammar", "syntax": "lark", "definition": definition})


def _request(tools: list[dict], **body):
    return decode(
        ResponsesRequest.model_validate({"model": "m", "input": "edit the file", "tools": tools, **body}),
        request_id="r", model="m", sealer=SEALER, caller="c",
    ).request


def _tag(tools: list[dict], **body) -> str | None:
    gen = _request(tools, **body)
    tag = structural_tag(gen.conversation, gen.output_format, tool_call_parser="hermes", reasoning=OPTIONAL)
    if tag is not None:
        check(tag, gen.conversation, gen.output_format)
    return tag


def _call(name: str, tool_input: str) -> str:
    """A freeform call as the template renders it on replay (and so as the model writes it)."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {custom_tool_arguments(tool_input)}}}\n</tool_call>'


def _read_back(text: str, tools: list[dict]) -> list[tuple[str, str]]:
    """(name, freeform input) of each call the hermes parser reads in `text`."""
    specs = [t.openai_schema() for t in _request(tools).conversation.tools]
    parser = StreamParser(reasoning="qwen3", tool_calls="hermes", tools=specs)
    events = parser.feed(text) + parser.finish()
    names = [e.name for e in events if isinstance(e, ToolCallStart)]
    return list(zip(names, [custom_tool_input(e.arguments) for e in events if isinstance(e, ToolCallEnd)]))


CODEX_TOOLS = [EXEC, _patch_tool()]


@pytest.mark.parametrize("definition", [CODEX_GRAMMAR, CODEX_ENV_GRAMMAR, "# Codex's header comment\n" + CODEX_GRAMMAR])
def test_codex_apply_patch_grammar_compiles(definition):
    assert json_string_ebnf("lark", definition).startswith("root ::=")
    assert json.loads(_tag([EXEC, _patch_tool(definition)]))["type"] == "structural_tag"


def test_free_choice_stays_free_until_the_model_opens_a_patch_call(grammar):
    tag = _tag(CODEX_TOOLS)
    assert grammar(tag, "No edit needed; the file is fine.")
    assert grammar(tag, "<think>look first</think>" + '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>')
    assert grammar(tag, "I will edit it.\n" + _call("apply_patch", PATCH))
    for bad in MALFORMED:
        assert not grammar(tag, _call("apply_patch", bad)), bad
    # The input must be JSON-escaped exactly as the template replays it: not raw, not ASCII-escaped.
    assert not grammar(tag, '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "' + PATCH + '"}}\n</tool_call>')
    ascii_escaped = '{"input": ' + json.dumps(PATCH) + "}"
    assert not grammar(tag, '<tool_call>\n{"name": "apply_patch", "arguments": ' + ascii_escaped + "}\n</tool_call>")
    assert _read_back(_call("apply_patch", PATCH), CODEX_TOOLS) == [("apply_patch", PATCH)]


def test_environment_id_patches_follow_the_newer_grammar(grammar):
    with_env = PATCH.replace("*** Begin Patch\n", "*** Begin Patch\n*** Environment ID: remote-1\n")
    assert grammar(_tag([_patch_tool(CODEX_ENV_GRAMMAR)]), _call("apply_patch", with_env))
    assert not grammar(_tag(CODEX_TOOLS), _call("apply_patch", with_env))


def test_named_and_required_choice_hold_the_call_to_the_grammar(grammar):
    named = _tag(CODEX_TOOLS, tool_choice={"type": "custom", "name": "apply_patch"})
    assert grammar(named, _call("apply_patch", PATCH)) and not grammar(named, "Sure.")
    assert not grammar(named, _call("apply_patch", MALFORMED[2]))
    required = _tag(CODEX_TOOLS, tool_choice="required")
    assert grammar(required, '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>')
    assert not grammar(required, _call("apply_patch", MALFORMED[0]))


def test_a_regex_format_custom_tool_is_constrained_too(grammar):
    tool = _custom("tag_release", {"type": "grammar", "syntax": "regex", "definition": r'v\d+\.\d+ "\w+"\t\\'})
    tag = _tag([tool])
    text = 'v1.22 "rc1"\t\\'
    assert grammar(tag, _call("tag_release", text)) and _read_back(_call("tag_release", text), [tool]) == [("tag_release", text)]
    assert not grammar(tag, _call("tag_release", "v1 rc1"))


def test_text_format_and_untranslatable_grammars_stay_free(grammar):
    note = _custom("note", {"type": "text"})
    assert _tag([note]) is None and _tag([_custom("plain", None)]) is None
    # A grammar that cannot be translated (an undefined rule, a lookahead) leaves its tool as it was: free.
    for fmt in ({"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"},
                {"type": "grammar", "syntax": "regex", "definition": "a(?=b)"}):
        assert _tag([_custom("t", fmt)]) is None
    with pytest.raises(Untranslatable):
        json_string_ebnf("regex", "a(?=b)")
    # Beside a constrained freeform tool, a text tool's call is any JSON object, as every non-strict tool's.
    tag = _tag([note, _patch_tool()])
    assert grammar(tag, _call("note", "anything at all\n\"quoted\""))


# Any assigned character but a newline (the embedded tokenizer cannot write unassigned or private-use ones).
CHARS = st.characters(blacklist_categories=("Cs", "Cn", "Co"), blacklist_characters="\n")
LINE = st.text(CHARS, max_size=24)
NAME = st.text(CHARS, min_size=1, max_size=16)


@st.composite
def patches(draw) -> str:
    """Patches of the grammar's shape: any header paths, lines with quotes, backslashes, tabs, controls, unicode."""
    hunks = []
    for kind in draw(st.lists(st.sampled_from(["add", "delete", "update"]), min_size=1, max_size=3)):
        path = draw(NAME)
        if kind == "add":
            hunks.append(f"*** Add File: {path}\n" + "".join(f"+{x}\n" for x in draw(st.lists(LINE, min_size=1, max_size=3))))
        elif kind == "delete":
            hunks.append(f"*** Delete File: {path}\n")
        else:
            hunk = f"*** Update File: {path}\n" + (f"*** Move to: {draw(NAME)}\n" if draw(st.booleans()) else "")
            changes = draw(st.lists(st.tuples(st.sampled_from(["@@", "@@ ", "+", "-", " "]), LINE), max_size=4))
            for mark, text in changes:
                hunk += "@@\n" if mark == "@@" else f"@@ {text or 'x'}\n" if mark == "@@ " else f"{mark}{text}\n"
            hunks.append(hunk + ("*** End of File\n" if changes and draw(st.booleans()) else ""))
    return "*** Begin Patch\n" + "".join(hunks) + "*** End Patch" + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(patch=patches())
def test_any_patch_of_the_grammar_round_trips(grammar, patch):
    text = _call("apply_patch", patch)
    assert grammar(_tag(CODEX_TOOLS), text)
    assert _read_back(text, CODEX_TOOLS) == [("apply_patch", patch)]


REGEXES = [r".*", r"[^x\"]+", r"(?s).{0,5}", r"\w+ \d*", r'(a|"|\\)+\t?', r"[\x00-\x1f]*é"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(regex=st.sampled_from(REGEXES),
       text=st.text(st.one_of(CHARS, st.sampled_from('\n\t\\"x\x00\x1fé')), max_size=8))
def test_a_regex_tool_accepts_exactly_its_sentences(grammar, regex, text):
    """Escaping is folded into every character set: the call is accepted exactly when the regex matches the text."""
    import re

    tool = _custom("r", {"type": "grammar", "syntax": "regex", "definition": regex})
    assert grammar(_tag([tool]), _call("r", text)) == bool(re.fullmatch(regex, text))


@pytest.fixture(scope="module")
def preprocessor(model_path):
    return Preprocessor(ModelSpec(), str(model_path), 16)


def _engine_request(preprocessor):
    return preprocessor.preprocess(_request(CODEX_TOOLS, reasoning={"effort": "low"})).engine


def _scripted(model_path, *replies: str) -> ScriptedEngine:
    spec = EngineSpec(kind="scripted", kv_events=False, rules=tuple({"reply": r} for r in replies))
    return ScriptedEngine.from_spec(spec, model_path)


def _generate(engine: ScriptedEngine, request) -> list:
    async def go():
        return [d async for d in engine.generate(request)]

    return asyncio.run(go())


def test_a_scripted_engine_cannot_escape_the_patch_grammar(preprocessor, model_path, tokenizer):
    request = _engine_request(preprocessor)
    assert request.structural_tag is not None
    for bad in MALFORMED:  # the only scripted reply is malformed: a constrained engine could not have produced it
        out = _generate(_scripted(model_path, _call("apply_patch", bad)), request)
        assert out[-1].finish_reason == "error" and "constraint" in out[-1].error
    engine = _scripted(model_path, _call("apply_patch", MALFORMED[1]), "<think>edit</think>" + _call("apply_patch", PATCH))
    ids = [t for d in _generate(engine, request) for t in d.token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert _read_back(text, CODEX_TOOLS) == [("apply_patch", PATCH)]


def test_a_replayed_patch_call_is_the_text_the_grammar_let_the_model_write(preprocessor, tokenizer):
    history = [{"role": "user", "content": "edit"},
               {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
               {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}]
    request = preprocessor.preprocess(_request(CODEX_TOOLS, input=history)).engine
    prompt = tokenizer.decode(list(request.token_ids), skip_special_tokens=False)
    assert _call("apply_patch", PATCH) in prompt


def test_the_vllm_engine_hands_vllm_the_patch_grammar(preprocessor):
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from agentserve.engines.vllm import VllmEngine

    request = _engine_request(preprocessor)
    sampling = VllmEngine(EngineSpec(kv_events=False), Path("/nonexistent"), context_window=64)._sampling(request)
    assert sampling.structured_outputs.structural_tag == request.structural_tag
    assert "apply_patch" in request.structural_tag and "grammar" in request.structural_tag
    validate_xgrammar_grammar(sampling)  # what vLLM checks before it compiles the tag


def test_codex_is_told_freeform_only_where_the_call_can_be_constrained():
    from agentserve.apis.codex.models import model_info

    assert model_info("m", ModelSpec())["apply_patch_tool_type"] == "freeform"
    assert model_info("m", ModelSpec(tool_call_parser="qwen3_coder"))["apply_patch_tool_type"] == "function"
    explicit = ModelSpec(tool_call_parser="qwen3_coder", profile={"apply_patch_tool_type": None})
    assert model_info("m", explicit)["apply_patch_tool_type"] is None
    with pytest.raises(ValueError, match="freeform"):
        ModelSpec(tool_call_parser="qwen3_coder", profile={"apply_patch_tool_type": "freeform"})
