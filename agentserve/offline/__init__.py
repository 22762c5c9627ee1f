"""Tools that run beside the service, never inside it: trace replay for `agentserve doctor TRACE` and the
router simulator behind scripts/bench_router.py. Nothing on the serving path imports this package."""
