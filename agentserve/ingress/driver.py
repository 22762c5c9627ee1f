"""The one generation driver: decode -> admit -> stream or collect -> encode, the same for every wire API.

An API contributes a decoder (`GenerationApi.decode`: its body into a GenerationRequest, how to parse the output,
and the reply half) and an encoder (`Reply`: its stream idiom and its non-streamed body); the driver does the rest,
with the request's metrics and its lifecycle (ingress/lifecycle.py) around it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from agentserve import metrics
from agentserve.config import ModelSpec
from agentserve.ingress.context import IngressContext
from agentserve.ingress.lifecycle import ParseOptions, WireStream
from agentserve.protocol import GenerationRequest, Preprocessed
from agentserve.protocol.errors import RequestError


class Reply(Protocol):
    """The encoder half of one request."""

    def admission_failed(self, err: RequestError) -> Response | None:
        """The API's own answer to a refused admission (None: the error goes out in the API's envelope)."""
        ...

    def admitted(self, prepared: Preprocessed) -> None:
        """The prompt is ready and a slot leased: what the encoder needs from the prompt (its size), before any
        byte is sent."""
        ...

    def wire(self) -> WireStream[bytes]: ...

    async def before_end(self) -> None:
        """Runs once the turn has ended, before its last bytes go out (storing the response a follow-up names)."""
        ...

    def body(self, events: list[Any]) -> dict[str, Any]:
        """The non-streamed reply; a RequestError when the engine failed the turn (retryable)."""
        ...


@dataclass
class Decoded:
    """One request decoded by its API, ready for the driver."""

    model: ModelSpec  # the catalog model that serves it
    gen: GenerationRequest
    options: ParseOptions
    stream: bool
    reply: Reply


class GenerationApi(Protocol):
    name: str  # the `api` label of its metrics

    def status(self, err: RequestError) -> int:
        """The HTTP status this API answers `err` with."""
        ...

    async def decode(self, request: Request) -> Decoded: ...


class GenerationDriver:
    def __init__(self, ctx: IngressContext) -> None:
        self._ctx = ctx

    async def run(self, request: Request, api: GenerationApi) -> Response:
        arrived = time.perf_counter()
        status, model_name = 200, "unknown"
        try:
            decoded = await api.decode(request)
            model_name = decoded.gen.model
            reply = decoded.reply
            async with self._ctx.begin(
                request, decoded.gen, decoded.model, decoded.options, api=api.name, arrived=arrived
            ) as life:
                try:
                    prepared = await life.admit()  # 4xx / 503 / 529 here, never inside a 200 stream
                except RequestError as err:
                    answer = reply.admission_failed(err)
                    if answer is None:
                        raise
                    return answer
                reply.admitted(prepared)
                if decoded.stream:
                    return life.streaming_response(reply.wire(), before_end=reply.before_end)
                body = reply.body(await life.collect())
                await reply.before_end()
                return JSONResponse(body, headers=life.headers())
        except RequestError as err:
            status = api.status(err)
            raise
        finally:
            metrics.REQUESTS.labels(api.name, model_name, str(status)).inc()
