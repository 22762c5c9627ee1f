"""One handler per wire API: decode the HTTP request, run the request lifecycle (serve/lifecycle.py), encode the reply."""
