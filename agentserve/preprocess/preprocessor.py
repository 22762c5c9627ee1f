"""Preprocessor: GenerationRequest -> PreprocessedRequest (render, tokenize, hash blocks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.config import ModelSpec
from agentserve.preprocess.block_hash import block_hashes
from agentserve.preprocess.render import template_messages
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.protocol import Conversation, GenerationRequest, PreprocessedRequest
from agentserve.protocol.errors import RequestError

# Markers that, at the very end of a rendered prompt, mean the model starts inside its reasoning.
_REASONING_OPENERS = ("<think>", "<think>\n", "[THINK]", "◁think▷")


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    text: str
    token_ids: list[int]


class Preprocessor:
    def __init__(self, model: ModelSpec, model_path: str, block_size: int) -> None:
        self._model = model
        self._tok = load_tokenizer(model_path)
        self._block_size = block_size

    def render(
        self,
        conversation: Conversation,
        template_kwargs: dict[str, Any] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> RenderedPrompt:
        tools = [t.openai_schema() for t in conversation.tools] or None
        try:
            text = self._tok.apply_chat_template(
                template_messages(conversation),
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **(template_kwargs or {}),
            )
        except RequestError:
            raise
        except Exception as exc:  # jinja errors name the bad input; don't turn them into a 500
            raise RequestError("invalid_request", f"cannot render the chat template: {exc}") from exc
        return RenderedPrompt(text, self._tok.encode(text, add_special_tokens=False))

    def preprocess(self, request: GenerationRequest) -> PreprocessedRequest:
        prompt = self.render(request.conversation, request.template_kwargs)
        n = len(prompt.token_ids)
        window = self._model.context_window
        if n >= window:
            raise RequestError(
                "invalid_request",
                f"This model's maximum context length is {window} tokens. "
                f"However, your messages resulted in {n} tokens.",
                param="messages",
                code="context_length_exceeded",
            )
        requested = request.sampling.max_tokens
        max_tokens = window - n if requested is None else min(requested, window - n)
        return PreprocessedRequest(
            request_id=request.request_id,
            model=self._model.id,
            token_ids=prompt.token_ids,
            block_hashes=block_hashes(prompt.token_ids, self._block_size),
            sampling=request.sampling,
            hints=request.hints,
            max_tokens=max_tokens,
            reasoning_started=prompt.text.endswith(_REASONING_OPENERS),
            match_text=request.conversation.last_user_text(),
        )

    def tokenize_text(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens)

    def detokenize(self, token_ids: list[int]) -> str:
        return self._tok.decode(token_ids)
