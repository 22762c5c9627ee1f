"""Harness CLIs as benchmarks and tests drive them: Claude Code's offline environment pointed at a server.

Claude Code's environment for benchmarks and the e2e tests alike (the tests import it from here, never the reverse).
"""

from __future__ import annotations

import os
from pathlib import Path

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def claude_env(base_url: str, home: Path, model: str = MODEL) -> dict[str, str]:
    """Claude Code pointed at `base_url`, offline, with its state under `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update({
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_AUTH_TOKEN": "agentserve-test",
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        # offline: no telemetry, update checks, error reports or other non-essential calls
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
        "API_TIMEOUT_MS": "120000",
    })
    return env
