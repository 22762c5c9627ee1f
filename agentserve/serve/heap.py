"""The garbage collector of a replica process, set for long sessions' request bodies.

A replica starts with a large heap that lives as long as its process (Ray's and Serve's state, the tokenizer,
templates, the catalog, vLLM's objects), and a long session's request makes hundreds of thousands of short-lived
objects (an 840 KB body of 300 turns decoded and validated). With Python's defaults the collector runs every 700
allocations, and the oldest generation's collections, which walk the whole heap, land on some of those requests.
After start-up, `gc.freeze()` (as vLLM's engine core does) leaves the start-up heap out of every later collection,
and a first-generation threshold of 50K allocations (later generations every 20) lets a request's objects be freed
mostly by reference counting before a collection looks at them. `agentserve bench long-session`'s in-process stage
"ingress: whole decode" at 300 turns read p50 14.0 / p90 113.6 ms before, 14.0 / 15.8 ms under these settings
(docs/BENCHMARKS.md, long agent sessions).
There is no `gc.collect()` before the freeze: in a vLLM replica it takes ~0.3 s of every replica start, and what it
would free is start-up's own garbage, a bounded few MB kept instead.
"""

from __future__ import annotations

import gc

# Allocations before a young collection; young collections per middle one; middle ones per full one.
THRESHOLDS = (50_000, 20, 20)


def freeze_startup_heap() -> None:
    """Keep everything alive now out of later collections, and collect less often (call at the end of a replica's
    start-up)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
