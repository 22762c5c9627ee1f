"""A decode that lets the event loop run while it works.

The tokenizers library holds the GIL through `Tokenizer.decode` (~10 ms for 100K tokens, during which
no other Python thread runs, the event loop included) but releases it in `decode_batch`. Decoding a
batch of one gives the same text, so the doctor's worker thread can decode whole histories while
streams keep flowing.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentserve.doctor.report import Decode


def releasing_decode(tokenizer: Any) -> Decode:
    """`tokenizer.decode(ids)`, through the GIL-releasing path where that path gives the same text.

    Falls back to `tokenizer.decode` for slow tokenizers and for tokenizers that post-process text
    (`clean_up_tokenization_spaces`), whose decode does more than the backend's.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "decode_batch") or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return tokenizer.decode

    def decode(ids: Sequence[int]) -> str:
        return backend.decode_batch([ids if isinstance(ids, list) else list(ids)], skip_special_tokens=False)[0]

    return decode
