"""Request traces: one JSON line per finished request (record.py), written by the Ingress, generated
synthetically for benchmarks, and replayed against the router simulator or a live graph."""
