"""The Preprocessor replica against a client that sends its own chat template, with the real tokenizer and template:
the 187-byte nested-loop request is a 400 at once, nothing a client sent is rendered on the replica's event loop, and
the replica keeps answering everyone else meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from agentserve.apis import chat_completions
from agentserve.config import ServeArgs
from agentserve.preprocess.template_kwargs import APPLY_CHAT_TEMPLATE_PARAMS
from agentserve.protocol import Conversation, TextBlock, Turn
from agentserve.protocol.errors import RequestError
from agentserve.serve.deployments import preprocessor as deployment

LOOP = "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"
ATTACK = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"chat_template": LOOP}}


@pytest.fixture(scope="module")
def replica(model_path):
    mp = pytest.MonkeyPatch()
    mp.setattr(deployment, "start_export", lambda: None)  # no Ray metrics agent here
    args = ServeArgs.from_any({"engine": {"kind": "scripted", "block_size": 16, "rules": [{"reply": "ok"}]}})
    cls = deployment.PreprocessorReplica.func_or_class
    yield cls(args.model_dump(mode="json"), args.resolve_catalog().model_dump(mode="json"))
    mp.undo()


def _request(body: dict, rid: str = "r"):
    req = chat_completions.ChatCompletionRequest.model_validate(body)
    return chat_completions.decode(req, request_id=rid, model=body.get("model_id", req.model))


def _model(replica) -> str:
    return replica._default


def test_the_nested_loop_template_is_a_400_at_once_and_the_replica_keeps_answering(replica):
    body = json.dumps(ATTACK, separators=(",", ":"))
    assert len(body.encode()) < 200  # the whole attack
    model = _model(replica)

    async def run():
        attack = _request({**ATTACK, "model": model})
        started = time.monotonic()
        with pytest.raises(RequestError) as refused:
            await replica.preprocess(attack)
        elapsed = time.monotonic() - started
        # the replica answers others right after, and during a storm of the same attack
        storm = [asyncio.ensure_future(replica.preprocess(_request({**ATTACK, "model": model}, f"a{i}")))
                 for i in range(20)]
        ok = await replica.preprocess(_request({"model": model, "messages": [{"role": "user", "content": "hello"}]}))
        results = await asyncio.gather(*storm, return_exceptions=True)
        return refused.value, elapsed, ok, results

    err, elapsed, ok, results = asyncio.run(run())
    assert err.status == 400 and err.param == "chat_template_kwargs.chat_template"
    assert "chat_template" in err.message
    assert elapsed < 1.0
    assert ok.engine.token_ids and ok.route.prompt_tokens == len(ok.engine.token_ids)
    assert all(isinstance(r, RequestError) and r.status == 400 for r in results)


@pytest.mark.parametrize("key", sorted(APPLY_CHAT_TEMPLATE_PARAMS | {"bos_token", "eos_token", "raise_exception",
                                                                       "messages", "strftime_now"}))
def test_no_apply_chat_template_parameter_passes_as_a_template_kwarg(replica, key):
    """On /v1/chat/completions and /tokenize alike (render_tokens is what /tokenize calls)."""
    model = _model(replica)
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {key: True}}
    for call in (
        lambda: replica.preprocess(_request(body)),
        lambda: replica.render_tokens(_request(body).conversation, {key: True}, True, None, model),
    ):
        with pytest.raises(RequestError) as refused:
            asyncio.run(call())
        assert refused.value.status == 400 and refused.value.param == f"chat_template_kwargs.{key}"
        assert f"'{key}'" in refused.value.message


def test_a_variable_the_template_does_not_read_is_refused_by_name(replica):
    model = _model(replica)
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"colour": "red"}}
    with pytest.raises(RequestError) as refused:
        asyncio.run(replica.preprocess(_request(body)))
    assert refused.value.param == "chat_template_kwargs.colour" and "does not read" in refused.value.message


def test_nothing_is_rendered_on_the_event_loop(replica, monkeypatch):
    """Every render runs on the replica's worker pool, however short the prompt."""
    loop_thread: list[int] = []
    rendered_on: list[int] = []
    pre = replica._served[_model(replica)][0]
    real = pre._template.render

    def spy(*args, **kwargs):
        rendered_on.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(pre._template, "render", spy)

    async def run():
        loop_thread.append(threading.get_ident())
        conv = Conversation(turns=(Turn(role="user", blocks=(TextBlock(text="hi"),)),))
        await replica.preprocess(_request({"model": _model(replica), "messages": [{"role": "user", "content": "hi"}]}))
        await replica.render_tokens(conv, {}, True, None, _model(replica))

    asyncio.run(run())
    assert rendered_on and loop_thread[0] not in rendered_on


def test_a_wait_past_the_bound_is_a_503_to_retry(replica, monkeypatch):
    """The backstop: a call whose worker does not answer within WAIT_S is answered 503 (retry), not awaited forever."""
    monkeypatch.setattr(deployment, "WAIT_S", 0.2)
    release = threading.Event()

    async def run():
        with pytest.raises(RequestError) as waited:
            await replica._off_loop(release.wait, 5)
        return waited.value

    try:
        err = asyncio.run(run())
    finally:
        release.set()
    assert err.status == 503 and err.retry_after
