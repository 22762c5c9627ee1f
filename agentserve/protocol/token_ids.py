"""A prompt's token ids as they travel Preprocessor -> Ingress -> Engine: one packed array of 4-byte unsigned ints.

Packed where the prompt is made and never unpacked into Python ints before the engine's own call (vLLM takes a
list): crossing a replica boundary pickles the array's bytes, and the ingress's observers (the prefix doctor, kept
turns, speculative prefill) compare, hash, slice and copy it in C. At 252K tokens the prompt's two crossings cost
10.9 ms as lists and 0.6 ms packed (`agentserve bench long-session`, docs/BENCHMARKS.md "Prompt ids packed end to
end"). Every vocabulary fits in 32 bits.
A TokenIds value is shared, not copied, between the messages that carry it: read it, never mutate it.
"""

from __future__ import annotations

from array import array
from typing import Annotated, Iterable

from pydantic import BeforeValidator, PlainSerializer

TYPECODE = "I"


def packed(ids: Iterable[int]) -> array:
    """`ids` as a packed array (itself when it already is one)."""
    if isinstance(ids, array) and ids.typecode == TYPECODE:
        return ids
    try:
        return array(TYPECODE, ids)
    except OverflowError:
        raise ValueError("token ids are integers in 0..2**32-1") from None


TokenIds = Annotated[array, BeforeValidator(packed), PlainSerializer(array.tolist, return_type=list[int])]
"""A pydantic field of packed token ids: accepts any sequence of ints, holds an array('I'), dumps as a list."""
