"""A streamed turn on its own thread, as a harness holds one: what it received, how it ended, and when."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx


class Stream(threading.Thread):
    """One streamed turn, Chat Completions or Anthropic Messages by `api`: its text, whether it finished, or the
    error event it ended with, and when it ended."""

    def __init__(self, url: str, prompt: str, api: str = "chat") -> None:
        super().__init__(daemon=True)
        self.url, self.prompt, self.api = url, prompt, api
        self.text, self.finished, self.error, self.status, self.ended_at = "", False, None, None, 0.0
        self.started = threading.Event()

    def run(self) -> None:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": self.prompt}], "stream": True}
        path = "/v1/chat/completions"
        if self.api == "anthropic":
            body["max_tokens"], path = 1024, "/v1/messages"
        try:
            with httpx.stream("POST", f"{self.url}{path}", json=body, timeout=60) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        self._event(json.loads(line[6:]))
        except httpx.HTTPError as exc:
            self.error = {"transport": repr(exc)}
        finally:
            self.ended_at = time.monotonic()
            self.started.set()

    def _event(self, event: dict[str, Any]) -> None:
        if "error" in event:  # Chat Completions' error chunk, Anthropic's `error` event
            self.error = event["error"]
        elif self.api == "chat":
            choice = event["choices"][0]
            self.text += choice["delta"].get("content") or ""
            self.finished = self.finished or choice.get("finish_reason") == "stop"
            self.started.set()
        elif event["type"] == "content_block_delta":
            self.text += event["delta"].get("text") or ""
            self.started.set()
        elif event["type"] == "message_delta":
            self.finished = event["delta"].get("stop_reason") == "end_turn"
