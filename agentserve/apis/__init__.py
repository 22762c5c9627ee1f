"""Wire APIs: each decodes its requests into a Conversation and encodes StreamEvents in its own shape."""
