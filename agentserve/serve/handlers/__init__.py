"""One handler per wire API: decode the HTTP request, run the pipeline, encode the reply."""
