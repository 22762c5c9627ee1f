"""The harnesses' session, parent and kind header names: data only, so the HAProxy wrapper (serve/haproxy_front.py)
reads the same table as the Ingress (ingress/lineage.py) without importing the request model."""

# (header, harness) in precedence order: agentserve's own names first, then each harness's.
SESSION_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-agentserve-session-id", "agentserve"),
    ("x-claude-code-session-id", "claude-code"),
    ("thread-id", "codex"),  # Codex's current name (its docs); older builds send only session_id
    ("session_id", "codex"),
    ("session-id", "codex"),
    ("x-session-id", "opencode"),
    ("x-session-affinity", "opencode"),
    ("x-deepseek-harness-session-id", "deepseek-harness"),
    ("x-dynamo-session-id", "dynamo"),  # a client configured for Dynamo's headers
)
PARENT_HEADERS: tuple[str, ...] = (
    "x-agentserve-parent-session-id", "x-codex-parent-thread-id", "x-parent-session-id", "x-dynamo-parent-session-id",
)
KIND_HEADER = "x-agentserve-request-kind"  # a custom harness may say what triggered its request
# Claude Code names a subagent inside the session it belongs to.
CLAUDE_AGENT, CLAUDE_PARENT_AGENT = "x-claude-code-agent-id", "x-claude-code-parent-agent-id"
CODEX_SUBAGENT, CODEX_TURN_METADATA, CODEX_WINDOW = "x-openai-subagent", "x-codex-turn-metadata", "x-codex-window-id"
# Codex over its WebSocket repeats its headers in the request's `client_metadata` (same names, or snake case).
METADATA_ALIASES = {"thread-id": "thread_id", "session-id": "session_id"}
