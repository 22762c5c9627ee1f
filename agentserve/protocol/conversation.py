"""The API-neutral conversation every wire API decodes into.

Blocks keep their original order inside a turn, so an assistant turn that went
reasoning -> tool call -> reasoning -> tool call replays exactly that way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True)


FREEFORM_ARGUMENT = "input"  # a freeform tool's call carries its raw input as this one string argument


class ToolGrammar(BaseModel):
    """The language a freeform tool's input must be a sentence of (a Responses `custom` tool's `format`): the call is
    constrained to it while decoding (preprocess/constrain.py)."""

    model_config = ConfigDict(frozen=True)

    syntax: Literal["lark", "regex"]
    definition: str


class ToolSpec(BaseModel):
    """A function the model may call; `parameters` is its JSON schema."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False  # arguments are constrained to `parameters` while decoding
    # A freeform tool: its one string argument FREEFORM_ARGUMENT is a sentence of this grammar (None: a function).
    grammar: ToolGrammar | None = None

    def openai_schema(self) -> dict[str, Any]:
        fn: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class ReasoningBlock(_Block):
    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None  # opaque; echoed back by clients, never interpreted


class ToolCallBlock(_Block):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str  # the JSON object text exactly as the model produced it


class ToolResultBlock(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    content: str
    is_error: bool = False


class ImageBlock(_Block):
    type: Literal["image"] = "image"
    url: str  # http(s) or data: URL


class ToolChangeBlock(_Block):
    """Tools that come into force, or leave, at this point of the conversation (a system turn): Claude Code's
    `tool_addition` / `tool_removal`, or the deferred tools a tool search referenced. Rendered where it stands
    (preprocess/tool_changes.py), so the prompt before it stays what the engine cached."""

    type: Literal["tool_change"] = "tool_change"
    added: tuple[ToolSpec, ...] = ()
    removed: tuple[str, ...] = ()


Block = Annotated[
    Union[TextBlock, ReasoningBlock, ToolCallBlock, ToolResultBlock, ImageBlock, ToolChangeBlock],
    Field(discriminator="type"),
]

Role = Literal["system", "user", "assistant", "tool"]


class Turn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Role
    blocks: tuple[Block, ...]

    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str


class Conversation(BaseModel):
    """Ordered turns plus the tools on offer: everything the prompt is rendered from."""

    model_config = ConfigDict(frozen=True)

    turns: tuple[Turn, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice = "auto"
    parallel_tool_calls: bool = True  # False: at most one call per turn (enforced by the grammar when constrained)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Crosses a replica boundary (Ingress -> Preprocessor) as plain data that pydantic-core rebuilds in one
        call, instead of every turn and block pickled as a model and restored one by one in Python: a long agent
        conversation sends and arrives 2-3x faster (docs/BENCHMARKS.md, "What a long prompt costs to carry")."""
        return (_conversation_from_data, (self.model_dump(),))

    def tools_in_force(self) -> tuple[ToolSpec, ...]:
        """The tools the model may call in its reply: those listed at the top, then every tool change in order (what
        the parser and the constraints know; the template lists only `tools`)."""
        changes = [b for t in self.turns if t.role == "system" for b in t.blocks if isinstance(b, ToolChangeBlock)]
        if not changes:
            return self.tools
        tools = {t.name: t for t in self.tools}
        for change in changes:
            for name in change.removed:
                tools.pop(name, None)
            for spec in change.added:
                tools.pop(spec.name, None)
                tools[spec.name] = spec
        return tuple(tools.values())

    def last_user_text(self) -> str:
        """Text of the user and tool-result turns since the last assistant turn (what a scripted engine matches
        on): one turn to the client, however many messages it took (OpenClaw sends a tool_result, then a user
        message with its runtime context)."""
        run: list[str] = []
        for turn in reversed(self.turns):
            if turn.role not in ("user", "tool"):
                if run:
                    break
                continue
            parts = []
            for b in turn.blocks:
                if isinstance(b, TextBlock):
                    parts.append(b.text)
                elif isinstance(b, ToolResultBlock):
                    parts.append(b.content)
            run.append("".join(parts))
        return "\n".join(reversed(run))


def _conversation_from_data(data: dict[str, Any]) -> Conversation:
    return Conversation.model_validate(data)


class ConversationDelta(BaseModel):
    """A conversation sent as what follows one its receiver was sent before: an agent session's next request
    repeats the whole history, and this carries only the turns after it (ingress/sent_conversations.py).

    `base` is the id the earlier conversation is kept under on the receiver (`KeepAs`), `base_turns` its length;
    the tools, tool choice and parallel-calls switch are the earlier conversation's (a request that changes them
    is sent whole)."""

    model_config = ConfigDict(frozen=True)

    base: str
    base_turns: int
    turns: tuple[Turn, ...]

    def apply(self, earlier: Conversation) -> Conversation | None:
        """The whole conversation (None: `earlier` is not the one this delta was made against)."""
        if len(earlier.turns) != self.base_turns:
            return None
        return earlier.model_copy(update={"turns": earlier.turns + self.turns})


class KeepAs(BaseModel):
    """Keep the conversation of this request under `id` for the sender's next delta; `nbytes`: what it holds, as the
    sender estimated it (the receiver's memo is bounded in bytes)."""

    model_config = ConfigDict(frozen=True)

    id: str
    nbytes: int


def approx_nbytes(turns: tuple[Turn, ...]) -> int:
    """What `turns` hold, about: their strings' lengths plus a fixed cost per block (a memo's bound, not a size)."""
    n = 0
    for turn in turns:
        for b in turn.blocks:
            n += 96
            if isinstance(b, (TextBlock, ReasoningBlock)):
                n += len(b.text) + len(getattr(b, "signature", None) or "")
            elif isinstance(b, ToolCallBlock):
                n += len(b.id) + len(b.name) + len(b.arguments)
            elif isinstance(b, ToolResultBlock):
                n += len(b.tool_call_id) + len(b.content)
            elif isinstance(b, ImageBlock):
                n += len(b.url)
            elif isinstance(b, ToolChangeBlock):
                n += sum(len(repr(t.parameters)) + len(t.description or "") for t in b.added) + len(repr(b.removed))
    return n
