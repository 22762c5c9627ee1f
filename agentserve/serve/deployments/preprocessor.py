"""Preprocessor deployment: rendering and tokenization, scaled on CPU apart from the ingress.

One replica serves every catalog model: it holds one Preprocessor (tokenizer, chat template, replay policy) per
model and finds a request's by its served id (a model's id, or one of its LoRA adapters' ids) in one dict lookup.

Nothing a client sent is rendered on the replica's event loop: every render and tokenization runs on the replica's
own worker pool, so one slow request never stalls the others' calls. Each render is bounded inside itself (its CPU
time and an output cap: preprocess/template_render.py, a 400 when broken); the wait for a worker is bounded too
(`WAIT_S`), as a backstop for what a render budget does not cover (a kept-turn read waiting on the database, a
backlog of large prompts): past it the caller gets a 503 to retry, and the work, already bounded, ends on its own.
"""

from __future__ import annotations

import asyncio
import os
from array import array
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from ray import serve
from ray.serve.config import RequestRouterConfig

from agentserve.config import ResolvedCatalog, ServeArgs
from agentserve.bytes_lru import BytesLRU
from agentserve.preprocess.preprocessor import Preprocessor
from agentserve.protocol import (
    Conversation, ConversationDelta, GenerationRequest, KeepAs, Preprocessed, SessionAffinity,
)
from agentserve.protocol.errors import RequestError
from agentserve.serve.heap import freeze_startup_heap
from agentserve.serve.ray_metrics import start_export
from agentserve.state.kept_turns import open_kept_turns
from agentserve.traces.otel import open_spans

T = TypeVar("T")

# The tokenizer releases the GIL, so a few more workers than cores keep the cores busy.
WORKERS = min(8, (os.cpu_count() or 2) + 2)
# The longest a call waits for its worker (queueing, render, tokenization, a kept-turn read).
WAIT_S = 60.0


@serve.deployment(
    name="Preprocessor",
    max_ongoing_requests=256,
    request_router_config=RequestRouterConfig(
        request_router_class="agentserve.serve.deployments.session_affinity:SessionAffinityRouter"
    ),
)
class PreprocessorReplica:
    def __init__(self, args: dict[str, Any], catalog: dict[str, Any]) -> None:
        a = ServeArgs.from_any(args)
        resolved = ResolvedCatalog.from_any(catalog)
        start_export()  # this process's agentserve metrics -> Ray's metrics agent
        kept = open_kept_turns(a.kept_turns, a.state)
        # served id -> (that model's preprocessor, the adapter id or None); the first model answers unnamed calls
        self._served: dict[str, tuple[Preprocessor, str | None]] = {}
        for m in resolved.models:
            pre = Preprocessor(
                m, str(m.resolve_path()), resolved.engine(m.id).block_size, sort_tools=a.normalize_sort_tools,
                clamp_max_tokens=a.clamp_max_tokens, kept=kept, scripted=resolved.engine(m.id).kind == "scripted",
                cache_isolation=a.cache_isolation, memo_bytes=a.kept_turns.prompt_memo_bytes,
            )
            pre.probe_windows()
            self._served[m.id] = (pre, None)
            self._served.update((ad.id, (pre, ad.id)) for ad in m.adapters)
        self._default = resolved.default.id
        # (caller, id) -> a conversation an Ingress replica sent, for its session's next request's delta
        self._conversations: BytesLRU[tuple[str, str], Conversation] = BytesLRU(a.kept_turns.conversation_memo_bytes)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="preprocess")
        self._spans = open_spans(a.request_traces, "Preprocessor")
        freeze_startup_heap()

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the worker pool, waited for at most WAIT_S (then a 503; a queued call is
        dropped, a running one ends within its own render budget)."""
        future = self._pool.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), WAIT_S)
        except asyncio.TimeoutError:
            future.cancel()
            raise RequestError(
                "overloaded", f"preprocessing did not finish within {WAIT_S:g} s", retry_after=5.0
            ) from None
        except asyncio.CancelledError:  # the caller left: work still queued for it is dropped
            future.cancel()
            raise

    def _for(self, served_id: str | None, base: str | None = None) -> tuple[Preprocessor, str | None]:
        """`base`: the catalog model the ingress resolved `served_id` to; a served id this replica does not know
        (a LoRA adapter loaded at run time) is then that model's adapter, and only its id matters here (it seeds
        the block hashes), so run-time loads never have to reach every Preprocessor replica."""
        found = self._served.get(served_id or self._default)
        if found is None and base is not None and base in self._served:
            found = (self._served[base][0], served_id)
        if found is None:  # the ingress resolves names first: only a caller that skipped it gets here
            raise RequestError("not_found", f"model '{served_id}' is not served", param="model")
        return found

    async def preprocess(
        self,
        request: GenerationRequest,
        scope: str = "",
        base: str | None = None,
        delta: ConversationDelta | None = None,
        keep: KeepAs | None = None,
        affinity: SessionAffinity | None = None,  # for the deployment's request router (session_affinity.py)
    ) -> Preprocessed | None:
        """`request.model` is the served id the ingress resolved (a catalog model's, or one of its adapters'),
        `base` the catalog model that serves it. `delta`: the request's conversation is the one kept under
        `delta.base` and these turns (None when this replica does not hold it: the caller sends it whole);
        `keep`: keep this request's conversation for the next delta (ingress/sent_conversations.py)."""
        with self._spans.child("preprocessor.preprocess", request.hints.trace):
            pre, adapter = self._for(request.model, base)
            if delta is not None:
                earlier = self._conversations.get((scope, delta.base))
                conversation = delta.apply(earlier) if earlier is not None else None
                if conversation is None:
                    return None
                request = request.model_copy(update={"conversation": conversation})
            out = await self._off_loop(pre.preprocess, request, scope, adapter=adapter)
            if keep is not None:
                self._conversations.put((scope, keep.id), request.conversation, keep.nbytes)
            return out

    async def render_tokens(
        self,
        conversation: Conversation,
        template_kwargs: dict[str, Any],
        add_generation_prompt: bool,
        thinking: bool | None = None,  # the request's thinking switch, so counts match generation
        model: str | None = None,  # the served id (None: the default model)
    ) -> array:
        """The rendered prompt's ids, packed (protocol/token_ids.py)."""
        pre = self._for(model)[0]
        prompt = await self._off_loop(
            pre.render, conversation, template_kwargs, add_generation_prompt=add_generation_prompt, thinking=thinking
        )
        return prompt.token_ids

    async def tokenize_text(self, text: str, add_special_tokens: bool, model: str | None = None) -> list[int]:
        return await self._off_loop(self._for(model)[0].tokenize_text, text, add_special_tokens)
