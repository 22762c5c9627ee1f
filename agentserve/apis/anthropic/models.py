"""The model catalog in Anthropic's /v1/models shape (`data`, `has_more`, `first_id`, `last_id`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from agentserve.config import ModelSpec
from agentserve.protocol.errors import RequestError

_CREATED_AT = datetime(2025, 1, 1, tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def model_info(name: str, model: ModelSpec) -> dict[str, Any]:
    return {
        "type": "model",
        "id": name,
        "display_name": name if name == model.id else f"{name} ({model.id})",
        "created_at": _CREATED_AT,
        "max_input_tokens": model.context_window,
        "max_tokens": model.context_window,
    }


def list_body(
    entries: list[tuple[str, ModelSpec]],
    *,
    limit: int = 20,
    after_id: str | None = None,
    before_id: str | None = None,
) -> dict[str, Any]:
    """One page, paged by id as the SDK does (`after_id=last_id` while `has_more`)."""
    if not 1 <= limit <= 1000:
        raise RequestError("invalid_request", "limit: must be between 1 and 1000", param="limit")
    names = [n for n, _ in entries]
    specs = dict(entries)
    start, end = 0, len(names)
    for cursor, label in ((after_id, "after_id"), (before_id, "before_id")):
        if cursor is not None and cursor not in specs:
            raise RequestError("invalid_request", f"{label}: unknown model id '{cursor}'", param=label)
    if after_id is not None:
        start = names.index(after_id) + 1
    if before_id is not None:
        end = names.index(before_id)
        start = max(start, end - limit) if after_id is None else start
    page = names[start:end][:limit]
    has_more = (start + len(page) < end) if before_id is None else start > 0
    return {
        "data": [model_info(n, specs[n]) for n in page],
        "has_more": has_more,
        "first_id": page[0] if page else None,
        "last_id": page[-1] if page else None,
    }
