"""Ray Serve deployments wrapping the plain components; `build_app` assembles the graph."""
