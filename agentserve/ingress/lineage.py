"""Session, parent session and request kind, from the harnesses' own headers: the one place that reads them.

Each harness names its session its own way (Claude Code `x-claude-code-session-id` with `-agent-id` /
`-parent-agent-id` for subagents; Codex `thread-id` or `session_id`, `x-codex-parent-thread-id`,
`x-openai-subagent`, `x-codex-turn-metadata`; OpenCode `x-session-id` / `x-parent-session-id`; DeepSeek Harness;
Dynamo's `x-dynamo-*`; agentserve's own `x-agentserve-*`). The tables below are data; `read_lineage` applies them
once per request and `classify` says what triggered it (user message, tool result, compaction, subagent spawn,
other). The result travels in the request's hints to the Preprocessor (memo and affinity keys), the Router
(placement: a compaction starts a new prefix, a subagent's first request goes where its parent is), the prefix
doctor and the request metrics.

    lineage = read_lineage(request.headers, body)
    gen = decode(..., session_id=lineage.session)
    gen = with_lineage(gen, lineage)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import BaseModel

from agentserve.ingress.harness_headers import (  # noqa: F401 (re-exported: the tables belong to lineage)
    CLAUDE_AGENT, CLAUDE_PARENT_AGENT, CODEX_SUBAGENT, CODEX_TURN_METADATA, CODEX_WINDOW, KIND_HEADER, PARENT_HEADERS, SESSION_HEADERS, METADATA_ALIASES,
)
from agentserve.protocol import GenerationRequest
from agentserve.protocol.conversation import Conversation, ToolResultBlock
from agentserve.protocol.requests import RequestKind

# What a compaction request says, by harness: Codex in its turn metadata or subagent header; both harnesses in
# the summarisation prompt they send as the conversation's last message (Claude Code always; Codex when the
# provider is not OpenAI's, i.e. here).
CODEX_COMPACTION_KINDS = frozenset({"compaction", "compact"})
COMPACTION_PROMPTS: tuple[str, ...] = (
    "Your task is to create a detailed summary of the conversation so far",  # Claude Code's /compact and auto-compact
    "You are performing a CONTEXT CHECKPOINT COMPACTION",  # Codex's compact/prompt.md
)
KINDS: tuple[RequestKind, ...] = ("user_message", "tool_result", "compaction", "subagent_spawn", "other")


@dataclass(frozen=True, slots=True)
class Lineage:
    """What the headers say of a request's place in its session tree (None: not said)."""

    harness: str = ""  # whose header named the session ("": none did)
    session: str | None = None
    parent: str | None = None  # the session that spawned this one
    subagent: bool = False  # a harness marked the request as a subagent's
    compaction: bool = False  # a harness marked the request as a compaction
    window: int | None = None  # Codex's context window generation (`x-codex-window-id` = thread:generation)
    declared_kind: RequestKind | None = None  # x-agentserve-request-kind


def _client_metadata(body: Any) -> Mapping[str, Any]:
    if body is None:
        return {}
    raw = getattr(body, "client_metadata", None)
    if raw is None and isinstance(body, BaseModel) and body.model_extra:
        raw = body.model_extra.get("client_metadata")
    return raw if isinstance(raw, Mapping) else {}


def _lookup(headers: Mapping[str, str], metadata: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = metadata.get(name, metadata.get(METADATA_ALIASES.get(name, name)))
    if value is None or not isinstance(value, (str, int)):
        return None
    value = str(value).strip()
    return value or None


def _turn_metadata(raw: str | None) -> Mapping[str, Any]:
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}  # an opaque value (older builds): carries nothing we read
    return parsed if isinstance(parsed, dict) else {}


def _window(raw: str | None) -> int | None:
    if not raw or ":" not in raw:
        return None
    generation = raw.rsplit(":", 1)[1]
    return int(generation) if generation.isdigit() else None


def read_lineage(headers: Mapping[str, str], body: Any = None) -> Lineage:
    """The session, parent and harness markers of one request, from its headers (and Codex's `client_metadata`).
    Malformed optional values are ignored: they only ever refine placement and metrics."""
    metadata = _client_metadata(body)
    harness, session = "", None
    for name, who in SESSION_HEADERS:
        session = _lookup(headers, metadata, name)
        if session is not None:
            harness = who
            break
    parent = next((p for p in (_lookup(headers, metadata, h) for h in PARENT_HEADERS) if p is not None), None)
    turn = _turn_metadata(_lookup(headers, metadata, CODEX_TURN_METADATA))
    if parent is None and isinstance(turn.get("parent_thread_id"), str) and turn["parent_thread_id"]:
        parent = turn["parent_thread_id"]
    codex_subagent = (_lookup(headers, metadata, CODEX_SUBAGENT) or "").lower()
    request_kind = str(turn.get("request_kind") or "").lower()
    compaction = request_kind in CODEX_COMPACTION_KINDS or codex_subagent in CODEX_COMPACTION_KINDS
    subagent = (bool(codex_subagent) and not compaction) or turn.get("thread_source") == "subagent" or (
        request_kind.startswith("subagent")
    )
    agent = _lookup(headers, {}, CLAUDE_AGENT)
    if agent and session is not None and harness == "claude-code":
        # A Claude Code subagent shares its session id with the main thread: its own thread is the agent.
        parent_agent = _lookup(headers, {}, CLAUDE_PARENT_AGENT)
        parent = parent or (f"{session}/{parent_agent}" if parent_agent else session)
        session = f"{session}/{agent}"
        subagent = True
    declared = (headers.get(KIND_HEADER) or "").strip().lower()
    return Lineage(
        harness=harness,
        session=session,
        parent=parent,
        subagent=subagent or parent is not None,
        compaction=compaction,
        window=_window(_lookup(headers, metadata, CODEX_WINDOW)),
        declared_kind=declared if declared in KINDS else None,  # type: ignore[arg-type]
    )


def _since_last_assistant(conversation: Conversation) -> list:
    tail = []
    for turn in reversed(conversation.turns):
        if turn.role == "assistant":
            break
        tail.append(turn)
    return tail


def classify(conversation: Conversation, lineage: Lineage) -> RequestKind:
    """What triggered this request: a compaction (a harness marker, or its summarisation prompt after the last
    assistant turn), a subagent's first request, a tool result, a user message, else other."""
    if lineage.declared_kind is not None:
        return lineage.declared_kind
    tail = _since_last_assistant(conversation)
    if lineage.compaction or any(p in turn.text() for turn in tail for p in COMPACTION_PROMPTS):
        return "compaction"
    if not tail:
        return "other"  # the conversation ends with the assistant: a continuation, not a new turn
    if lineage.subagent and len(tail) == len(conversation.turns):
        return "subagent_spawn"  # no assistant turn yet: the subagent's task as its parent handed it over
    if any(isinstance(b, ToolResultBlock) for turn in tail for b in turn.blocks) or any(t.role == "tool" for t in tail):
        return "tool_result"
    return "user_message" if any(t.role == "user" for t in tail) else "other"


def with_lineage(gen: GenerationRequest, lineage: Lineage) -> GenerationRequest:
    """The decoded request with its kind and parent session in its hints (the session itself the decoder took)."""
    kind = classify(gen.conversation, lineage)
    update: dict[str, Any] = {"kind": kind}
    if lineage.parent is not None and gen.hints.parent_session_id is None:
        update["parent_session_id"] = lineage.parent
    return gen.model_copy(update={"hints": gen.hints.model_copy(update=update)})
