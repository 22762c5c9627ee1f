"""Engine token logprobs -> the token strings clients see (ingress side: the engine never detokenizes)."""

from __future__ import annotations

from typing import Any, Sequence

from agentserve.protocol import TokenLogprob
from agentserve.protocol.events import Logprobs, TokenChoice


def _choice(tokenizer: Any, token_id: int, logprob: float) -> TokenChoice:
    text = tokenizer.decode([token_id], skip_special_tokens=True)  # EOS and markers are no text
    return TokenChoice(text, max(logprob, -9999.0), tuple(text.encode("utf-8")))


def logprobs_event(tokenizer: Any, entries: Sequence[TokenLogprob], top: int) -> Logprobs:
    """`top`: how many alternatives the client asked for (the engine may send the sampled token beside them)."""
    return Logprobs(
        tuple(
            (_choice(tokenizer, e.token_id, e.logprob), tuple(_choice(tokenizer, t, lp) for t, lp in e.top[:top]))
            for e in entries
        )
    )
