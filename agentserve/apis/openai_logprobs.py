"""The logprob entry shape both OpenAI APIs use (chat `logprobs.content`, Responses `output_text.logprobs`)."""

from __future__ import annotations

from typing import Any

from agentserve.protocol.events import Logprobs, TokenChoice


def _choice_body(c: TokenChoice) -> dict[str, Any]:
    return {"token": c.token, "logprob": c.logprob, "bytes": list(c.bytes)}


def openai_logprobs(ev: Logprobs) -> list[dict[str, Any]]:
    return [{**_choice_body(chosen), "top_logprobs": [_choice_body(t) for t in top]} for chosen, top in ev.tokens]
