"""A session's next turn at the cost of what it added: the previous prompt as tokens, only the new turns rendered.

With kept turns (splice.py), turn N+1's prompt is turn N's prompt, then turn N's output as generated, then the
template's rendering of what came after (tool results, a user message, the generation prompt). The full path
renders the whole conversation and checks every earlier turn against it; its cost grows with the conversation.
This path reaches the same ids from three parts, none of which grows with the history:

1. turn N's prompt: this replica's `PromptMemo` (by the prompt's token digest, which the kept turn carries), else
   rebuilt from the kept turns themselves, each of which stores its prompt as a link to the turn before it
   (`KeptTurn.base` / `tail`; one read of the conversation's keys, linear in the prompt's length);
2. turn N's output: the kept turn;
3. the rendering after turn N's end token, from a short window of the conversation: its leading system messages,
   the last user message before turn N, turn N and what follows. A template that renders a message from its
   neighbours only (every family here) gives the window's tail exactly as the whole conversation's.

The full path stays the reference. Whether the window's tail equals the whole rendering's, and whether the new
turns leave the earlier rendering as it was (Qwen3-style templates drop earlier reasoning once a new user query
arrives), depends on the template and on which roles the new turns have: `WindowProbe` finds out once per template
setting with probe conversations, and a request whose new turns have a role the probe did not clear takes the full
path. Each request also checks its own window as the splice does (the turn's rendering starts with the generation
prompt it followed, and the window's rendering reads as the turn's up to its end token).
"""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from agentserve.bytes_lru import BytesLRU
from agentserve.kv_events.block_hash import chain_digests, digest_value
from agentserve.preprocess.template_render import RenderBudgetExceeded
from agentserve.state.kept_turns import KeptTurn, token_digest

# Block digests of a prompt, 8 bytes each, concatenated (kv_events/block_hash.py's chain).
_BLOCK = 8


@dataclass(frozen=True, slots=True)
class KnownPrompt:
    """A prompt this replica made: its ids, and the chain digests of its full blocks and their hash values."""

    ids: array  # array("I")
    blocks: bytes = b""
    hashes: tuple[int, ...] = ()  # block_hash.digest_value of each digest: what RouteRequest carries

    @property
    def nbytes(self) -> int:
        return len(self.ids) * self.ids.itemsize + len(self.blocks) + 40 * len(self.hashes)


def extend_blocks(known: KnownPrompt, ids: Sequence[int], block_size: int, root: bytes) -> tuple[bytes, tuple[int, ...]]:
    """Chain digests and hash values of `ids`' full blocks, reusing `known`'s (a prefix of `ids`)."""
    done = len(known.blocks) // _BLOCK
    parent = known.blocks[-_BLOCK:] if done else root
    start = done * block_size
    rest = chain_digests(ids[start:], block_size, parent)
    return known.blocks + b"".join(rest), known.hashes + tuple(digest_value(d) for d in rest)


class PromptMemo:
    """(token digest, cache space) -> KnownPrompt, LRU bounded in bytes; shared by the preprocessor's threads. The
    space (adapter, cache salt) is what seeds the block hashes: the same ids in two spaces hash apart."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self._lru: BytesLRU[tuple[bytes, Hashable], KnownPrompt] = BytesLRU(max_bytes)

    def get(self, digest: bytes, space: Hashable) -> KnownPrompt | None:
        return self._lru.get((digest, space))

    def put(self, digest: bytes, space: Hashable, prompt: KnownPrompt) -> None:
        self._lru.put((digest, space), prompt, prompt.nbytes)

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes


def rebuild(last: KeptTurn, kept: dict[str, KeptTurn]) -> array | None:
    """The prompt `last` was generated after, from the links of the kept turns (None: a link is missing, was not
    stored, or the ids do not hash to the digest `last` keeps)."""
    chain = [last]
    while chain[-1].base:
        nxt = kept.get(chain[-1].base)
        if nxt is None or len(chain) > len(kept):
            return None
        chain.append(nxt)
    if any(k.tail is None for k in chain):
        return None
    ids = array("I")
    for i, k in enumerate(reversed(chain)):
        ids.extend(k.tail)  # type: ignore[arg-type]
        if i < len(chain) - 1:
            ids.extend(k.output_ids)
    return ids if token_digest(ids) == last.prompt_digest else None


def window(messages: list[dict[str, Any]], start: int) -> tuple[list[dict[str, Any]], int]:
    """The messages a turn starting at `start` is rendered among for its tail: the leading system messages, the last
    user message before it, and everything from `start` on; and where the turn starts in them."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
        lead += 1
    head = list(messages[: min(lead, start)])
    for i in range(start - 1, lead - 1, -1):
        if messages[i].get("role") == "user":
            head.append(messages[i])
            break
    return head + list(messages[start:]), len(head)


def window_tail(
    msgs: list[dict[str, Any]],
    at: int,
    through: int,
    end_token: str,
    render: Callable[[list[dict[str, Any]], bool], str],
    add_generation_prompt: bool,
) -> str | None:
    """The rendering after the end token of the assistant turn at msgs[at:through] of a window (None: the window
    does not read as the splice needs: the turn's rendering does not start with its generation prompt, the end
    token is not found, or the rendering with the new turns changes the turn's)."""
    try:
        before = render(msgs[:at], True)
        turn = render(msgs[:through], False)
        whole = render(msgs, add_generation_prompt)
    except RenderBudgetExceeded:  # the request's render budget is spent: its 400, not one more render
        raise
    except Exception:  # noqa: BLE001 - a window the template refuses: the full path decides
        return None
    if not turn.startswith(before):
        return None
    cut = turn.rfind(end_token, len(before))
    if cut < 0:
        return None
    cut += len(end_token)
    if whole[:cut] != turn[:cut]:
        return None
    return whole[cut:]


def new_roles(messages: list[dict[str, Any]], end: int) -> frozenset[str]:
    return frozenset(str(m.get("role")) for m in messages[end:])


class WindowProbe:
    """Which sets of roles of new turns keep the template's earlier rendering and render in a window as in the
    whole conversation, per template setting (tools or none, the template switches, the turn's end token); probed
    once each, on first use."""

    def __init__(self, probe: Callable[[bool, dict[str, Any], str], frozenset[frozenset[str]]]) -> None:
        self._probe = probe
        self._cleared: dict[tuple[bool, str, str], frozenset[frozenset[str]]] = {}
        self._lock = threading.Lock()

    def cleared(self, tools: bool, kwargs: dict[str, Any], end_token: str) -> frozenset[frozenset[str]]:
        key = (tools, repr(sorted(kwargs.items())), end_token)
        with self._lock:
            found = self._cleared.get(key)
        if found is None:
            found = self._probe(tools, kwargs, end_token)
            with self._lock:
                self._cleared[key] = found
        return found


def probe_roles(
    plan: Callable[[list[Any]], tuple[list[dict[str, Any]], tuple[tuple[int, int], ...]]],
    render: Callable[[list[dict[str, Any]], bool], str],
    end_token: str,
) -> frozenset[frozenset[str]]:
    """The sets of roles whose arrival after an assistant turn the window renders exactly (module docstring).

    `plan(turns)` -> (messages, per-turn spans) as requests are planned; `render(messages, generation_prompt)` with
    the setting probed. Each probe is a conversation with reasoning, tool calls and results before the turn; a role
    is cleared when every probe whose new turns include it gives, by the window, the whole rendering's tail, and the
    whole rendering keeps the earlier one up to the turn's end token.
    """
    from agentserve.protocol import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock, Turn

    def assistant(n: int, call: bool) -> Turn:
        blocks: list[Any] = [ReasoningBlock(text=f"Step {n}: think."), TextBlock(text=f"Answer {n}.")]
        if call:
            blocks.append(ToolCallBlock(id=f"call_{n}", name="probe", arguments=f'{{"n": {n}}}'))
        return Turn(role="assistant", blocks=tuple(blocks))

    def result(n: int) -> Turn:
        return Turn(role="tool", blocks=(ToolResultBlock(tool_call_id=f"call_{n}", content=f"result {n}"),))

    def user(text: str) -> Turn:
        return Turn(role="user", blocks=(TextBlock(text=text),))

    history = [Turn(role="system", blocks=(TextBlock(text="You probe."),)), user("First question?"),
               assistant(1, True), result(1), assistant(2, True), result(2)]
    two_calls = Turn(role="assistant", blocks=(*assistant(3, True).blocks, ToolCallBlock(
        id="call_4", name="probe", arguments='{"n": 4}')))
    transitions = [
        (assistant(3, True), [result(3)]),
        (two_calls, [Turn(role="tool", blocks=(*result(3).blocks, *result(4).blocks))]),
        (assistant(3, False), [user("Next question?")]),
        (assistant(3, True), [result(3), user("And then?")]),
        (assistant(3, False), [Turn(role="system", blocks=(TextBlock(text="A note."),)), user("Next?")]),
    ]
    passed: set[frozenset[str]] = set()
    failed: set[frozenset[str]] = set()
    for turn, after in transitions:
        roles: frozenset[str] = frozenset()
        try:
            msgs, spans = plan([*history, turn, *after])
            start, end = spans[len(history)]
            roles = new_roles(msgs, end)
            through, _ = plan([*history, turn])
            before = render(msgs[:start], True)
            turn_text = render(through, False)
            cut = turn_text.rfind(end_token, len(before))
            whole = render(msgs, True)
            ok = turn_text.startswith(before) and cut >= 0 and whole.startswith(turn_text[: cut + len(end_token)])
            if ok:
                w, at = window(msgs, start)
                ok = window_tail(w, at, at + (end - start), end_token, render, True) == whole[cut + len(end_token) :]
        except Exception:  # noqa: BLE001 - a probe the template refuses clears nothing it touches
            ok = False
        (passed if ok else failed).add(roles)
    return frozenset(passed - failed)
