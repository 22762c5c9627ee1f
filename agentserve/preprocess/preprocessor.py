"""Preprocessor: GenerationRequest -> Preprocessed (render, tokenize, hash blocks), split by consumer."""

from __future__ import annotations

import hashlib
import json
import time
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from agentserve.config import ModelSpec
from agentserve.kv_events.block_hash import cache_salt, root
from agentserve.preprocess import tool_changes
from agentserve.preprocess.constrain import ReasoningMarkers, structural_tag
from agentserve.preprocess.constrain import check as check_constraint
from agentserve.preprocess.images import image_bytes, probe_placeholder
from agentserve.preprocess.incremental import (
    KnownPrompt, PromptMemo, WindowProbe, extend_blocks, new_roles, probe_roles, rebuild, window, window_tail,
)
from agentserve.preprocess.literal_text import LiteralGuard
from agentserve.preprocess.normalize import sort_tools
from agentserve.preprocess.placement import Placement, placement_for
from agentserve.preprocess.render import plan_messages
from agentserve.preprocess.replay import policy_for
from agentserve.preprocess.splice import SpanMemo, Spliced, TurnSlot, splice
from agentserve.preprocess.template_caps import inspect_template
from agentserve.preprocess.template_kwargs import TemplateKwargs
from agentserve.preprocess.template_render import BudgetedTemplate, OutputTooLong, RenderBudget, RenderBudgetExceeded
from agentserve.preprocess.thinking_switch import probe as probe_thinking_switch
from agentserve.preprocess.tokenizer import load_tokenizer
from agentserve.preprocess.turn_digest import TurnChains, header_digest, kept_key
from agentserve.protocol import (
    Conversation,
    EngineRequest,
    GenerationRequest,
    Preprocessed,
    PromptReport,
    RouteRequest,
    SamplingParams,
    TextBlock,
    ToolCallBlock,
    ToolSpec,
    Turn,
    caller_session,
)
from agentserve.protocol.errors import ContextWindowExceeded, RequestError
from agentserve.protocol.token_ids import packed
from agentserve.state.kept_turns import KeptTurnStore, token_digest


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    text: str  # the rendered text; extended from a kept prompt: only what was rendered after it
    token_ids: array  # packed (protocol/token_ids.py): shared from here to the engine, never mutated
    reordered_turns: int = 0
    spliced: Spliced | None = None  # kept turns placed as generated (None: no splicing was tried)
    # The kept turn this prompt continues and where its tail starts in token_ids (KeptTurn.base / tail; None: the
    # prompt is not stored as a link, e.g. a long prompt in which nothing was spliced).
    base: str = ""
    tail_from: int | None = None
    known: KnownPrompt | None = None  # the prompt it extends (its block hashes are not computed again)
    images: tuple[str, ...] = ()  # the images' URLs, in the order of their placeholders in token_ids


@dataclass(frozen=True, slots=True)
class ReplayKeys:
    """A conversation's kept-turn keys: per conversation turn index that may be spliced, and the whole's digest."""

    slots: dict[int, str]
    prefix: str  # digest of the whole conversation: the ingress keeps the turn that follows under it


def _message_digests(messages: list[dict[str, Any]], tools: Any, kwargs: dict[str, Any]) -> list[bytes]:
    """digests[n] names the first n messages rendered with these tools and template switches."""
    h = hashlib.blake2b(json.dumps([tools, kwargs], sort_keys=True, default=str).encode(), digest_size=16).digest()
    out = [h]
    for m in messages:
        h = hashlib.blake2b(h + json.dumps(m, sort_keys=True, default=str).encode(), digest_size=16).digest()
        out.append(h)
    return out


def _has_assistant(request: GenerationRequest) -> bool:
    return any(t.role == "assistant" for t in request.conversation.turns[:-1])


def _longest_token_chars(tokenizer: Any) -> int:
    """An upper bound on the characters one token stands for: a rendering longer than the window times this cannot
    fit the window, whatever it tokenizes to (vocabulary strings are at least as long as the text they decode to)."""
    try:
        return max(1, max(map(len, tokenizer.get_vocab())))
    except (AttributeError, TypeError, ValueError):
        return 1024


class Preprocessor:
    def __init__(
        self,
        model: ModelSpec,
        model_path: str,
        block_size: int,
        *,
        sort_tools: bool = False,
        kept: KeptTurnStore | None = None,  # kept turns to splice back (None: every turn is re-rendered)
        incremental: bool = True,  # a session's next turn extends its kept prompt (preprocess/incremental.py)
        memo_bytes: int = 256 << 20,  # the prompts this replica made, kept for that (bytes)
        clamp_max_tokens: bool = True,  # max_tokens past the window: cut to what is left (False: refuse)
        scripted: bool = False,  # the engine is the scripted test double: requests carry the text its rules match
        cache_isolation: str = "shared",  # "per_key": each caller's prompts get their own prefix-cache partition
        render_budget: RenderBudget = RenderBudget(),  # one render's wall clock and output cap
    ) -> None:
        self._model = model
        self._isolate = cache_isolation == "per_key"
        self._scripted = scripted
        self._clamp = clamp_max_tokens
        self._kept = kept
        self._spans = SpanMemo()  # where earlier turns sit in their renderings, so each is rendered once
        self._incremental = incremental  # (with kept turns only)
        self._prompts = PromptMemo(memo_bytes)
        self._chains = TurnChains(memo_bytes // 8)
        self._windows = WindowProbe(self._probe_window)
        self._sort_tools = sort_tools
        self._tok = load_tokenizer(model_path)
        self._block_size = block_size
        self._policy = policy_for(model.reasoning_parser, model.replay_family)
        self._caps = inspect_template(self._tok.chat_template or "")
        special = getattr(self._tok, "special_tokens_map", {}) or {}
        self._template = BudgetedTemplate(self._tok.chat_template or "", special, render_budget)
        self._client_kwargs = TemplateKwargs(self._caps, special)
        # Past this many characters a rendering cannot fit the window: refused before it is tokenized.
        self._token_chars = _longest_token_chars(self._tok)
        self._window_chars = model.context_window * self._token_chars
        # The template's thinking on/off variable, whatever it is called (None: it has none).
        self._switch = probe_thinking_switch(
            lambda kw: self._template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True, **kw),
            self._caps.variables,
            open_marker=self._policy.think_open.strip(),
            close_marker=self._policy.think_close.strip(),
        )
        self._literals = LiteralGuard(self._tok)  # special-token text in client content stays text
        self._image_placeholder = self._image_slot(model)  # None: the model reads no images
        # Where this template takes later system messages and text beside tool results (probed once per template).
        self._placement = placement_for(self._tok.chat_template or "", self._policy.family, self._probe_text)
        # What else decides a rendering: a kept prompt made under another template or setting is not this one's.
        self._render_id = "\x00" + hashlib.blake2b(
            repr((self._tok.chat_template or "", self._policy.family, sort_tools, self._placement)).encode(),
            digest_size=8,
        ).hexdigest()
        added = getattr(self._tok, "added_tokens_decoder", {}) or {}
        self._end_tokens = {i: t.content for i, t in added.items()}  # a kept turn ends with one of these

    def _image_slot(self, model: ModelSpec) -> str | None:
        """What the template renders for one image, for a model that declares image input: its ModelSpec's, else
        probed from the template; a vision model whose template has no image slot is refused at start."""
        if "image" not in model.input_modalities:
            return None
        found = model.image_placeholder or probe_placeholder(
            lambda msgs: self._template.render(msgs, add_generation_prompt=False))
        if not found:
            raise ValueError(f"model {model.id!r} declares image input, but its chat template renders no image "
                             "placeholder for an image content part: set its `image_placeholder`")
        return found

    def _probe_text(self, conversation: Conversation, placement: Placement, add_generation_prompt: bool) -> str:
        """A probe conversation rendered by the template as requests are (thinking as by default)."""
        plan = plan_messages(conversation, self._policy, self._caps, placement)
        return self._template.render(
            plan.messages,
            tools=[t.openai_schema() for t in conversation.tools] or None,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs({}, None),
        )

    def _probe_window(self, tools: bool, kwargs: dict[str, Any], end_token: str) -> frozenset[frozenset[str]]:
        """incremental.probe_roles for this template, with a tool or none, under these switches."""
        schemas = [ToolSpec(name="probe", description="A probe.", parameters={
            "type": "object", "properties": {"n": {"type": "integer"}}}).openai_schema()] if tools else None

        def plan(turns: list[Turn]) -> tuple[list[dict[str, Any]], tuple[tuple[int, int], ...]]:
            p = plan_messages(Conversation(turns=tuple(turns)), self._policy, self._caps, self._placement)
            return p.messages, p.turn_spans

        return probe_roles(plan, self._renderer(schemas, kwargs), end_token)

    def probe_windows(self) -> None:
        """Probe the template's window rules (incremental.WindowProbe) for the settings requests take by default
        (tools or none; thinking as by default, on, off; each token the template ends an assistant turn with), as
        a replica starts: else the first long session a new replica sees pays them (~4 ms) on its first turn."""
        if self._kept is None or not self._incremental:
            return
        for end in self._turn_end_tokens():
            for tools in (True, False):
                for thinking in (None, True, False):
                    self._windows.cleared(tools, self._with_defaults({}, thinking), end)

    def _turn_end_tokens(self) -> list[str]:
        """The last special token of an assistant turn's rendering, for a turn of text and one of a tool call: what a
        generated turn ends with, and so where a kept turn's window is cut."""
        user = Turn(role="user", blocks=(TextBlock(text="Probe question?"),))
        specials = [t for t in set(self._end_tokens.values()) if t]
        found: list[str] = []
        for block in (TextBlock(text="Probe answer."), ToolCallBlock(id="call_probe", name="probe", arguments="{}")):
            tools = (ToolSpec(name="probe", parameters={"type": "object"}),) if isinstance(block, ToolCallBlock) else ()
            turns = (user, Turn(role="assistant", blocks=(block,)))
            try:
                before = self._probe_text(Conversation(turns=turns[:1], tools=tools), self._placement, True)
                through = self._probe_text(Conversation(turns=turns, tools=tools), self._placement, False)
            except Exception:  # noqa: BLE001 - a template that cannot render the probe: requests will probe
                continue
            # The turn's own rendering: past its generation prompt, or (a template that renders a finished turn's
            # opening otherwise) past the question.
            turn = through[len(before):] if through.startswith(before) else through[through.rfind("Probe question?"):]
            ends = [(turn.rfind(t) + len(t), t) for t in specials if t in turn]
            if ends and max(ends)[1] not in found:
                found.append(max(ends)[1])
        return found

    def template_kwargs(self, client: dict[str, Any], thinking: bool | None) -> dict[str, Any]:
        """Thinking on by default where the model reasons; never override what the client set. The client's own
        kwargs must be variables of the model's template (a 400 naming the key otherwise: template_kwargs.py)."""
        return self._with_defaults(self._client_kwargs.check(client), thinking)

    def _with_defaults(self, client: dict[str, Any], thinking: bool | None) -> dict[str, Any]:
        kwargs = dict(client)
        if self._model.reasoning_parser is None:
            return kwargs
        if self._switch is not None and self._caps.accepts(self._switch.name):
            kwargs.setdefault(self._switch.name, self._switch.on if thinking is not False else self._switch.off)
        switch = self._policy.disable if thinking is False else self._policy.enable
        for name, value in switch.items():
            if self._caps.accepts(name):
                kwargs.setdefault(name, value)
        return kwargs

    def render(
        self,
        conversation: Conversation,
        template_kwargs: dict[str, Any] | None = None,
        *,
        add_generation_prompt: bool = True,
        thinking: bool | None = None,
        replay: ReplayKeys | None = None,
        space: tuple[str | None, str | None] = (None, None),  # (adapter, cache salt): what seeds the block hashes
    ) -> RenderedPrompt:
        conversation = tool_changes.inline(conversation)
        if self._sort_tools:
            conversation = sort_tools(conversation)
        client_kwargs = self._client_kwargs.check(template_kwargs or {})
        # Every client string is shielded before the replay policy and the template add their own markers.
        conversation, tools, client_kwargs, shield = self._literals.shield(
            conversation, [t.openai_schema() for t in conversation.tools] or None, client_kwargs
        )
        plan = plan_messages(conversation, self._policy, self._caps, self._placement, self._image_placeholder)
        kwargs = self._with_defaults(client_kwargs, thinking)
        apply = self._renderer(tools, kwargs)
        if replay is not None and replay.slots and self._kept is not None:
            if self._incremental:
                extended = self._extend(plan, tools is not None, kwargs, shield, apply, replay, add_generation_prompt,
                                        space)
                if extended is not None:
                    return extended
            return self._splice(plan, tools, kwargs, shield, apply, replay, add_generation_prompt)
        text = apply(plan.messages, add_generation_prompt)
        ids = packed(self._literals.encode(text, shield))
        # A first turn is a session's root link (its whole prompt); a later one with nothing spliced stores none.
        tail_from = 0 if not any(m.get("role") == "assistant" for m in plan.messages) else None
        return RenderedPrompt(
            self._literals.restore(text, shield), ids, plan.reordered_turns, tail_from=tail_from, images=plan.images
        )

    def _renderer(self, tools: Any, kwargs: dict[str, Any]) -> Callable[[list[dict[str, Any]], bool], str]:
        """render(messages, generation_prompt) under one budget for all of this request's renders."""
        deadline = time.monotonic() + self._template.budget.deadline_s

        def apply(msgs: list[dict[str, Any]], generation_prompt: bool) -> str:
            try:
                return self._template.render(
                    msgs, tools=tools, add_generation_prompt=generation_prompt, max_chars=self._window_chars,
                    deadline=deadline, **kwargs,
                )
            except OutputTooLong as exc:
                if self._window_chars <= self._template.budget.max_chars:  # provably past the window
                    raise ContextWindowExceeded(exc.chars // self._token_chars, self._model.context_window) from None
                raise RenderBudgetExceeded(f"the rendered prompt passed the render budget of "
                                           f"{self._template.budget.max_chars} characters") from None
            except RequestError:
                raise
            except Exception as exc:  # jinja errors name the bad input; don't turn them into a 500
                raise RequestError("invalid_request", f"cannot render the chat template: {exc}") from exc

        return apply

    def _splice(
        self,
        plan: Any,
        tools: Any,
        kwargs: dict[str, Any],
        shield: Any,
        apply: Callable[[list[dict[str, Any]], bool], str],
        replay: ReplayKeys,
        add_generation_prompt: bool,
    ) -> RenderedPrompt:
        """The full path: the whole conversation rendered, every kept turn placed where its rendering sits."""
        assert self._kept is not None
        messages = plan.messages
        text = apply(messages, add_generation_prompt)
        # Renderings are remembered by what was rendered; a shield's markers carry a per-render nonce: not then.
        marks = _message_digests(messages, tools, kwargs) if shield is None else None
        slots = []
        for t, key in sorted(replay.slots.items()):
            start, end = plan.turn_spans[t]
            slots.append(TurnSlot(start, end, key, marks[start] + marks[end] if marks else b""))
        kept = self._kept.get_many([s.key for s in slots])
        spliced = splice(
            text,
            slots,
            kept,
            render=lambda n, gen: apply(messages[:n], gen),
            encode=lambda piece: self._literals.encode(piece, shield),
            token_text=lambda tid: self._end_tokens.get(tid, ""),
            memo=self._spans,
        )
        self._kept.touch(spliced.used)
        ids = spliced.token_ids
        base, tail_from = (spliced.base, spliced.base_end) if spliced.base else ("", None)
        return RenderedPrompt(
            self._literals.restore(text, shield), ids, plan.reordered_turns, spliced, base=base, tail_from=tail_from,
            images=plan.images,
        )

    def _extend(
        self,
        plan: Any,
        tools: bool,
        kwargs: dict[str, Any],
        shield: Any,
        apply: Callable[[list[dict[str, Any]], bool], str],
        replay: ReplayKeys,
        add_generation_prompt: bool,
        space: tuple[str | None, str | None],
    ) -> RenderedPrompt | None:
        """The kept prompt of the conversation's last assistant turn, its output, and the window's rendering of what
        followed (preprocess/incremental.py); None where the full path must decide."""
        assert self._kept is not None
        turn_index = max(replay.slots)
        key = replay.slots[turn_index]
        start, end = plan.turn_spans[turn_index]
        if end <= start:
            return None
        last = self._kept.get_many([key]).get(key)
        if last is None or not last.output_ids:
            return None
        end_token = self._end_tokens.get(last.output_ids[-1], "")
        if not end_token:
            return None
        if new_roles(plan.messages, end) not in self._windows.cleared(tools, kwargs, end_token):
            return None
        known = self._prompts.get(last.prompt_digest, space)
        if known is None:
            links = self._kept.get_many([k for k in replay.slots.values() if k != key])
            links[key] = last
            ids = rebuild(last, links)
            if ids is None:
                return None
            known = KnownPrompt(ids)
        msgs, at = window(plan.messages, start)
        tail = window_tail(msgs, at, at + (end - start), end_token, apply, add_generation_prompt)
        if tail is None:
            return None
        prefix = len(known.ids) + len(last.output_ids)
        ids = array("I", known.ids)
        ids.extend(last.output_ids)
        ids.extend(self._literals.encode(tail, shield))
        self._kept.touch(list(replay.slots.values()))  # the whole chain stays, for a replica that rebuilds it
        # "extended": the earlier turns are as the kept prompt has them; the last one is spliced.
        spliced = Spliced(ids, Counter({"spliced": 1, "extended": 1}), last_rerendered=False, used=[key])
        return RenderedPrompt(
            self._literals.restore(tail, shield), spliced.token_ids, plan.reordered_turns, spliced,
            base=key, tail_from=prefix, known=known, images=plan.images,
        )

    def replay_keys(self, request: GenerationRequest, scope: str, adapter: str | None = None) -> ReplayKeys:
        """Keys of the request's earlier assistant turns (those followed by another turn) and of the whole; a
        LoRA adapter's turns are kept apart from the base model's (its tokens are its own)."""
        conv = request.conversation
        served = self._model.id if adapter is None else f"{self._model.id}\x00lora\x00{adapter}"
        header = header_digest(scope + self._render_id, served, conv, request.template_kwargs, request.thinking)
        digests = self._chains.chain(header, conv.turns)
        slots = {
            i: kept_key(digests[i])
            for i, turn in enumerate(conv.turns[:-1])
            if turn.role == "assistant" and turn.blocks
        }
        return ReplayKeys(slots, kept_key(digests[-1] if digests else header))

    def preprocess(self, request: GenerationRequest, scope: str = "", adapter: str | None = None) -> Preprocessed:
        """`scope` is the caller's identity: kept turns are never shared across callers. `adapter`: the LoRA
        adapter id that serves the request (None: the base model); it seeds the block hashes."""
        keys = self.replay_keys(request, scope, adapter) if self._kept is not None else None
        thinking = False if request.reasoning_effort == "none" else request.thinking
        salt = cache_salt(scope) if self._isolate else None  # the engine's cache and the router's hashes agree
        prompt = self.render(
            request.conversation, request.template_kwargs, thinking=thinking, replay=keys, space=(adapter, salt)
        )
        n = len(prompt.token_ids)
        window = self._model.context_window
        if n >= window:  # not even one output token fits
            raise ContextWindowExceeded(n, window)
        vocab = len(self._tok)
        bad = [t for t, _ in request.sampling.logit_bias if t >= vocab]
        if bad:
            raise RequestError(
                "invalid_request", f"logit_bias names token ids outside the vocabulary (size {vocab}): {bad[:5]}",
                param="logit_bias",
            )
        requested = request.sampling.max_tokens
        left = window - n
        if requested is not None and requested > left and not self._clamp:
            raise ContextWindowExceeded(n, window, requested)
        cap = self._model.max_output_tokens
        limit = left if cap is None else min(left, cap)  # the server's cap is always granted, never refused
        max_tokens = limit if requested is None else min(requested, limit)
        clamped = requested is not None and requested > max_tokens
        opener = self._policy.think_open.strip()
        reasoning_started = bool(opener) and prompt.text.rstrip().endswith(opener)
        session = request.session_key()
        # Built from this replica's own tokens and hashes: validated by construction, not element by element (at
        # 187K tokens pydantic's check of every id and block hash cost ~2.5 ms a request).
        engine = EngineRequest.model_construct(
            request_id=request.request_id,
            model=self._model.id,
            token_ids=prompt.token_ids,
            adapter=adapter,
            cache_salt=salt,
            sampling=self._with_thinking_budget(request, thinking),
            max_tokens=max_tokens,
            priority=request.hints.priority,
            reasoning_started=reasoning_started,
            structural_tag=self._structural_tag(request, reasoning_started),
            match_text=request.conversation.last_user_text() if self._scripted else "",
            images=tuple(image_bytes(url, i) for i, url in enumerate(prompt.images)),
            trace=request.hints.trace,
        )
        route = RouteRequest.model_construct(
            request_id=request.request_id,
            model=self._model.id,
            block_hashes=self._block_hashes(prompt, adapter, salt),
            prompt_tokens=n,
            max_tokens=max_tokens,
            hints=request.hints,
            # The router's affinity is per caller too: another key naming this session id cannot steer it.
            session_key=caller_session(scope, session),
            parent_session_key=caller_session(scope, request.hints.parent_session_id or ""),
            tenant=scope,
            continues=any(t.role == "assistant" for t in request.conversation.turns),
        )
        report = PromptReport(
            requested_max_tokens=requested if clamped else None,
            capped_by_server=cap is not None and max_tokens == cap and (requested is None or requested > cap),
            parse_reasoning=request.thinking is not False,
            session_key=session,
            replay_reordered=prompt.reordered_turns,
            replay_prefix=keys.prefix if keys is not None else "",
            replay_outcomes=tuple(sorted(prompt.spliced.outcomes.items())) if prompt.spliced else (),
            replay_last_rerendered=prompt.spliced.last_rerendered if prompt.spliced else _has_assistant(request),
            replay_base=prompt.base,
            replay_tail_from=prompt.tail_from,
        )
        return Preprocessed(engine=engine, route=route, report=report)

    def _block_hashes(self, prompt: RenderedPrompt, adapter: str | None, salt: str | None) -> list[int]:
        """The prompt's block hashes, the blocks of the prompt it extends not hashed again; the prompt is remembered
        for the session's next turn (incremental.PromptMemo) when it may be extended."""
        known = prompt.known or KnownPrompt(array("I"))
        blocks, hashes = extend_blocks(known, prompt.token_ids, self._block_size, root(adapter, salt))
        if self._incremental and self._kept is not None and prompt.tail_from is not None:
            ids = prompt.token_ids
            self._prompts.put(token_digest(ids), (adapter, salt), KnownPrompt(ids, blocks, hashes))
        return list(hashes)

    def _with_thinking_budget(self, request: GenerationRequest, thinking: bool | None) -> SamplingParams:
        """The engine's thinking budget: the client's, else the model's for the effort asked; 0 with thinking off
        (the engine ends any reasoning at once, whether or not the template could switch it off)."""
        sampling = request.sampling
        if self._model.reasoning_parser is None:  # nothing to budget; the engine has no reasoning markers
            return sampling.model_copy(update={"thinking_budget": None}) if sampling.thinking_budget is not None else sampling
        budget = sampling.thinking_budget
        if thinking is False:
            budget = 0
        elif budget is None and request.reasoning_effort is not None:
            budget = self._model.reasoning_budgets.get(request.reasoning_effort)
        return sampling if budget == sampling.thinking_budget else sampling.model_copy(update={"thinking_budget": budget})

    def _structural_tag(self, request: GenerationRequest, reasoning_started: bool) -> str | None:
        """The grammar for tool choice / strict tools / output format, reasoning left free (preprocess/constrain.py)."""
        asked = request.thinking is True or request.reasoning_effort not in (None, "none")
        if request.thinking is False or request.reasoning_effort == "none" or self._model.reasoning_parser is None:
            mode = "off"
        elif reasoning_started:
            mode = "open"
        else:
            # The model may open a reasoning block first if it reasons on its own (its template switches thinking)
            # or the client asked for reasoning; otherwise the constrained answer starts at once.
            mode = "optional" if self._switch is not None or asked else "off"
        budget = request.sampling.thinking_budget
        if budget is None and request.reasoning_effort is not None:
            budget = self._model.reasoning_budgets.get(request.reasoning_effort)
        markers = ReasoningMarkers(
            mode, self._policy.think_open.strip(), self._policy.think_close.strip(), max_tokens=budget
        )
        tag = structural_tag(
            request.conversation, request.output_format, tool_call_parser=self._model.tool_call_parser, reasoning=markers
        )
        if tag is not None:
            check_constraint(tag, request.conversation, request.output_format)
        return tag

    def tokenize_text(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens)
