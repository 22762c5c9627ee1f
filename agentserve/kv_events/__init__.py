"""KV cache events in vLLM's wire format: the one thing engines and the router both speak.

It sits outside `engines/` and `routing/` so neither imports the other: an engine that is not vLLM
publishes with `publisher`, the router decodes with `format` (and subscribes in routing/kv_subscriber.py).
"""

from agentserve.kv_events.format import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, KvEvent

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "EventBatch", "KvEvent"]
