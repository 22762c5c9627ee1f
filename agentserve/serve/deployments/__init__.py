"""The graph's Ray Serve deployments, one module each, in the order a request meets them:
ingress -> preprocessor -> router -> engine (engine_pinning makes Serve honour the router's choice),
and the Responses store beside the ingress. Each wraps a plain component from preprocess/, routing/,
engines/ or apis/; build_app (serve/app.py) binds them into one application."""
