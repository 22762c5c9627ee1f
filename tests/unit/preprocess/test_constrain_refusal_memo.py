"""The grammar-refusal memo is bounded in bytes: tags as large as a body's tools (MiBs) are not what it keeps."""

from __future__ import annotations

import json

from agentserve.preprocess import constrain


def _tag(i: int, pad: int) -> str:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * pad}}}
    return json.dumps({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema}})


def test_memo_holds_digests_within_its_byte_bound_whatever_the_tags_weigh():
    """40 tags of 256 KiB each (10 MiB of tags, which a count-bounded lru_cache kept whole): the memo keeps digests
    and reasons only, under its byte bound, and still answers a repeat from memory."""
    tags = [_tag(i, 256 * 1024) for i in range(40)]
    answers = [constrain._refusal(t) for t in tags]
    assert all(isinstance(k, bytes) and len(k) == 16 for k in constrain._REFUSALS)
    assert constrain._refusals_bytes <= constrain._REFUSALS_MAX_BYTES
    assert sum(len(r or "") for r in constrain._REFUSALS.values()) < 1 << 20
    assert constrain._refusal(tags[-1]) == answers[-1]
