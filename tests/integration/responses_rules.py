"""Scripted-engine rules for the Responses API tests (matched before the shared rules: keys start `rsp-`)."""

SHELL_CALL = '<tool_call>\n{"name": "shell", "arguments": {"command": ["ls"]}}\n</tool_call>'
THINK_THEN_CALL = (
    "<think>The user wants files; I will list them.</think>"
    '<tool_call>\n{"name": "shell", "arguments": {"command": ["ls", "-a"]}}\n</tool_call>'
)
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
PATCH_CALL = '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "' + PATCH.replace("\n", "\\n") + '"}}\n</tool_call>'
# A tool of the `mcp__docs__` namespace, as the model names it (namespace + name).
MCP_CALL = '<tool_call>\n{"name": "mcp__docs__search", "arguments": {"query": "ray serve"}}\n</tool_call>'
LOCAL_SHELL_CALL = '<tool_call>\n{"name": "local_shell", "arguments": {"command": ["echo", "hi"]}}\n</tool_call>'

RESPONSES_RULES = [
    {"match": "rsp-out:", "reply": "There are two files.", "itl_ms": 0},
    {"match": "rsp-shell", "reply": SHELL_CALL, "itl_ms": 1},
    {"match": "rsp-reason-call", "reply": THINK_THEN_CALL, "itl_ms": 1},
    {"match": "rsp-reason-text", "reply": "<think>Two plus two is four.</think>It is 4.", "itl_ms": 1},
    {"match": "rsp-patch", "reply": PATCH_CALL, "itl_ms": 0},
    {"match": "rsp-mcp", "reply": MCP_CALL, "itl_ms": 0},
    {"match": "rsp-local-shell", "reply": LOCAL_SHELL_CALL, "itl_ms": 0},
    {"match": "rsp-broken", "reply": '<tool_call>\n{"name": "shell", "arguments": {"command": [', "itl_ms": 0},
    {"match": "rsp-", "reply": "Hello from responses.", "itl_ms": 0},
]
