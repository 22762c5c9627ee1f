"""agentserve: serve open-weight LLMs to agent harnesses through a Ray Serve graph in front of vLLM."""

__version__ = "0.1.0"
