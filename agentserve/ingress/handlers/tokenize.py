"""POST /tokenize and /detokenize (and under /v1): vLLM's shapes; `messages` render through the same template as
generation."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from agentserve.apis import chat_completions
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
            gen = chat_completions.decode(chat, request_id="tokenize", model=model.id)
            tokens = await ctx.preprocessor.render_tokens.remote(
                gen.conversation, dict(body.chat_template_kwargs or {}), body.add_generation_prompt, None, model.id
            )
        tokenizer = ctx.tokenizer_for(model)
        strs = tokenizer.convert_ids_to_tokens(tokens) if body.return_token_strs else None
        return JSONResponse(tokenize_body(tokens, model.context_window, strs))

    async def detokenize(self, request: Request) -> JSONResponse:
        ctx = self._ctx
        body = await parse_body(request, DetokenizeRequest, ctx.args.limits)
        model = (await ctx.lookup(body.model)).model if body.model else ctx.catalog.default
        tokenizer = ctx.tokenizer_for(model)
        vocab = len(tokenizer)
        bad = [t for t in body.tokens if not 0 <= t < vocab]
        if bad:
            raise RequestError("invalid_request", f"token ids out of range: {bad[:5]}", param="tokens")
        return JSONResponse(detokenize_body(tokenizer.decode(body.tokens)))
