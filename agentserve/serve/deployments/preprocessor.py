"""Preprocessor deployment: rendering and tokenization, scaled on CPU apart from the ingress."""

from __future__ import annotations

from typing import Any

from ray import serve

from agentserve.config import ServeArgs
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import Conversation, GenerationRequest, PreprocessedRequest
from agentserve.serve.ray_metrics import start_export
from agentserve.state.kept_turns import open_kept_turns


@serve.deployment(name="Preprocessor", max_ongoing_requests=256)
class PreprocessorReplica:
    def __init__(self, args: dict[str, Any]) -> None:
        a = ServeArgs.from_any(args)
        start_export()  # this process's agentserve metrics -> Ray's metrics agent
        self._pre = Preprocessor(
            a.model, str(a.model.resolve_path()), a.engine.block_size, sort_tools=a.normalize_sort_tools,
            clamp_max_tokens=a.clamp_max_tokens,
            kept=open_kept_turns(a.kept_turns, a.state),
        )

    def preprocess(self, request: GenerationRequest, scope: str = "") -> PreprocessedRequest:
        return self._pre.preprocess(request, scope)

    def render_tokens(
        self,
        conversation: Conversation,
        template_kwargs: dict[str, Any],
        add_generation_prompt: bool,
        thinking: bool | None = None,  # the request's thinking switch, so counts match generation
    ) -> list[int]:
        return self._pre.render(
            conversation, template_kwargs, add_generation_prompt=add_generation_prompt, thinking=thinking
        ).token_ids

    def tokenize_text(self, text: str, add_special_tokens: bool) -> list[int]:
        return self._pre.tokenize_text(text, add_special_tokens)
