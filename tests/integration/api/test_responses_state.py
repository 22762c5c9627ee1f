"""Multi-turn Responses traffic: stateless replay (Codex's store:false), encrypted reasoning, stored responses."""

from __future__ import annotations

import openai
import pytest

from tests.integration.api.test_responses_events import SHELL_TOOL, codex_turn

pytestmark = pytest.mark.integration

BLOCK = 16  # the integration graph's engine block size


@pytest.fixture(scope="module")
def client(graph_url):
    return openai.OpenAI(base_url=f"{graph_url}/v1", api_key="key-a")


def _without_ids(item: dict) -> dict:
    """Codex drops ids (and status) when it resends output items."""
    return {k: v for k, v in item.items() if k not in ("id", "status")}


def test_function_call_output_turn_without_ids(client):
    first = codex_turn("rsp-shell: list files")
    turn1 = client.responses.create(**first)
    (call,) = turn1.output
    history = first["input"] + [
        _without_ids(call.model_dump(exclude_none=True)),
        {"type": "function_call_output", "call_id": call.call_id, "output": "rsp-out: a.txt\nb.txt"},
    ]
    turn2 = client.responses.create(**{**first, "input": history})
    assert turn2.output_text == "There are two files."
    # Turn 2's prompt starts with turn 1's, so its cached blocks reach at least as far.
    assert turn2.usage.input_tokens_details.cached_tokens >= (turn1.usage.input_tokens - 1) // BLOCK * BLOCK
    # Output given as content parts is accepted too.
    parts = history[:-1] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": [{"type": "input_text", "text": "rsp-out: a.txt"}]}
    ]
    assert client.responses.create(**{**first, "input": parts}).output_text == "There are two files."


def test_encrypted_reasoning_restores_the_exact_text(client):
    req = dict(
        model="smollm2",
        input=[{"role": "user", "content": "rsp-reason-call"}],
        tools=[SHELL_TOOL],
        reasoning={"effort": "medium", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        store=False,
    )
    turn1 = client.responses.create(**req)
    reasoning, call = (i.model_dump(exclude_none=True) for i in turn1.output)
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "rsp-out: x"}
    # The client rewrites the summary: the sealed text wins, so the prompt is unchanged.
    forged = {**_without_ids(reasoning), "summary": [{"type": "summary_text", "text": "something else entirely"}]}
    a = client.responses.create(**{**req, "input": req["input"] + [forged, _without_ids(call), output]})
    assert a.status == "completed" and a.output_text == "There are two files."
    # The same reasoning without its seal proves nothing: left out of the prompt, not rendered as the model's own.
    plain = {"type": "reasoning", "summary": reasoning["summary"]}
    b = client.responses.create(**{**req, "input": req["input"] + [plain, _without_ids(call), output]})
    assert b.status == "completed" and b.usage.input_tokens < a.usage.input_tokens


@pytest.mark.parametrize(
    "blob",
    ["AAAA", "not base64 !!", "A" * 80],
)
def test_tampered_or_foreign_encrypted_content_is_400(client, blob):
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(
            model="smollm2",
            input=[
                {"role": "user", "content": "rsp-hello"},
                {"type": "reasoning", "summary": [], "encrypted_content": blob},
            ],
        )
    assert exc.value.body["code"] == "invalid_encrypted_content"
    assert exc.value.body["param"] == "input[1].encrypted_content"


def test_flipped_bit_in_a_real_blob_is_400(client):
    resp = client.responses.create(
        model="smollm2", input="rsp-reason-text", reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"]
    )
    blob = resp.output[0].encrypted_content
    flipped = blob[:20] + ("A" if blob[20] != "A" else "B") + blob[21:]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model="smollm2",
            input=[{"role": "user", "content": "rsp-hello"}, {"type": "reasoning", "summary": [], "encrypted_content": flipped}],
        )


def test_previous_response_id_get_and_delete(client, graph_url):
    turn1 = client.responses.create(model="smollm2", input="rsp-shell: list files", tools=[SHELL_TOOL], store=True)
    (call,) = turn1.output
    turn2 = client.responses.create(
        model="smollm2",
        previous_response_id=turn1.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rsp-out: a.txt"}],
        tools=[SHELL_TOOL],
    )
    assert turn2.output_text == "There are two files."
    assert turn2.previous_response_id == turn1.id
    # The stored history made the prompt: turn 1's prompt blocks are reused.
    assert turn2.usage.input_tokens_details.cached_tokens >= (turn1.usage.input_tokens - 1) // BLOCK * BLOCK
    got = client.responses.retrieve(turn1.id)
    assert got.id == turn1.id and got.output[0].call_id == call.call_id
    other = openai.OpenAI(base_url=f"{graph_url}/v1", api_key="key-b")
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(turn1.id)  # scoped to the API key
    client.responses.delete(turn1.id)
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.retrieve(turn1.id)
    assert exc.value.body["type"] == "not_found_error"


def test_unknown_previous_response_id_is_404(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.responses.create(model="smollm2", input="rsp-hello", previous_response_id="resp_nope")
    assert exc.value.body["param"] == "previous_response_id"


def test_store_false_is_not_retrievable(client):
    resp = client.responses.create(model="smollm2", input="rsp-hello", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_provider_prefixed_model_id_resolves(client):
    resp = client.responses.create(model="openai/openai/smollm2", input="rsp-hello")
    assert resp.model == "openai/openai/smollm2" and resp.output_text == "Hello from responses."
