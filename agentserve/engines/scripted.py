"""A deterministic engine for protocol tests and scale benchmarks.

It replays scripted raw model output through the real tokenizer, token by token, and models vLLM's
block prefix cache (engines/scripted_cache.py: prompt and generated blocks, LRU, prefill cost per
uncached token) so that `num_cached_tokens` and KV events behave as vLLM's. It stands in for the engine only.

LoRA adapters are ids it holds (declared, or loaded at run time; it reads no weights): a request under an adapter
caches and hits blocks of that adapter only, and a rule naming an adapter answers only under it, so a test sees
which adapter answered. A request's `cache_salt` partitions the cache as vLLM's does (engines/scripted_cache.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

from agentserve.config import EngineSpec, LoraAdapterSpec, ScriptedCache, ScriptRule
from agentserve.engines.base import EngineStats, already_loaded, unknown_adapter
from agentserve.engines.scripted_cache import PrefixCache, PromptHashes
from agentserve.kv_events.publisher import KvEventPublisher
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.protocol import EngineDelta, EngineRequest, TokenLogprob


def load_rules(spec: EngineSpec) -> tuple[ScriptRule, ...]:
    if spec.rules:
        return spec.rules
    assert spec.script is not None
    raw = json.loads(Path(spec.script).expanduser().read_text())
    return tuple(ScriptRule.model_validate(r) for r in raw)


def _grammar_compiler(tok: Any) -> Callable[[str], Any]:
    """structural tag -> compiled grammar, with xgrammar as vLLM's backend uses it (compiled grammars cached).

    The compiler is built at the first constrained request: importing xgrammar imports torch (~2 s of CPU), which
    a replica that is never asked for a constraint (most test graphs) would spend at every start-up."""
    import functools

    @functools.lru_cache(maxsize=1)
    def compiler() -> Callable[[str], Any]:
        import xgrammar as xgr

        return xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok)).compile_structural_tag

    @functools.lru_cache(maxsize=256)
    def compile_structural_tag(tag: str) -> Any:
        return compiler()(tag)

    return compile_structural_tag


def _accepts(grammar: Any, ids: list[int], eos: int | None) -> bool:
    """The grammar accepts this reply token by token and then ends (at EOS), as constrained decoding would."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(grammar)
    mask = xgr.allocate_token_bitmask(1, grammar.tokenizer_info.vocab_size)
    # Through the token mask, as a decoding engine applies it (token budgets in the grammar live only there).
    def allowed(t: int) -> bool:
        matcher.fill_next_token_bitmask(mask)
        return bool(int(mask[0, t // 32]) & (1 << (t % 32)))

    if not all(allowed(t) and matcher.accept_token(t) for t in ids):
        return False
    if eos is not None and not matcher.is_terminated():
        return allowed(eos) and matcher.accept_token(eos) and matcher.is_terminated()
    return matcher.is_terminated()


def _certain(tok: int, top: int | None) -> tuple[TokenLogprob, ...] | None:
    """A scripted token is certain (logprob 0); its `top` - 1 alternatives are the next ids, each far less likely."""
    if top is None:
        return None
    alternatives = tuple((tok + j, -20.0 - j) for j in range(1, top))
    return (TokenLogprob(token_id=tok, logprob=0.0, top=((tok, 0.0), *alternatives) if top else ()),)


def _find(ids: list[int], seq: list[int], start: int) -> int:
    for i in range(start, len(ids) - len(seq) + 1):
        if ids[i : i + len(seq)] == seq:
            return i
    return -1


class ScriptedEngine:
    def __init__(
        self,
        rules: tuple[ScriptRule, ...],
        encode,
        eos_token_id: int | None,
        block_size: int,
        cache: ScriptedCache,
        publisher: KvEventPublisher | None = None,
        decode: Callable[[list[int]], str] | None = None,
        grammar: Callable[[str], Any] | None = None,
        reasoning_markers: tuple[str, str] | None = None,
        adapters: tuple[LoraAdapterSpec, ...] = (),
    ) -> None:
        self._rules = rules
        self._adapters: dict[str, tuple[LoraAdapterSpec, int]] = {}  # id -> (spec, int id as vLLM numbers them)
        for adapter in adapters:
            self._add(adapter)
        self._encode = encode
        self._decode = decode  # needed only to honour stop strings
        self._grammar = grammar  # structural tag -> compiled xgrammar grammar, to honour constraints
        # The reasoning block's (start, end) token ids, to honour thinking budgets as vLLM does.
        self._think = tuple(encode(m) for m in reasoning_markers) if reasoning_markers else None
        self._end_text = reasoning_markers[1] if reasoning_markers else ""
        self._eos = eos_token_id
        self._cache_spec = cache
        self._block_size = block_size
        self._cache = PrefixCache(cache.capacity_blocks, block_size, publisher.publish if publisher else None)
        self._hashes = PromptHashes(block_size)
        self._active = 0
        self._started = 0
        self._aborted = 0
        self._replies: dict[str, list[int]] = {}
        self._publisher = publisher  # KV events in vLLM's wire format, for the router's prefix index

    @classmethod
    def from_spec(
        cls,
        spec: EngineSpec,
        model_path: Path,
        *,
        reasoning_markers: tuple[str, str] | None = None,
        adapters: tuple[LoraAdapterSpec, ...] = (),
    ) -> "ScriptedEngine":
        tok = load_tokenizer(str(model_path))
        return cls(
            load_rules(spec),
            lambda text: tok.encode(text, add_special_tokens=False),
            tok.eos_token_id,
            spec.block_size,
            spec.cache,
            KvEventPublisher() if spec.kv_events else None,
            decode=lambda ids: tok.decode(ids, skip_special_tokens=False),
            grammar=_grammar_compiler(tok),
            reasoning_markers=reasoning_markers,
            adapters=adapters,
        )

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def kv_event_ports(self) -> tuple[int, int] | None:
        """(publish port, replay port) bound on all interfaces, or None without KV events."""
        p = self._publisher
        return (p.port, p.replay_port) if p is not None else None

    def stats(self) -> EngineStats:
        return EngineStats(self._active, self._started, self._aborted, len(self._cache))

    def kv_capacity_tokens(self) -> int | None:
        return self._cache_spec.capacity_blocks * self._block_size

    def _add(self, adapter: LoraAdapterSpec) -> bool:
        known = self._adapters.get(adapter.id)
        if known is not None:
            return already_loaded(known[0], adapter)
        self._adapters[adapter.id] = (adapter, len(self._adapters) + 1)
        return True

    async def load_adapter(self, adapter: LoraAdapterSpec) -> bool:
        return self._add(adapter)

    def adapters(self) -> tuple[LoraAdapterSpec, ...]:
        return tuple(spec for spec, _ in self._adapters.values())

    def _reply_tokens(
        self, match_text: str, structural_tag: str | None = None, adapter: str | None = None
    ) -> tuple[list[int], float] | None:
        """The first matching rule's reply (a rule naming an adapter matches under that adapter only); under a
        constraint, the first matching reply the grammar accepts (None: no rule's reply does), as a constrained
        engine could only have produced such a reply."""
        if structural_tag is not None and self._grammar is None:
            raise ValueError("this scripted engine has no grammar compiler: it cannot honour constraints")
        grammar = self._grammar(structural_tag) if structural_tag is not None else None
        for rule in self._rules:
            if rule.match in match_text and rule.adapter in (None, adapter):
                ids = self._replies.get(rule.reply)
                if ids is None:
                    ids = self._encode(rule.reply)
                    self._replies[rule.reply] = ids
                if grammar is not None and not _accepts(grammar, ids, self._eos):
                    continue
                return ids, rule.itl_ms
        return None if grammar is not None else ([], 0.0)

    def _stop_at(self, ids: list[int], stops: Sequence[str]) -> int | None:
        """Index of the token whose text completes the first stop string, as vLLM stops (None: no stop hit)."""
        if not stops:
            return None
        if self._decode is None:
            raise ValueError("this scripted engine has no decoder: it cannot honour stop strings")
        hit = lambda n: any(s in self._decode(ids[:n]) for s in stops)  # noqa: E731 - monotone in n
        if not hit(len(ids)):
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if hit(mid) else (mid + 1, hi)
        return lo - 1

    def _within_budget(self, ids: list[int], budget: int | None, started: bool) -> list[int]:
        """Reasoning cut at `budget` tokens and closed with the model's end marker, as vLLM's thinking budget does;
        the reply then goes on after its own end marker."""
        if budget is None or self._think is None:
            return ids
        start, end = self._think
        begin = 0 if started else _find(ids, start, 0)
        if begin < 0:
            return ids
        body = begin + (0 if started else len(start))
        after = self._end_of(ids, body, self._end_text)  # the end marker may merge with the text before it
        if after - body <= budget:
            return ids
        return ids[: body + budget] + end + ids[after:]

    def _end_of(self, ids: list[int], body: int, marker: str) -> int:
        """Index just past the token that completes `marker` after `body` (len(ids): never)."""
        if self._decode is None:
            raise ValueError("this scripted engine has no decoder: it cannot honour thinking budgets")
        hit = lambda n: marker in self._decode(ids[body:n])  # noqa: E731 - monotone in n
        if not hit(len(ids)):
            return len(ids)
        lo, hi = body + 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if hit(mid) else (mid + 1, hi)
        return lo

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]:
        self._active += 1
        self._started += 1
        finished = False
        kv = None
        try:
            lora = None
            if request.adapter is not None:
                if request.adapter not in self._adapters:
                    yield unknown_adapter(request, tuple(self._adapters))
                    finished = True
                    return
                lora = (request.adapter, self._adapters[request.adapter][1])
            found = self._reply_tokens(request.match_text, request.structural_tag, request.adapter)
            if found is None:
                yield EngineDelta(
                    token_ids=[], finish_reason="error", prompt_tokens=request.prompt_tokens, num_cached_tokens=0,
                    error="scripted engine: no scripted reply matching this request satisfies its constraint",
                )
                finished = True
                return
            reply, itl_ms = found
            reply = self._within_budget(reply, request.sampling.thinking_budget, request.reasoning_started)
            ids = list(reply)
            if self._eos is not None and not request.sampling.ignore_eos:
                ids.append(self._eos)
            stop_at = self._stop_at(ids, request.sampling.stop)
            if stop_at is not None:
                ids = ids[: stop_at + 1]  # the stop string ends the turn: nothing after it is generated
            limit = request.max_tokens
            out = ids[:limit]
            hashes = self._hashes.hashes(request.token_ids, request.adapter, request.cache_salt)
            kv = self._cache.admit(request.token_ids, hashes, out, lora, request.cache_salt)
            cached = kv.cached_tokens
            prefill_ms = (request.prompt_tokens - cached) * self._cache_spec.prefill_ms_per_token
            if prefill_ms > 0:
                await asyncio.sleep(prefill_ms / 1000)
            kv.compute(request.prompt_tokens)

            first = True
            for i, tok in enumerate(out):
                if not first:
                    kv.compute(request.prompt_tokens + i)  # this step computes the token sampled before
                    # One engine step per token: with itl 0 it still yields to the loop, as a real engine's steps
                    # do, so many streams interleave instead of one reply arriving in a single burst.
                    await asyncio.sleep(itl_ms / 1000 if itl_ms > 0 else 0)
                last = i == len(out) - 1
                reason = None
                if last:
                    reason = "stop" if i == len(ids) - 1 else "length"
                yield EngineDelta(
                    token_ids=[tok],
                    logprobs=_certain(tok, request.sampling.logprobs),
                    finish_reason=reason,
                    num_cached_tokens=cached if first else None,
                    prompt_tokens=request.prompt_tokens if first else None,
                )
                first = False
            if first:  # max_tokens == 0 or an empty script
                yield EngineDelta(
                    token_ids=[],
                    finish_reason="length" if ids else "stop",
                    num_cached_tokens=cached,
                    prompt_tokens=request.prompt_tokens,
                )
            finished = True
        finally:
            if kv is not None:
                kv.free()
            self._active -= 1
            if not finished:
                self._aborted += 1
