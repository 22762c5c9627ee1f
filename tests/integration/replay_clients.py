"""Agent loops through the official SDKs whose model output is not in the template's canonical form (issue 17).

The scripted model writes `<think>Step 1: run it.</think>` (the embedded template renders `<think>\\n…\\n</think>\\n\\n`)
and compact JSON arguments; each client sends its history back the way that API's clients do (chat with the
arguments' keys in another order, Anthropic's `tool_use.input` as an object, Responses' output items with
`encrypted_content`). `loop` returns each turn's `x-agentserve-prefix` header.
"""

from __future__ import annotations

import json
import time

import anthropic
import openai

MATCH = "replaytoken"
NON_CANONICAL = (
    "<think>Step 1: run it.</think>\n"
    '<tool_call>\n{"name":"run","arguments":{"cmd":"ls -la","cwd":"/tmp"}}\n</tool_call>'
)
RULE = {"match": MATCH, "reply": NON_CANONICAL, "itl_ms": 0}
PARAMETERS = {"type": "object", "properties": {"cmd": {"type": "string"}, "cwd": {"type": "string"}}}
MODEL = "smollm2"
RESULT = f"{MATCH} result: a.py b.py"


def _chat(url: str, first: str, turns: int) -> list[str | None]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0)
    tools = [{"type": "function", "function": {"name": "run", "parameters": PARAMETERS}}]
    messages: list[dict] = [{"role": "user", "content": first}]
    headers = []
    for _ in range(turns):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=tools)
        headers.append(raw.headers.get("x-agentserve-prefix"))
        msg = raw.parse().choices[0].message
        assert msg.tool_calls, msg
        calls = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name,
            "arguments": json.dumps(dict(reversed(list(json.loads(c.function.arguments).items()))))}}
            for c in msg.tool_calls]
        messages.append({"role": "assistant", "content": msg.content,
                         "reasoning_content": (msg.model_extra or {}).get("reasoning_content"), "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": RESULT} for c in calls]
    return headers


def _anthropic(url: str, first: str, turns: int) -> list[str | None]:
    client = anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)
    tools = [{"name": "run", "input_schema": PARAMETERS}]
    messages: list[dict] = [{"role": "user", "content": first}]
    headers = []
    for _ in range(turns):
        with client.messages.stream(model=MODEL, max_tokens=512, messages=messages, tools=tools) as stream:
            final = stream.get_final_message()
            headers.append(stream.response.headers.get("x-agentserve-prefix"))
        uses = [b for b in final.content if b.type == "tool_use"]
        assert uses and any(b.type == "thinking" for b in final.content), final
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": RESULT} for b in uses]})
    return headers


def _responses(url: str, first: str, turns: int) -> list[str | None]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0)
    tools = [{"type": "function", "name": "run", "parameters": PARAMETERS}]
    items: list[dict] = [{"type": "message", "role": "user", "content": first}]
    headers = []
    for _ in range(turns):
        raw = client.responses.with_raw_response.create(
            model=MODEL, input=items, tools=tools, include=["reasoning.encrypted_content"], store=False)
        headers.append(raw.headers.get("x-agentserve-prefix"))
        out = raw.parse().output
        calls = [o for o in out if o.type == "function_call"]
        assert calls and any(o.type == "reasoning" for o in out), out
        items += [o.model_dump(exclude_none=True) for o in out]
        items += [{"type": "function_call_output", "call_id": c.call_id, "output": RESULT} for c in calls]
    return headers


LOOPS = {"chat": _chat, "anthropic": _anthropic, "responses": _responses}


def loop(api: str, url: str, turns: int = 3) -> list[str | None]:
    return LOOPS[api](url, f"{MATCH} session {api} {time.time()}: list the files", turns)


def reuse(header: str) -> float:
    return float(header.split(";")[0].split("=")[1])
