"""POST /tokenize and /detokenize (and under /v1): vLLM's shapes; `messages` render through the same template as
generation.

Both sit under the per-key limits like generation (ingress/middleware/limits.py). Decoding ids to text is linear in
their count and holds the GIL: /detokenize takes at most the model's context window of ids (no prompt or output is
longer), and past a few thousand ids the decode (and `return_token_strs`) runs in a worker thread, not on the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from agentserve.apis import chat_completions
from agentserve.apis.media import MediaPolicy
from agentserve.apis.tokenize import DetokenizeRequest, TokenizeRequest, detokenize_body, tokenize_body
from agentserve.ingress.context import IngressContext
from agentserve.ingress.http import describe_validation, parse_body
from agentserve.protocol.errors import RequestError


class TokenizeHandler:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    async def tokenize(self, request: Request) -> JSONResponse:
        ctx = self._ctx
        body = await parse_body(request, TokenizeRequest, ctx.args.limits)
        served = await ctx.lookup(body.model) if body.model else ctx.catalog.lookup(ctx.catalog.default.id)
        model = served.model  # an adapter tokenizes as its base model
        if body.prompt is not None:
            tokens = await ctx.preprocessor.tokenize_text.remote(body.prompt, body.add_special_tokens, model.id)
        else:
            try:
                chat = chat_completions.ChatCompletionRequest.model_validate(
                    {"model": model.id, "messages": body.messages, "tools": body.tools}
                )
            except ValidationError as exc:  # neither `prompt` nor valid `messages`
                raise RequestError("invalid_request", describe_validation(exc.errors())) from exc
            gen = chat_completions.decode(chat, request_id="tokenize", model=model.id, media=MediaPolicy.of(model))
            packed_ids = await ctx.preprocessor.render_tokens.remote(
                gen.conversation, dict(body.chat_template_kwargs or {}), body.add_generation_prompt, None, model.id
            )
            tokens = packed_ids.tolist()  # the wire's list (a window's worth: under a millisecond)
        strs = None
        if body.return_token_strs:
            strs = await _off_loop_if_long(len(tokens), ctx.tokenizer_for(model).convert_ids_to_tokens, tokens)
        return JSONResponse(tokenize_body(tokens, model.context_window, strs))

    async def detokenize(self, request: Request) -> JSONResponse:
        ctx = self._ctx
        body = await parse_body(request, DetokenizeRequest, ctx.args.limits)
        model = (await ctx.lookup(body.model)).model if body.model else ctx.catalog.default
        if len(body.tokens) > model.context_window:
            raise RequestError(
                "invalid_request",
                f"tokens: {len(body.tokens)} ids; the limit is the model's context window, {model.context_window}",
                param="tokens",
            )
        text = await _off_loop_if_long(len(body.tokens), _decode, ctx.tokenizer_for(model), body.tokens)
        return JSONResponse(detokenize_body(text))


# Ids converted inline up to this many (well under a millisecond); more go to a worker thread.
INLINE_IDS = 4096


T = TypeVar("T")


async def _off_loop_if_long(n: int, fn: Callable[..., T], *args: Any) -> T:
    return fn(*args) if n <= INLINE_IDS else await asyncio.to_thread(fn, *args)


def _decode(tokenizer: Any, tokens: list[int]) -> str:
    vocab = len(tokenizer)
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise RequestError("invalid_request", f"token ids out of range: {bad[:5]}", param="tokens")
    return tokenizer.decode(tokens)
