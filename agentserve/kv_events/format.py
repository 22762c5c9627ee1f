"""vLLM's KV cache event wire format, mirrored so neither side needs the other's code.

A publisher sends ZMQ multipart `[topic, seq (8-byte big-endian), msgpack(EventBatch)]`. The batch is
an array `[ts, events, data_parallel_rank]`; each event is a map tagged `type` = class name
(`vllm/distributed/kv_events.py`, vLLM 0.32). Replay: a ROUTER socket takes `[start_seq]` and answers
`[topic, seq, payload]` frames, then `[b"", END_SEQ, b""]`.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

END_SEQ = (-1).to_bytes(8, "big", signed=True)
ExternalHash = Union[bytes, int]


class _Event(msgspec.Struct, omit_defaults=True, tag=True, gc=False):
    pass


class BlockStored(_Event):
    block_hashes: list[ExternalHash]
    parent_block_hash: ExternalHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None  # required on the wire, as vLLM declares them
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class BlockRemoved(_Event):
    block_hashes: list[ExternalHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(_Event):
    pass


KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(EventBatch)


def encode_batch(batch: EventBatch) -> bytes:
    return _encoder.encode(batch)


def decode_batch(payload: bytes) -> EventBatch:
    """Decode one batch; unknown event types (newer vLLM) raise msgspec.ValidationError."""
    return _decoder.decode(payload)


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def seq_value(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)
