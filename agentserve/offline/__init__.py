"""Tools that run beside the service, never inside it: trace replay for `agentserve doctor TRACE` and the
router simulator behind `agentserve bench router`. Nothing on the serving path imports this package."""
