"""Failures of the graph itself (a dead or saturated replica, a bug) as clean errors in the caller's envelope.

A preprocessor or router replica that died or is restarting is a transient condition: the client
gets 503/529 with `retry-after` and `x-should-retry`, as for overload. Anything else unexpected is a 500 in
the API's envelope (with its `request-id`), raised nowhere further: Serve never sees a torn response.
"""

from __future__ import annotations

import logging

from ray.exceptions import RayActorError, TaskCancelledError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentserve.protocol.errors import RequestError
from agentserve.ingress.errors import ErrorEnvelopes

logger = logging.getLogger("ray.serve")

TRANSIENT: tuple[type[BaseException], ...] = (
    RayActorError,  # ActorDiedError, ActorUnavailableError: a replica died or is unreachable
    BackPressureError,  # a deployment's queue is full
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)
RETRY_AFTER_S = 1.0


def as_request_error(exc: BaseException) -> RequestError:
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, TRANSIENT):
        return RequestError(
            "overloaded",
            f"a serving component is unavailable ({type(exc).__name__}); retry shortly",
            code="overloaded",
            retry_after=RETRY_AFTER_S,
        )
    return RequestError("internal", f"internal error: {type(exc).__name__}")


class ErrorBoundaryMiddleware:
    """Any exception before the response started becomes an error response in the path's envelope."""

    def __init__(self, app: ASGIApp, envelopes: ErrorEnvelopes) -> None:
        self.app = app
        self._envelopes = envelopes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except TaskCancelledError:  # Serve cancelled the request because its client left: nobody to answer
            logger.debug("request on %s cancelled: the client left", scope.get("path"))
        except Exception as exc:  # noqa: BLE001 - the boundary: log once, answer cleanly
            if started:
                raise
            err = as_request_error(exc)
            if err.kind == "internal":
                logger.exception("unhandled error on %s", scope.get("path"))
            else:
                logger.warning("transient failure on %s: %r", scope.get("path"), exc)
            await self._envelopes.response(scope.get("path", ""), err)(scope, receive, send)
