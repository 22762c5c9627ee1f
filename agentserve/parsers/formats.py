"""The registry: tool-call format names -> block formats, built from the per-family modules."""

from __future__ import annotations

from .harmony import MARKERS as HARMONY_MARKERS
from .reasoning import REASONING_FORMATS
from .schema import ToolIndex
from .sink import CallSink
from .tools.base import BlockFormat, Body
from .tools.gemma import FUNCTIONGEMMA, GEMMA4, GemmaBody, GemmaFormat
from .tools.json_calls import JsonCallsBody
from .tools.mistral import ARGS, CALL_ID, TOOL_CALLS, MistralBody
from .tools.pythonic import LFM2, OLMO3, PYTHONIC, PythonicBody, PythonicFormat
from .tools.sep_calls import DEEPSEEK_V3, DEEPSEEK_V31, KIMI_K2, SepBody, SepFormat
from .tools.xml_calls import DEEPSEEK_V32, GLM47, MINIMAX_M2, QWEN3_CODER, SEED_OSS, XmlBody, XmlFormat

__all__ = ["TOOL_FORMATS", "HARMONY", "GPT_OSS", "parser_markers", "reasoning_parsers", "tool_call_parsers"]

HARMONY = "harmony"  # tool-call name handled by harmony.HarmonyStage
GPT_OSS = "gpt_oss"  # reasoning name handled by harmony.HarmonyStage


def _json_block(name: str, start: str, end: str, tokens: tuple[str, ...] = ()) -> BlockFormat:
    """`tokens`: the special tokens `start` is made of, where it is several (the decode path keeps each)."""
    def make(_m: str, sink: CallSink, _tools: ToolIndex) -> Body:
        return JsonCallsBody(sink, end)

    return BlockFormat(name, (start,), make, markers=(*(tokens or (start,)), end))


def _gemma(name: str, f: GemmaFormat) -> BlockFormat:
    def make(_m: str, sink: CallSink, tools: ToolIndex) -> Body:
        return GemmaBody(f, sink, tools)

    return BlockFormat(name, (f.call_open,), make, markers=(f.call_open, f.call_close, f.quote))


def _sep(name: str, f: SepFormat) -> BlockFormat:
    def make(m: str, sink: CallSink, _tools: ToolIndex) -> Body:
        return SepBody(f, m, sink)

    return BlockFormat(
        name, (f.section_open, f.call_open), make,
        markers=(f.section_open, f.section_close, f.call_open, f.sep, f.call_close),
    )


def _xml(name: str, start: str, f: XmlFormat) -> BlockFormat:
    def make(_m: str, sink: CallSink, tools: ToolIndex) -> Body:
        return XmlBody(f, sink, tools)

    return BlockFormat(name, (start,), make, markers=(start, *_xml_markers(f)))


def _xml_markers(f: XmlFormat) -> tuple[str, ...]:
    ms = (f.block_close, f.call_open, f.name_close, f.call_close, f.key_open, f.key_close, f.value_open, f.value_close)
    return tuple(m for m in ms if m)


def _llama3(m: str, sink: CallSink, _tools: ToolIndex) -> Body:
    return JsonCallsBody(sink, None, ",;", bare=m == "{")


def _pythonic(name: str, f: PythonicFormat, bare: bool = False) -> BlockFormat:
    """`bare`: a list may also open at a line start without the markers (Llama 3.2 / 4 write it either way)."""
    def make(m: str, sink: CallSink, _tools: ToolIndex) -> Body:
        return PythonicBody(sink, m, f)

    return BlockFormat(name, (f.start,), make, "[" if bare else "", (f.start, f.end), bare_after_prose=bare)


def _mistral(_m: str, sink: CallSink, _tools: ToolIndex) -> Body:
    return MistralBody(sink)


TOOL_FORMATS: dict[str, BlockFormat] = {
    "hermes": _json_block("hermes", "<tool_call>", "</tool_call>"),
    "nemotron_deci": _json_block("nemotron_deci", "<TOOLCALL>", "</TOOLCALL>"),
    # Llama 3.x writes a JSON call as the whole message, or after a sentence; Llama 3.2 / 4 write pythonic lists
    # the same way: either may start at a line start after answer text.
    "llama3_json": BlockFormat("llama3_json", ("<|python_tag|>",), _llama3, "{", ("<|python_tag|>",),
                               bare_after_prose=True),
    "pythonic": _pythonic("pythonic", PYTHONIC, bare=True),
    "mistral": BlockFormat("mistral", (TOOL_CALLS,), _mistral, markers=(TOOL_CALLS, ARGS, CALL_ID)),
    "deepseek_v3": _sep("deepseek_v3", DEEPSEEK_V3),
    "deepseek_v31": _sep("deepseek_v31", DEEPSEEK_V31),
    "deepseek_v3_1": _sep("deepseek_v3_1", DEEPSEEK_V31),  # Dynamo's spelling
    "kimi_k2": _sep("kimi_k2", KIMI_K2),
    "qwen3_coder": _xml("qwen3_coder", "<tool_call>", QWEN3_CODER),
    "minimax_m2": _xml("minimax_m2", "<minimax:tool_call>", MINIMAX_M2),
    "glm47": _xml("glm47", "<tool_call>", GLM47),
    "glm45": _xml("glm45", "<tool_call>", GLM47),
    "seed_oss": _xml("seed_oss", "<seed:tool_call>", SEED_OSS),
    "deepseek_v32": _xml("deepseek_v32", "<｜DSML｜function_calls>", DEEPSEEK_V32),
    "gemma4": _gemma("gemma4", GEMMA4),
    "functiongemma": _gemma("functiongemma", FUNCTIONGEMMA),
    "granite4": _json_block("granite4", "<tool_call>", "</tool_call>"),  # Granite 4.0 / 4.1: hermes' block
    # vLLM's names for Qwen3.5 / 3.6's two forms (the same grammars as qwen3_coder and hermes)
    "qwen3_xml": _xml("qwen3_xml", "<tool_call>", QWEN3_CODER),
    "qwen3_json": _json_block("qwen3_json", "<tool_call>", "</tool_call>"),
    "step3p5": _xml("step3p5", "<tool_call>", QWEN3_CODER),  # Step-3.5 / 3.7: Qwen3-Coder's grammar unchanged
    "longcat": _json_block("longcat", "<longcat_tool_call>", "</longcat_tool_call>"),
    "hunyuan_a13b": _json_block("hunyuan_a13b", "<tool_calls>", "</tool_calls>"),  # a JSON array of calls
    "jamba": _json_block("jamba", "<tool_calls>", "</tool_calls>"),
    "internlm": _json_block("internlm", "<|action_start|><|plugin|>", "<|action_end|>",
                            tokens=("<|action_start|>", "<|plugin|>")),
    "lfm2": _pythonic("lfm2", LFM2),
    "olmo3": _pythonic("olmo3", OLMO3),
}


def parser_markers(reasoning: str | None, tool_calls: str | None) -> frozenset[str]:
    """Every marker the parser pair consumes (unknown names count as none). The decode path keeps those that are
    special tokens of the model's tokenizer, which would otherwise be skipped before the parsers could see them."""
    if reasoning == GPT_OSS or tool_calls == HARMONY:
        return frozenset(HARMONY_MARKERS)
    out: set[str] = set()
    if reasoning in REASONING_FORMATS:
        f = REASONING_FORMATS[reasoning]
        out.update((*f.starts, f.end))
    if tool_calls in TOOL_FORMATS:
        out.update(TOOL_FORMATS[tool_calls].markers)
    return frozenset(out)


def reasoning_parsers() -> tuple[str, ...]:
    """Registered reasoning parser names, sorted."""
    return tuple(sorted([*REASONING_FORMATS, GPT_OSS]))


def tool_call_parsers() -> tuple[str, ...]:
    """Registered tool-call parser names, sorted."""
    return tuple(sorted([*TOOL_FORMATS, HARMONY]))
