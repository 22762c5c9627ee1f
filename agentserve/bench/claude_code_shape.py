"""A Claude Code-shaped Anthropic Messages session, generated: deterministic given a seed, no model, no I/O.

What a long agent session sends, in the shape Claude Code sends it: a system prompt of ~12K tokens (the billing
preamble as its own block, the identity line, then instructions, environment and CLAUDE.md-style project notes), 20
tool definitions with JSON Schema 2020-12 input schemas (Claude Code's own tool names), a first user message with a
`<system-reminder>` block beside the task, then per turn i (1-based):

* the assistant's reply: a thinking block (~80 tokens), a short text, one `tool_use` (Read, Grep, Bash, Glob or
  Edit with plausible arguments);
* a user message holding that call's `tool_result` (~600 tokens: a numbered file listing, grep hits, test output).

Each turn is drawn from its own `random.Random((seed, i))`, so a session of 10 turns is the first 10 turns of one of
300. Each tool result (and the first user message) ends with a step marker `[step IIII.VVV]`: `IIII` is the turn it
answers, `VVV` a variant (0 in the session itself; a benchmark forks the session at a turn by changing it: same length). The
scripted engine's rules match on it (`scripted_rules`), so the reply to the request that ends with turn i's result
is step i + 1's `reply()`: the raw model output in the embedded model's format (qwen3 reasoning, hermes tool call),
which the graph's parsers turn back into thinking, text and tool_use blocks.

With SmolLM2's tokenizer and the embedded template the system prompt, tools and first message render to ~15.6K
tokens and each turn adds ~790 (prompt tokens ~= BASE_TOKENS + TURN_TOKENS * turns within a few percent:
~24K at 10 turns, ~95K at 100, ~253K at 300; tests/unit/bench/test_claude_code_shape.py checks it). The issue's
~170K at 300 turns corresponds to tool results of ~380 tokens (`result_tokens`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

MODEL = "claude-smollm2"
BASE_TOKENS = 15_650  # system prompt + tools + first user message, SmolLM2 tokens (approximate)
TURN_TOKENS = 790  # one assistant reply + its tool result, at RESULT_TOKENS (approximate)
RESULT_TOKENS = 600  # the target size of one tool result
CHARS_PER_TOKEN = 2.9  # SmolLM2's tokenizer on the generated code and logs (measured; used to size the text)
SCHEMA = "https://json-schema.org/draft/2020-12/schema"

_WORDS = (
    "request", "session", "replica", "token", "prefix", "cache", "render", "template", "turn", "stream", "parser",
    "router", "engine", "block", "digest", "store", "lease", "config", "handle", "result", "buffer", "window",
    "policy", "event", "reply", "prompt", "schema", "field", "value", "index", "offset", "length", "batch", "queue",
)
_MODULES = ("ingress", "preprocess", "routing", "engines", "state", "parsers", "protocol", "doctor", "apis", "serve")
_VERBS = ("load", "build", "check", "merge", "split", "encode", "decode", "apply", "render", "route", "store", "parse")


def _ident(rng: random.Random) -> str:
    return f"{rng.choice(_VERBS)}_{rng.choice(_WORDS)}"


def _path(rng: random.Random) -> str:
    return f"src/agentserve/{rng.choice(_MODULES)}/{rng.choice(_WORDS)}_{rng.choice(_WORDS)}.py"


def _code_line(rng: random.Random) -> str:
    a, b, c = rng.choice(_WORDS), rng.choice(_WORDS), _ident(rng)
    return rng.choice((
        f"    def {c}(self, {a}: {b.title()}, *, {b}: int = {rng.randrange(1, 512)}) -> {a.title()} | None:",
        f"        {a} = self._{b}.get({a}_{b}, {rng.randrange(100)})",
        f"        if {a} is None or len({a}) > self._max_{b}:",
        f"            return {c}({a}, {b}=self._{b})",
        f"        for {a}, {b} in enumerate(self._{c}({a}s)):",
        f'            raise RequestError("invalid_request", f"{{{a}}}: {b} out of range", param="{b}")',
        f"    # The {a}'s {b} is kept until the {rng.choice(_WORDS)} ends: a {rng.choice(_WORDS)} may need it.",
        f"class {a.title()}{b.title()}({rng.choice(_WORDS).title()}Base):",
        f"from agentserve.{rng.choice(_MODULES)}.{a} import {b.title()}, {c}",
        "",
    ))


def _lines_to(rng: random.Random, tokens: int, line: Callable[[random.Random, int], str]) -> list[str]:
    """Lines until their text reaches ~`tokens` tokens."""
    out: list[str] = []
    chars, budget = 0, tokens * CHARS_PER_TOKEN
    while chars < budget:
        s = line(rng, len(out) + 1)
        out.append(s)
        chars += len(s) + 1
    return out


# -- the request's fixed part ------------------------------------------------------------------------------------

_INSTRUCTIONS = """You are an interactive CLI tool that helps users with software engineering tasks. Use the
instructions below and the tools available to you to assist the user.

# Tone and style
You should be concise, direct, and to the point. When you run a non-trivial command, explain what it does and why.
Your output will be displayed on a command line interface: use GitHub-flavored markdown, keep answers short, and
never use tools to communicate with the user. Only use emojis if the user explicitly asks for them.

# Doing tasks
The user will primarily request you perform software engineering tasks: solving bugs, adding functionality,
refactoring code, explaining code. For these tasks: use the TodoWrite tool to plan the task if required; use the
search tools to understand the codebase and the user's query; implement the solution using all tools available to
you; verify the solution with tests; never assume a test framework or test script; check the README or search the
codebase to determine the testing approach. When you have completed a task, run the lint and typecheck commands.

# Tool usage policy
When doing file search, prefer the Agent tool to reduce context usage. You can call multiple tools in a single
response. When multiple independent pieces of information are requested, batch your tool calls together for
optimal performance. Never use Bash to read files: use Read. Never use Bash to search: use Grep and Glob.
"""


def _note(rng: random.Random, n: int) -> str:
    a, b, c = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
    mod = rng.choice(_MODULES)
    return rng.choice((
        f"- {n}. The {a} {b} in `{mod}/` is read once per {c}; never cache it across callers.",
        f"- {n}. Run `make test-unit` after changing `{mod}/{a}_{b}.py`; the {c} tests live beside it.",
        f"- {n}. A {a} that outlives its {b} must be released in `close()`, on every exit of the {c}.",
        f"- {n}. Prefer `{_ident(rng)}()` over hand-written loops over {a}s: it keeps the {b} order stable.",
        f"- {n}. Errors reach the client in its API's envelope: a bad {a} is a 400 naming `{b}`, never a 500.",
    ))


@lru_cache(maxsize=8)
def system_blocks(seed: int = 0) -> tuple[dict[str, Any], ...]:
    """Claude Code's system: the billing preamble (its own block), the identity line, then ~12K tokens."""
    rng = random.Random(f"system:{seed}")
    notes = "\n".join(_lines_to(rng, 12_700, _note))
    env = (
        "<env>\nWorking directory: /home/dev/agentserve\nIs directory a git repo: Yes\nPlatform: linux\n"
        "OS Version: Linux 6.8.0\nToday's date: 2026-12-01\n</env>\nYou are powered by the model claude-smollm2.\n"
    )
    body = f"{_INSTRUCTIONS}\n{env}\n# Project notes (CLAUDE.md)\n\n{notes}\n"
    return (
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=cli; cch={seed:05x};"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": body, "cache_control": {"type": "ephemeral"}},
    )


def _obj(props: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"$schema": SCHEMA, "type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


_TOOLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("Agent", "Launch a new agent to handle complex, multi-step tasks autonomously. Each agent type has specific "
     "capabilities and tools available to it. Use it for open-ended searches that may need several rounds of "
     "globbing and grepping; give it a detailed task description and say what it should return.",
     _obj({"description": _s("A short (3-5 word) description of the task"), "prompt": _s("The task for the agent"),
           "subagent_type": _s("The type of specialized agent to use for this task")},
          ("description", "prompt", "subagent_type"))),
    ("Bash", "Executes a given bash command in a persistent shell session with optional timeout, ensuring proper "
     "handling and security measures. Before executing, verify the parent directory exists; always quote file "
     "paths that contain spaces; avoid `find`, `grep`, `cat`, `head` and `tail`: use the dedicated tools. Commands "
     "run in the working directory; output over 30000 characters is truncated.",
     _obj({"command": _s("The command to execute"),
           "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
           "description": _s("Clear, concise description of what this command does in 5-10 words"),
           "run_in_background": {"type": "boolean", "description": "Run this command in the background"}},
          ("command",))),
    ("Glob", "Fast file pattern matching tool that works with any codebase size. Supports glob patterns like "
     "\"**/*.js\" or \"src/**/*.ts\". Returns matching file paths sorted by modification time.",
     _obj({"pattern": _s("The glob pattern to match files against"),
           "path": _s("The directory to search in. Defaults to the current working directory.")}, ("pattern",))),
    ("Grep", "A powerful search tool built on ripgrep. Supports full regex syntax; filter files with the glob or "
     "type parameter; output modes: content shows matching lines, files_with_matches shows only file paths "
     "(default), count shows match counts. Use the Agent tool for open-ended searches needing several rounds.",
     _obj({"pattern": _s("The regular expression pattern to search for in file contents"),
           "path": _s("File or directory to search in (rg PATH). Defaults to the current working directory."),
           "glob": _s("Glob pattern to filter files (e.g. \"*.js\", \"*.{ts,tsx}\")"),
           "output_mode": _s("Output mode", enum=["content", "files_with_matches", "count"]),
           "-n": {"type": "boolean", "description": "Show line numbers in output"},
           "-i": {"type": "boolean", "description": "Case insensitive search"},
           "head_limit": {"type": "number", "description": "Limit output to first N lines/entries"}},
          ("pattern",))),
    ("ExitPlanMode", "Use this tool when you are in plan mode and have finished presenting your plan and are ready "
     "to code. This will prompt the user to exit plan mode.",
     _obj({"plan": _s("The plan you came up with, that you want to run by the user for approval")}, ("plan",))),
    ("EnterPlanMode", "Use this tool to enter plan mode when a task needs exploration and a plan before any edit.",
     _obj({}, ())),
    ("Read", "Reads a file from the local filesystem. The file_path parameter must be an absolute path. By default "
     "it reads up to 2000 lines starting from the beginning of the file; you can optionally specify a line offset "
     "and limit. Results are returned using cat -n format, with line numbers starting at 1.",
     _obj({"file_path": _s("The absolute path to the file to read"),
           "offset": {"type": "number", "description": "The line number to start reading from"},
           "limit": {"type": "number", "description": "The number of lines to read"}}, ("file_path",))),
    ("Edit", "Performs exact string replacements in files. You must use your Read tool at least once in the "
     "conversation before editing. The edit will FAIL if old_string is not unique in the file; use replace_all "
     "to change every instance.",
     _obj({"file_path": _s("The absolute path to the file to modify"), "old_string": _s("The text to replace"),
           "new_string": _s("The text to replace it with (must be different from old_string)"),
           "replace_all": {"type": "boolean", "default": False, "description": "Replace all occurrences"}},
          ("file_path", "old_string", "new_string"))),
    ("Write", "Writes a file to the local filesystem, overwriting the existing file if there is one. Prefer editing "
     "existing files; never create documentation files unless explicitly requested.",
     _obj({"file_path": _s("The absolute path to the file to write"), "content": _s("The content to write")},
          ("file_path", "content"))),
    ("NotebookEdit", "Completely replaces the contents of a specific cell in a Jupyter notebook (.ipynb file).",
     _obj({"notebook_path": _s("The absolute path to the Jupyter notebook file to edit"),
           "cell_id": _s("The ID of the cell to edit"), "new_source": _s("The new source for the cell"),
           "cell_type": _s("The type of the cell", enum=["code", "markdown"]),
           "edit_mode": _s("The type of edit to make", enum=["replace", "insert", "delete"])},
          ("notebook_path", "new_source"))),
    ("WebFetch", "Fetches content from a specified URL and processes it using an AI model. Takes a URL and a prompt "
     "as input, converts HTML to markdown, and answers the prompt from the page.",
     _obj({"url": _s("The URL to fetch content from", format="uri"),
           "prompt": _s("The prompt to run on the fetched content")}, ("url", "prompt"))),
    ("WebSearch", "Allows Claude to search the web and use the results to inform responses.",
     _obj({"query": _s("The search query to use", minLength=2),
           "allowed_domains": {"type": "array", "items": {"type": "string"}},
           "blocked_domains": {"type": "array", "items": {"type": "string"}}}, ("query",))),
    ("TodoWrite", "Use this tool to create and manage a structured task list for your current coding session. It "
     "helps you track progress, organize complex tasks, and show the user how the work is going.",
     _obj({"todos": {"type": "array", "description": "The updated todo list", "items": {
         "type": "object", "additionalProperties": False, "required": ["content", "status", "activeForm"],
         "properties": {"content": {"type": "string", "minLength": 1},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                        "activeForm": {"type": "string", "minLength": 1}}}}}, ("todos",))),
    ("TaskOutput", "Retrieves output from a running or completed background task (a shell or an agent).",
     _obj({"task_id": _s("The task ID to get output from"),
           "block": {"type": "boolean", "default": True, "description": "Whether to wait for completion"},
           "timeout": {"type": "number", "minimum": 0, "maximum": 600000, "default": 30000}}, ("task_id",))),
    ("TaskStop", "Stops a running background task by its ID.",
     _obj({"task_id": _s("The ID of the background task to stop")}, ("task_id",))),
    ("Skill", "Execute a skill within the main conversation. Skills provide specialized capabilities and domain "
     "knowledge; invoke one by its name when the task matches its description.",
     _obj({"skill": _s("The skill name (no arguments)")}, ("skill",))),
    ("SlashCommand", "Execute a slash command within the main conversation.",
     _obj({"command": _s("The slash command to execute with its arguments, e.g. \"/review-pr 123\"")},
          ("command",))),
    ("AskUserQuestion", "Use this tool when you need to ask the user questions during execution: to gather "
     "preferences, clarify ambiguous instructions, or get decisions on implementation choices.",
     _obj({"questions": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
         "type": "object", "additionalProperties": False, "required": ["question", "header", "options", "multiSelect"],
         "properties": {"question": {"type": "string"}, "header": {"type": "string"},
                        "multiSelect": {"type": "boolean"},
                        "options": {"type": "array", "minItems": 2, "maxItems": 4, "items": {
                            "type": "object", "additionalProperties": False, "required": ["label", "description"],
                            "properties": {"label": {"type": "string"}, "description": {"type": "string"}}}}}}}},
          ("questions",))),
    ("ListMcpResourcesTool", "Lists available resources from configured MCP servers.",
     _obj({"server": _s("Optional server name to filter resources by")}, ())),
    ("ReadMcpResourceTool", "Reads a specific resource from an MCP server, identified by server name and URI.",
     _obj({"server": _s("The MCP server name"), "uri": _s("The resource URI to read")}, ("server", "uri"))),
)


def tools() -> list[dict[str, Any]]:
    """Claude Code's 20 tool definitions in Anthropic's shape (descriptions shortened, schemas as it sends them)."""
    return [{"name": n, "description": d, "input_schema": s} for n, d, s in _TOOLS]


def marker(turn: int, variant: int = 0) -> str:
    """The step marker that ends turn `turn`'s tool result (turn 0: the first user message)."""
    return f"[step {turn:04d}.{variant:03d}]"


def rule_match(turn: int) -> str:
    """What a scripted rule matches to answer the request that ends with turn `turn`'s result, any variant."""
    return marker(turn)[:-4]


def first_user(seed: int = 0) -> dict[str, Any]:
    reminder = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
                "# claudeMd\nCodebase and user instructions are shown above. IMPORTANT: follow them exactly.\n"
                "</system-reminder>")
    task = (f"The long-session tests fail on the main branch since the last merge (seed {seed}). Find the cause, "
            f"fix it and run the tests. {marker(0)}")
    return {"role": "user", "content": [{"type": "text", "text": reminder}, {"type": "text", "text": task}]}


# -- the turns ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """Turn i: the assistant's reply (thinking, text, one tool call) and that call's result."""

    turn: int
    thinking: str
    text: str
    tool: str
    input: dict[str, Any] = field(default_factory=dict)
    result: str = ""  # the tool result without its step marker

    def reply(self) -> str:
        """The raw model output in the embedded model's format (what the scripted engine generates)."""
        call = json.dumps({"name": self.tool, "arguments": self.input}, ensure_ascii=False)
        return f"<think>\n{self.thinking}\n</think>\n\n{self.text}\n<tool_call>\n{call}\n</tool_call>"

    def assistant(self, tool_use_id: str, signature: str = "") -> dict[str, Any]:
        """The assistant message a harness sends back for this turn."""
        return {"role": "assistant", "content": [
            {"type": "thinking", "thinking": self.thinking, "signature": signature},
            {"type": "text", "text": self.text},
            {"type": "tool_use", "id": tool_use_id, "name": self.tool, "input": self.input},
        ]}

    def tool_result(self, tool_use_id: str, variant: int = 0) -> dict[str, Any]:
        return {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_use_id,
             "content": f"{self.result}\n{marker(self.turn, variant)}"},
        ]}


def _read(rng: random.Random, size: int) -> tuple[str, dict[str, Any], str]:
    path = _path(rng)
    start = rng.randrange(1, 400)
    lines = _lines_to(rng, size, lambda r, n: f"{start + n - 1:6d}\u2192{_code_line(r)}")
    return "Read", {"file_path": f"/home/dev/agentserve/{path}", "offset": start, "limit": len(lines)}, "\n".join(lines)


def _grep(rng: random.Random, size: int) -> tuple[str, dict[str, Any], str]:
    pattern = _ident(rng)
    lines = _lines_to(rng, size, lambda r, n: f"{_path(r)}:{r.randrange(1, 900)}:{_code_line(r).strip()}")
    return "Grep", {"pattern": pattern, "output_mode": "content", "-n": True}, "\n".join(lines)


def _bash(rng: random.Random, size: int) -> tuple[str, dict[str, Any], str]:
    mod = rng.choice(_MODULES)

    def line(r: random.Random, n: int) -> str:
        test = f"tests/unit/{mod}/test_{r.choice(_WORDS)}.py::test_{_ident(r)}"
        return f"{test} {'PASSED' if r.random() < 0.9 else 'FAILED'} [{min(99, n)}%]"

    lines = _lines_to(rng, size - 40, line)
    lines.append(f"==== {sum('FAILED' in x for x in lines)} failed, {len(lines)} passed in {rng.uniform(1, 30):.2f}s ====")
    cmd = f"python -m pytest tests/unit/{mod} -q -x"
    return "Bash", {"command": cmd, "description": f"Run the {mod} unit tests"}, "\n".join(lines)


def _glob(rng: random.Random, size: int) -> tuple[str, dict[str, Any], str]:
    mod = rng.choice(_MODULES)
    lines = _lines_to(rng, size, lambda r, n: f"/home/dev/agentserve/{_path(r)}")
    return "Glob", {"pattern": f"src/agentserve/{mod}/**/*.py"}, "\n".join(lines)


def _edit(rng: random.Random, size: int) -> tuple[str, dict[str, Any], str]:
    path = f"/home/dev/agentserve/{_path(rng)}"
    old, new = _code_line(rng).strip() or "pass", _code_line(rng).strip() or "return None"
    start = rng.randrange(1, 400)
    lines = _lines_to(rng, size - 30, lambda r, n: f"{start + n - 1:6d}\u2192{_code_line(r)}")
    head = f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:"
    return "Edit", {"file_path": path, "old_string": old, "new_string": new}, head + "\n" + "\n".join(lines)


_KINDS = ((_read, 0.4), (_grep, 0.2), (_bash, 0.2), (_glob, 0.1), (_edit, 0.1))


@lru_cache(maxsize=4096)
def step(turn: int, seed: int = 0, result_tokens: int = RESULT_TOKENS) -> Step:
    """Turn `turn` (1-based) of the session `seed`: its own random stream, whatever the session's length;
    `result_tokens`: the tool result's size."""
    if turn < 1:
        raise ValueError("turns count from 1")
    rng = random.Random(f"turn:{seed}:{turn}")
    make = rng.choices([k for k, _ in _KINDS], [w for _, w in _KINDS])[0]
    tool, args, result = make(rng, result_tokens)
    goal = rng.choice(_WORDS)
    thinking = " ".join(
        [f"Step {turn}: the {goal} handling is the likeliest cause, so the next thing to look at is what {tool} shows."]
        + [f"The {rng.choice(_WORDS)} {rng.choice(_WORDS)} may {rng.choice(_VERBS)} the {rng.choice(_WORDS)} "
           f"before the {rng.choice(_WORDS)} is {rng.choice(('ready', 'released', 'kept', 'checked'))}."
           for _ in range(3)])
    text = {"Read": "Let me read that file.", "Grep": "I'll search for where it is used.",
            "Bash": "Running the tests now.", "Glob": "Let me find the related files.",
            "Edit": "I'll fix it here."}[tool]
    return Step(turn, thinking, text, tool, args, result)


def tool_use_id(turn: int, seed: int = 0) -> str:
    """A deterministic Anthropic-style id for the generated session's own tool calls."""
    return f"toolu_{random.Random(f'id:{seed}:{turn}').getrandbits(96):024x}"


# -- whole requests ----------------------------------------------------------------------------------------------


def messages(
    turns: int,
    seed: int = 0,
    *,
    assistant: Sequence[dict[str, Any]] | None = None,
    sign: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    variants: Mapping[int, int] | None = None,
    result_tokens: int = RESULT_TOKENS,
) -> list[dict[str, Any]]:
    """The messages after `turns` turns: the first user message, then each turn's reply and tool result.

    `assistant[i]`: the assistant message of turn i + 1 as the client received it (a harness sends back what it
    was sent: the server's tool_use ids and thinking signatures); the generated one (`Step.assistant`, its thinking
    unsigned) for turns it does not cover. `sign`: signs those where they stand (`anthropic.sign_thinking`, which
    keeps the server's). `variants[i]`: turn i's tool result forked (same length)."""
    out = [first_user(seed)]
    got = list(assistant or ())
    forks = variants or {}
    for i in range(1, turns + 1):
        s = step(i, seed, result_tokens)
        msg = got[i - 1] if i <= len(got) else s.assistant(tool_use_id(i, seed))
        call_id = next(b["id"] for b in msg["content"] if b.get("type") == "tool_use")
        out += [msg, s.tool_result(call_id, forks.get(i, 0))]
    return sign(out) if sign is not None else out


def body(turns: int, seed: int = 0, *, model: str = MODEL, **kwargs: Any) -> dict[str, Any]:
    """A whole streamed /v1/messages body after `turns` turns (kwargs: as `messages`)."""
    return {
        "model": model,
        "max_tokens": 32_000,
        "stream": True,
        "system": [dict(b) for b in system_blocks(seed)],
        "tools": tools(),
        "messages": messages(turns, seed, **kwargs),
        "metadata": {"user_id": f"user_bench_account__session_{seed:08x}"},
    }


def scripted_rules(turns: int, seed: int = 0, result_tokens: int = RESULT_TOKENS) -> list[dict[str, Any]]:
    """Scripted-engine rules answering every request of a session up to `turns` turns (and the one after)."""
    return [{"match": rule_match(i - 1), "reply": step(i, seed, result_tokens).reply()} for i in range(1, turns + 2)]
