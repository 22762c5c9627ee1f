"""Fixture model outputs for every format, rendered from the formats' public descriptions, with expected events.

Each family pairs a reasoning parser with a tool-call parser the way a model family uses them. For each family we
render: plain text, reasoning only, reasoning then one call, text then several calls, a call with nested JSON and
unicode, and a call cut off by max tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": "string"}},
            },
        },
    },
    {  # bare form
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {
                "q": {"type": "object"},
                "n": {"type": "integer"},
                "exact": {"type": "boolean"},
                "zip": {"type": "string"},
                "tags": {"type": "array"},
                "s": {"type": "string"},
            },
        },
    },
]

CALL_A = ("get_weather", {"city": "Paris", "days": 3})
CALL_B = ("search", {"q": {"a": [1, 2.5, {"b": None}]}, "exact": True, "zip": "02139"})
CALL_NESTED = (
    "search",
    {"q": {"deep": {"list": [1, [2, [3]], {"k": "naïve ☃ 日本語 🎉"}]}}, "s": 'quote " and brace } and \\ back', "n": 7},
)
CALL_LONG = ("get_weather", {"city": "Paris", "note": "a long note that the model never finishes"})
THOUGHT = "The user wants the weather. <tool_call> here is just words."


def _j(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _xval(v: Any) -> str:
    return v if isinstance(v, str) else _j(v)


# -- tool-call renderers -------------------------------------------------------------------------------------------
def r_hermes(calls):
    return "".join(f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>\n" for n, a in calls)


def r_nemotron(calls):
    return "<TOOLCALL>" + _j([{"name": n, "arguments": a} for n, a in calls]) + "</TOOLCALL>"


def r_llama3(calls):
    return "<|python_tag|>" + "; ".join(_j({"name": n, "parameters": a}) for n, a in calls)


def r_llama3_bare(calls):
    return "; ".join(_j({"name": n, "parameters": a}) for n, a in calls)


def r_mistral(calls):
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{_j(a)}" for n, a in calls)


def r_pythonic(calls):
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")" for n, a in calls) + "]"


def r_deepseek_v3(calls):
    body = "\n".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_j(a)}\n```<｜tool▁call▁end｜>" for n, a in calls
    )
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def r_deepseek_v31(calls):
    body = "".join(f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_j(a)}<｜tool▁call▁end｜>" for n, a in calls)
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def r_kimi(calls):
    body = "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_j(a)}<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def r_qwen3_coder(calls):
    return "".join(
        f"<tool_call>\n<function={n}>\n"
        + "".join(f"<parameter={k}>\n{_xval(v)}\n</parameter>\n" for k, v in a.items())
        + "</function>\n</tool_call>\n"
        for n, a in calls
    )


def r_minimax(calls):
    inv = "".join(
        f'<invoke name="{n}">\n' + "".join(f'<parameter name="{k}">{_xval(v)}</parameter>\n' for k, v in a.items())
        + "</invoke>\n"
        for n, a in calls
    )
    return f"<minimax:tool_call>\n{inv}</minimax:tool_call>"


def r_glm47(calls):
    return "".join(
        f"<tool_call>{n}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{_xval(v)}</arg_value>" for k, v in a.items())
        + "</tool_call>"
        for n, a in calls
    )


def r_glm45(calls):
    return "".join(
        f"<tool_call>{n}\n"
        + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_xval(v)}</arg_value>\n" for k, v in a.items())
        + "</tool_call>\n"
        for n, a in calls
    )


def r_seed_oss(calls):
    return r_qwen3_coder(calls).replace("<tool_call>", "<seed:tool_call>").replace("</tool_call>", "</seed:tool_call>")


def r_deepseek_v32(calls):
    def param(k, v):
        kind = "true" if isinstance(v, str) else "false"
        return f'<｜DSML｜parameter name="{k}" string="{kind}">{_xval(v)}</｜DSML｜parameter>\n'

    inv = "".join(f'<｜DSML｜invoke name="{n}">\n' + "".join(param(k, v) for k, v in a.items())
                  + "</｜DSML｜invoke>\n" for n, a in calls)
    return f"\n\n<｜DSML｜function_calls>\n{inv}</｜DSML｜function_calls>"


def r_longcat(calls):
    return "".join(f"<longcat_tool_call>{_j({'name': n, 'arguments': a})}</longcat_tool_call>\n" for n, a in calls)


def r_tool_calls_array(calls):  # Hunyuan A13B, Jamba
    return "<tool_calls>" + _j([{"name": n, "arguments": a} for n, a in calls]) + "</tool_calls>"


def r_internlm(calls):
    return "".join(f"<|action_start|><|plugin|>\n{_j({'name': n, 'parameters': a})}<|action_end|>" for n, a in calls)


def r_lfm2(calls):
    return "<|tool_call_start|>" + r_pythonic(calls) + "<|tool_call_end|>"


def r_olmo3(calls):  # one call a line, values as JSON literals (true, null)
    lines = (f"{n}(" + ", ".join(f"{k}={_j(v)}" for k, v in a.items()) + ")" for n, a in calls)
    return "<function_calls>" + "\n".join(lines) + "</function_calls>"


def gemma_value(v: Any, quote: str) -> str:
    """A value in Gemma's notation, as its template's format_argument writes it (keys bare, strings quoted)."""
    if isinstance(v, str):
        return f"{quote}{v}{quote}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{gemma_value(x, quote)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(gemma_value(x, quote) for x in v) + "]"
    return str(v)  # numbers; None as the template renders it


def r_gemma(open_: str, close: str, quote: str) -> Callable:
    def render(calls):
        return "".join(f"{open_}call:{n}{gemma_value(a, quote)}{close}" for n, a in calls)

    return render


r_gemma4 = r_gemma("<|tool_call>", "<tool_call|>", '<|"|>')
r_functiongemma = r_gemma("<start_function_call>", "<end_function_call>", "<escape>")


def r_harmony(calls):
    return "".join(
        f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{_j(a)}<|call|>"
        for n, a in calls
    )


# -- reasoning renderers ------------------------------------------------------------------------------------------
def think(r):
    return f"<think>{r}</think>\n\n"


def think_forced(r):
    return f"{r}</think>\n\n"


@dataclass
class Family:
    id: str
    reasoning: str | None
    tool_calls: str | None
    render_calls: Callable | None
    render_reasoning: Callable | None = think
    render_text: Callable = lambda t: t
    text_before_calls: bool = True
    forced: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def kw(self) -> dict:
        return {"reasoning": self.reasoning, "tool_calls": self.tool_calls, "tools": TOOLS, **self.extra}


def harmony_text(t):
    return f"<|start|>assistant<|channel|>final<|message|>{t}<|return|>"


FAMILIES = [
    Family("qwen3+hermes", "qwen3", "hermes", r_hermes),
    Family("qwen3+qwen3_coder", "qwen3", "qwen3_coder", r_qwen3_coder),
    Family("nemotron3+qwen3_coder", "nemotron3", "qwen3_coder", r_qwen3_coder, think_forced, forced=True),
    Family("nemotron_nano+qwen3_coder", "nemotron_nano", "qwen3_coder", r_qwen3_coder, think_forced, forced=True),
    Family("deepseek_r1+deepseek_v3", "deepseek_r1", "deepseek_v3", r_deepseek_v3, think_forced, forced=True),
    Family("deepseek_r1+deepseek_v31", "deepseek_r1", "deepseek_v31", r_deepseek_v31, think, forced=True),
    Family("deepseek_r1+deepseek_v32", "deepseek_r1", "deepseek_v32", r_deepseek_v32, think_forced, forced=True),
    Family("none+seed_oss", None, "seed_oss", r_seed_oss, None),
    Family("seed_oss+seed_oss", "seed_oss", "seed_oss", r_seed_oss, lambda r: f"<seed:think>{r}</seed:think>"),
    Family("gemma4+gemma4", "gemma4", "gemma4", r_gemma4, lambda r: f"<|channel>thought\n{r}<channel|>"),
    Family("none+functiongemma", None, "functiongemma", r_functiongemma, None),
    Family("none+granite4", None, "granite4", r_hermes, None),
    Family("none+longcat", None, "longcat", r_longcat, None),
    Family("none+hunyuan_a13b", None, "hunyuan_a13b", r_tool_calls_array, None),
    Family("none+jamba", None, "jamba", r_tool_calls_array, None),
    Family("none+internlm", None, "internlm", r_internlm, None),
    Family("none+lfm2", None, "lfm2", r_lfm2, None),
    Family("none+olmo3", None, "olmo3", r_olmo3, None),
    Family("kimi+kimi_k2", "kimi", "kimi_k2", r_kimi),
    Family("qwen3+kimi_k2", "qwen3", "kimi_k2", r_kimi),
    Family("glm45+glm47", "glm45", "glm47", r_glm47),
    Family("glm45+glm45", "glm45", "glm45", r_glm45),
    Family("glm47+glm47(prompt opened <think>)", "glm47", "glm47", r_glm47, think_forced,
           extra={"reasoning_started": True}, forced=True),
    Family("minimax_append_think+minimax_m2", "minimax_append_think", "minimax_m2", r_minimax, think_forced,
           forced=True),
    Family("mistral+mistral", "mistral", "mistral", r_mistral, lambda r: f"[THINK]{r}[/THINK]"),
    Family("nemotron_deci+nemotron_deci", "nemotron_deci", "nemotron_deci", r_nemotron),
    Family("qwen3+llama3_json", "qwen3", "llama3_json", r_llama3),
    Family("none+llama3_json(bare)", None, "llama3_json", r_llama3_bare, None, text_before_calls=False),
    Family("none+pythonic", None, "pythonic", r_pythonic, None, text_before_calls=False),
    Family("gpt_oss+harmony", "gpt_oss", "harmony", r_harmony,
           lambda r: f"<|channel|>analysis<|message|>{r}<|end|>", harmony_text),
    Family("qwen3+none", "qwen3", None, None),
]


def call_view(i: int, call) -> tuple:
    return ("call", i, call[0], call[1])


def cases(f: Family) -> list[tuple[str, str, list[tuple]]]:
    """(case id, model text, expected summary) for one family."""
    out: list[tuple[str, str, list[tuple]]] = []
    hello = "Hello, world! Ünïcode 👋 done."
    if f.forced:
        out.append(("plain", hello, [("R", hello)]))  # forced: no </think> means everything is reasoning
    elif f.render_calls is not None and f.tool_calls == "harmony":
        out.append(("plain", harmony_text(hello), [("T", hello)]))
    else:
        out.append(("plain", hello, [("T", hello)]))
    if f.render_reasoning is not None:
        thought = THOUGHT
        out.append(("reasoning_only", f.render_reasoning(thought), [("R", thought)]))
        out.append(
            ("reasoning_then_text", f.render_reasoning(thought) + f.render_text("It is sunny."),
             [("R", thought), ("T", "It is sunny.")])
        )
    if f.render_calls is None:
        return out
    pre = f.render_reasoning("Need the weather.") if f.render_reasoning else ""
    pre_view = [("R", "Need the weather.")] if f.render_reasoning else []
    out.append(("reasoning_then_call", pre + f.render_calls([CALL_A]), pre_view + [call_view(0, CALL_A)]))
    if f.text_before_calls:
        lead = "Let me check both.\n\n"
        if f.tool_calls == "harmony":
            lead = "<|start|>assistant<|channel|>commentary<|message|>Let me check both.<|end|>"
        lead_view = [("T", "Let me check both.")]
        if f.forced:  # the block is open from the prompt: close it first
            lead, lead_view = f.render_reasoning("Two lookups.") + lead, [("R", "Two lookups."), *lead_view]
        out.append(("text_then_calls", lead + f.render_calls([CALL_A, CALL_B]),
                    lead_view + [call_view(0, CALL_A), call_view(1, CALL_B)]))
    else:
        out.append(("calls", f.render_calls([CALL_A, CALL_B]), [call_view(0, CALL_A), call_view(1, CALL_B)]))
    out.append(("nested_unicode", pre + f.render_calls([CALL_NESTED]), pre_view + [call_view(0, CALL_NESTED)]))
    full = pre + f.render_calls([CALL_LONG])
    cut = full[: full.index("never")]
    out.append(("truncated", cut, pre_view + [("trunc", 0, CALL_LONG[0])]))
    return out


ALL_CASES = [(f, cid, text, exp) for f in FAMILIES for cid, text, exp in cases(f)]
