"""Prompt side of the graph: render the conversation, tokenize, hash prefix blocks."""
