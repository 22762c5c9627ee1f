"""The request lifecycle against fake deployment handles: every exit releases the lease and ends the engine stream.

The integration tests (tests/integration/test_lifecycle_faults.py) check the same exits on the real graph; these
pin down each stage exactly, without Ray.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, RayActorError
from starlette.requests import ClientDisconnect

from agentserve.config import ModelSpec, ServeArgs
from agentserve.doctor import PrefixDoctor
from agentserve.protocol import (
    Conversation,
    EngineDelta,
    EngineRequest,
    GenerationRequest,
    Preprocessed,
    PromptReport,
    RouteDecision,
    RouteRequest,
    SamplingParams,
    TextBlock,
    Turn,
)
from agentserve.protocol.errors import RequestError
from tests.unit.fake_handles import Method
from agentserve.ingress.lifecycle import ParseOptions, RequestLifecycle, RequestPath


class FakeStream:
    """An engine stream: yields scripted deltas, may wait forever or raise; records cancel()."""

    def __init__(self, script: list[Any]) -> None:
        self._script = list(script)
        self.cancelled = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> EngineDelta:
        if not self._script:
            raise StopAsyncIteration
        item = self._script.pop(0)
        if item == "wait":
            await asyncio.Event().wait()
        if isinstance(item, float):
            await asyncio.sleep(item)
            item = self._script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True


class Graph:
    """Fake preprocessor / router / engine handles with what the lifecycle did to them."""

    def __init__(self, deltas: list[Any], *, route: Any = None, keepalive_s: float = 5.0) -> None:
        tokenizer = TOKENIZER[0]
        self.stream = FakeStream(deltas)
        self.preprocessed: list[GenerationRequest] = []  # what the fake Preprocessor rendered, deltas applied
        kept: dict[str, Conversation] = {}

        async def preprocess(
            req: GenerationRequest, scope: str = "", base: str | None = None, delta: Any = None, keep: Any = None,
            affinity: Any = None,
        ) -> Preprocessed | None:
            if delta is not None:  # as a replica does (serve/deployments/preprocessor.py)
                earlier = kept.get(delta.base)
                conversation = delta.apply(earlier) if earlier is not None else None
                if conversation is None:
                    return None
                req = req.model_copy(update={"conversation": conversation})
            if keep is not None:
                kept[keep.id] = req.conversation
            self.preprocessed.append(req)
            return Preprocessed(
                engine=EngineRequest(
                    request_id=req.request_id, model=req.model, token_ids=[1, 2, 3], sampling=SamplingParams(),
                    max_tokens=16,
                ),
                route=RouteRequest(
                    request_id=req.request_id, model=req.model, block_hashes=[], prompt_tokens=3, max_tokens=16,
                    session_key="s1",
                ),
                report=PromptReport(session_key="s1"),
            )

        async def do_route(_req: Any, _affinity: Any = None) -> RouteDecision:
            if route == "wait":
                await asyncio.Event().wait()
            if isinstance(route, BaseException):
                raise route
            return RouteDecision(replica_id="r0")

        self.preprocessor = SimpleNamespace(preprocess=Method(preprocess))
        self.router = SimpleNamespace(
            route=Method(do_route), release=Method(lambda rid, model: None), replica_failed=Method(lambda r: None)
        )
        self.engine = SimpleNamespace(generate=Method(lambda pre, route: self.stream))
        self.engine.options = lambda **_: self.engine
        args = ServeArgs(keepalive_interval_s=keepalive_s)
        self.path = RequestPath(
            args, preprocessor=self.preprocessor, router=self.router, engines={MODEL.id: self.engine},
            tokenizers={MODEL.id: tokenizer}, doctor=PrefixDoctor.from_args(args, tokenizer),
            engine_died=lambda exc: isinstance(exc, RayActorError),
        )

    @property
    def released(self) -> list[str]:
        return [c[0] for c in self.router.release.calls]


TOKENIZER: list[Any] = []
MODEL = ModelSpec(reasoning_parser=None, tool_call_parser=None)


@pytest.fixture(autouse=True)
def _real_tokenizer(tokenizer):
    """The embedded model's real tokenizer (the postprocessor detokenizes with it)."""
    TOKENIZER[:] = [tokenizer]


def _request() -> GenerationRequest:
    conv = Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),))
    return GenerationRequest(request_id="req_1", model="m", conversation=conv)


class Wire:
    def __init__(self, fail_on_encode: bool = False) -> None:
        self.fail = fail_on_encode

    def opening(self) -> bytes:
        return b"<open>"

    def encode(self, events: list[Any]) -> bytes:
        if self.fail:
            raise KeyError("encoder bug")
        return b"".join(f"<{type(e).__name__}>".encode() for e in events)

    def keepalive(self) -> bytes:
        return b"<ping>"

    def failure(self, err: RequestError) -> bytes:
        return f"<failure {err.kind}>".encode()

    def closing(self) -> bytes:
        return b"<done>"


def _life(g: Graph):
    return RequestLifecycle(
        g.path,
        _request(), MODEL, ParseOptions(tools=[]),
        api="chat", scope="caller", arrived=0.0,
    )


DONE = [EngineDelta(token_ids=[104, 105], prompt_tokens=3, num_cached_tokens=0), EngineDelta(token_ids=[], finish_reason="stop")]


async def _body(response) -> list[bytes]:
    return [chunk async for chunk in response.body_iterator]


def test_a_normal_stream_leaves_the_release_to_the_engine():
    async def run():
        g = Graph(DONE)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire())
        chunks = await _body(resp)
        return g, chunks

    g, chunks = asyncio.run(run())
    assert chunks[0] == b"<open>" and chunks[-1].endswith(b"<Finish><done>")
    assert g.released == []  # the engine's own report ends the lease
    assert g.router.replica_failed.calls == []


def test_client_leaving_while_queued_for_admission_releases():
    async def run():
        g = Graph(DONE, route="wait")

        async def handler():
            async with _life(g) as life:
                await life.admit()

        task = asyncio.create_task(handler())
        await asyncio.sleep(0.05)
        task.cancel()  # what Serve does when the client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task
        return g

    g = asyncio.run(run())
    assert g.released == ["req_1"]
    assert g.engine.generate.calls == []


def test_refused_admission_holds_nothing():
    async def run():
        g = Graph(DONE, route=RequestError("overloaded", "full", retry_after=1))
        with pytest.raises(RequestError):
            async with _life(g) as life:
                await life.admit()
        return g

    assert asyncio.run(run()).released == []


def test_exception_between_admission_and_response_releases():
    async def run():
        g = Graph(DONE)
        with pytest.raises(ZeroDivisionError):
            async with _life(g) as life:
                await life.admit()
                1 / 0
        return g

    g = asyncio.run(run())
    assert g.released == ["req_1"] and g.engine.generate.calls == []


def test_response_whose_body_never_starts_releases():
    async def run():
        g = Graph(DONE)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire())

        async def receive():
            await asyncio.Event().wait()

        async def send(message):
            raise OSError("client gone before the first byte")

        with pytest.raises(ClientDisconnect):
            await resp({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
        return g

    g = asyncio.run(run())
    assert g.released == ["req_1"]


@pytest.mark.parametrize("stage", ["mid-prefill", "mid-stream"])
def test_client_leaving_mid_stream_cancels_the_engine_and_releases(stage):
    async def run():
        script = ["wait"] if stage == "mid-prefill" else [DONE[0], "wait"]
        g = Graph(script)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire())
        body = resp.body_iterator
        got = [await body.__anext__()]
        if stage == "mid-stream":
            got.append(await body.__anext__())
        pending = asyncio.ensure_future(body.__anext__())
        await asyncio.sleep(0.05)
        pending.cancel()  # Starlette cancels the body task when it sees the disconnect
        with pytest.raises(asyncio.CancelledError):
            await pending
        return g, got

    g, got = asyncio.run(run())
    assert g.stream.cancelled and g.released == ["req_1"]
    assert g.router.replica_failed.calls == []


def test_keepalive_during_a_long_prefill():
    async def run():
        g = Graph([0.35, *DONE], keepalive_s=0.1)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire())
        return await _body(resp)

    chunks = asyncio.run(run())
    assert chunks[0] == b"<open>" and chunks[1:3] == [b"<ping>", b"<ping>"]
    assert chunks[-1].endswith(b"<done>")


def test_an_ingress_bug_ends_one_request_and_never_blames_the_engine():
    async def run():
        g = Graph(DONE)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire(fail_on_encode=True))
        return g, await _body(resp)

    g, chunks = asyncio.run(run())
    assert chunks[-1] == b"<failure internal>"
    assert g.router.replica_failed.calls == []
    assert g.stream.cancelled and g.released == ["req_1"]


def test_an_engine_death_marks_that_replica_failed():
    async def run():
        g = Graph([DONE[0], ActorDiedError()])
        async with _life(g) as life:
            await life.admit()
            events = await life.collect()
        return g, events

    g, events = asyncio.run(run())
    assert events[-1].reason == "error"
    assert "retry" in events[-1].error and "Error" not in events[-1].error  # what to do, not Ray's class name
    assert g.router.replica_failed.calls == [("r0",)]


def test_engine_stream_ending_without_a_finish_is_an_error_not_a_hang():
    async def run():
        g = Graph([DONE[0]])
        async with _life(g) as life:
            await life.admit()
            return await life.collect()

    events = asyncio.run(run())
    assert events[-1].reason == "error" and "ended early" in events[-1].error


def test_engine_reports_leave_the_scheduling_requests_context():
    """The engine's batched report carries many requests' ends: it must not be a child of the request that
    scheduled it (Serve cancels a request's child calls with it, and the batch would be lost)."""
    import contextvars

    from agentserve.serve.deployments.engine import RouterSignals
    from agentserve.serve.deployments.router_calls import RouterCalls

    current = contextvars.ContextVar("request", default=None)
    seen: list = []
    router = SimpleNamespace(report=Method(lambda *a: seen.append(current.get())))

    async def run():
        signals = RouterSignals(RouterCalls(router), "r0")
        current.set("request-1")
        signals.started("a")
        signals.finished("a")
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert router.report.calls == [("r0", [], ["a"])] and seen == [None]


def test_a_release_leaves_the_cancelled_requests_context(tokenizer):
    import contextvars

    current = contextvars.ContextVar("request", default=None)
    g = Graph(DONE, route="wait")
    seen: list = []
    g.router.release = Method(lambda rid, model: seen.append(current.get()))

    async def run():
        current.set("request-1")
        async with _life(g) as life:
            task = asyncio.create_task(life.admit())
            await asyncio.sleep(0.02)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert g.router.release.calls == [("req_1", MODEL.id)] and seen == [None]


class Recorder:
    """An observer: what each request's one TurnEnded said, and when it came."""

    def __init__(self, *, wait: float = 0.0, fail: bool = False) -> None:
        self.ended: list[Any] = []
        self.stored = False
        self._wait, self._fail = wait, fail

    def turn_ended(self, ended):
        self.ended.append(ended)
        if self._fail:
            raise RuntimeError("observer bug")
        if self._wait:
            async def store() -> None:
                await asyncio.sleep(self._wait)
                self.stored = True
            return store()
        return None


def _observed(deltas: list[Any], *observers: Recorder) -> Graph:
    g = Graph(deltas)
    g.path.observers = tuple(observers)
    return g


def test_a_finished_stream_tells_its_observers_once_before_its_last_bytes():
    rec = Recorder(wait=0.05)

    async def run():
        g = _observed(DONE, rec)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire())
        chunks = []
        async for chunk in resp.body_iterator:
            if chunk.endswith(b"<done>"):
                assert rec.stored  # the observer's store finished before the closing bytes went out
            chunks.append(chunk)
        return chunks

    chunks = asyncio.run(run())
    assert chunks[-1].endswith(b"<done>") and len(rec.ended) == 1
    ended = rec.ended[0]
    assert ended.finished and ended.state.finish_reason == "stop" and ended.state.output_ids == [104, 105]
    assert ended.session == f"caller/m/s1" and ended.route.replica_id == "r0" and ended.metered


@pytest.mark.parametrize("exit", ["client gone", "engine died", "ingress bug"])
def test_every_other_exit_tells_the_observers_once_and_not_finished(exit):
    rec = Recorder()

    async def run():
        script = {"client gone": [DONE[0], "wait"], "engine died": [DONE[0], ActorDiedError()],
                  "ingress bug": DONE}[exit]
        g = _observed(script, rec)
        async with _life(g) as life:
            await life.admit()
            resp = life.streaming_response(Wire(fail_on_encode=exit == "ingress bug"))
        body = resp.body_iterator
        if exit == "client gone":
            await body.__anext__()
            await body.__anext__()
            pending = asyncio.ensure_future(body.__anext__())
            await asyncio.sleep(0.05)
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        else:
            async for _ in body:
                pass
        return g

    asyncio.run(run())
    assert len(rec.ended) == 1
    assert not rec.ended[0].finished and not rec.ended[0].keepable


def test_a_failing_observer_never_fails_the_request_nor_the_others():
    broken, rec = Recorder(fail=True), Recorder()

    async def run():
        g = _observed(DONE, broken, rec)
        async with _life(g) as life:
            await life.admit()
            return await life.collect()

    events = asyncio.run(run())
    assert events[-1].reason == "stop"
    assert len(broken.ended) == 1 and len(rec.ended) == 1


def test_a_request_refused_admission_tells_nobody():
    rec = Recorder()

    async def run():
        g = _observed(DONE, rec)
        g.router.route = Method(lambda _req: (_ for _ in ()).throw(RequestError("overloaded", "full")))
        with pytest.raises(Exception):
            async with _life(g) as life:
                await life.admit()

    asyncio.run(run())
    assert rec.ended == []  # no engine stream was opened: nothing ended that an observer watches
