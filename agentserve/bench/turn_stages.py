"""What each stage of the serving path costs one agent turn's request, measured in this process (no Ray).

The long-session benchmark (agentserve/bench/long_session.py) hands over the bodies its largest session sent: the
session's next turn (`body`) and the request before it (`previous`), with the graph's kept-turn store (the state
directory the graph ran with) and secret key, so the same conversation is measured here stage by stage:

* ingress: JSON parse, the body limits, pydantic validation (MessagesRequest), decode into a GenerationRequest
  (thinking signatures verified, the billing preamble stripped, hints), as the Messages handler does;
* crossings, as agentserve's handles ship them (plain pickle, highest protocol; agentserve/serve/handles.py):
  the GenerationRequest (Ingress -> Preprocessor), the Preprocessed result (back), its EngineRequest (-> Engine);
* Preprocessor.preprocess: next turn (the replica made the previous request's prompt: its PromptMemo holds it,
  preprocess/incremental.py), the same request again, cold (a replica that never saw the session: empty memos, the
  previous prompt rebuilt from the kept turns' links); with its parts on their own: replay keys (the digest chain),
  the kept-turn lookup of every earlier turn (what the cold path reads), block hashing of the whole prompt (what the
  cold path hashes; a warm turn hashes only the blocks past the previous prompt);
* the prefix doctor: the check of a prompt that extends the previous turn (the healthy next turn), the check of the
  same prompt again (it does not extend the previous turn's prompt + output: diagnosed on the doctor's thread), and
  recording the turn at its end.

Each stage: p50 / p90 of `samples` runs after one warm-up (cold: `cold_samples` runs, each from an empty memo).
"""

from __future__ import annotations

import asyncio
import pickle
import time
from typing import Any, Callable

from agentserve.bench.stats import summary


def timed(fn: Callable[[], Any], samples: int, *, warmup: int = 1, before: Callable[[], Any] | None = None) -> list[float]:
    """`samples` wall times of fn() in ms, after `warmup` untimed runs; `before()` runs untimed ahead of each."""
    out = []
    for i in range(warmup + samples):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        if i >= warmup:
            out.append((time.perf_counter() - t) * 1000)
    return out


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def measure(
    body: bytes,
    previous: bytes,
    *,
    args: Any,  # the graph's ServeArgs (settled: secret key and data directory as the replicas had them)
    session_id: str,
    output_ids: list[int],  # what the engine generated after `previous` (the turn `body` sends back)
    samples: int,
    cold_samples: int,
) -> dict[str, dict[str, float]]:
    from agentserve.apis import anthropic
    from agentserve.apis.anthropic.schema import MessagesRequest
    from agentserve.doctor import PrefixDoctor
    from agentserve.ingress.hints import with_hints
    from agentserve.ingress.lineage import read_lineage, with_lineage
    from agentserve.ingress.http import parse_json
    from agentserve.ingress.middleware import limits
    from agentserve.ingress.middleware.auth import identity_of
    from agentserve.kv_events.block_hash import block_hashes
    from agentserve.preprocess.preamble import strip_anthropic_preamble
    from agentserve.preprocess.preprocessor import Preprocessor
    from agentserve.preprocess.incremental import PromptMemo
    from agentserve.preprocess.splice import SpanMemo
    from agentserve.serve.heap import freeze_startup_heap
    from agentserve.state.kept_turns import open_kept_turns

    import orjson

    spec = args.resolve_catalog().default
    engine = args.resolve_catalog().engine(spec.id)
    kept = open_kept_turns(args.kept_turns, args.state)
    pre = Preprocessor(spec, str(spec.resolve_path()), engine.block_size, kept=kept, scripted=engine.kind == "scripted",
                       clamp_max_tokens=args.clamp_max_tokens, sort_tools=args.normalize_sort_tools)
    signer = anthropic.ThinkingSigner(args.secret_key, previous=args.previous_secret_keys)
    headers = {"x-claude-code-session-id": session_id}
    scope = identity_of(None)  # the caller's scope without API keys, as the ingress keys kept turns

    def decode_validated(req: MessagesRequest):
        gen = anthropic.decode(req, request_id="req_stage", model=spec.id, signer=signer, caller=scope,
                               session_id=session_id)
        gen = gen.model_copy(update={"conversation": strip_anthropic_preamble(gen.conversation)[0]})
        return with_lineage(with_hints(gen, headers, req), read_lineage(headers))

    def decode(raw: bytes):
        return decode_validated(parse_json(raw, MessagesRequest, args.limits))

    out: dict[str, list[float]] = {}
    freeze_startup_heap()  # as every replica does after start-up: the stages' collections walk what they made
    data = orjson.loads(body)
    validated = MessagesRequest.model_validate(data)
    out["ingress: JSON parse"] = timed(lambda: orjson.loads(body), samples)
    out["ingress: body limits"] = timed(lambda: limits.check_body(data, args.limits), samples)
    out["ingress: validate (MessagesRequest)"] = timed(lambda: MessagesRequest.model_validate(data), samples)
    out["ingress: decode -> GenerationRequest"] = timed(lambda: decode_validated(validated), samples)
    out["ingress: whole decode"] = timed(lambda: decode(body), samples)
    gen, gen_prev = decode(body), decode(previous)
    blob = _dumps(gen)
    out["crossing: GenerationRequest dumps"] = timed(lambda: _dumps(gen), samples)
    out["crossing: GenerationRequest loads"] = timed(lambda: pickle.loads(blob), samples)

    # Cold: each from empty memos (a replica that never saw the session: the previous prompt is rebuilt from the
    # kept turns' links). Warm: the replica made the previous request's prompt (its PromptMemo holds it).
    def forget() -> None:
        pre._spans = SpanMemo()  # noqa: SLF001
        pre._prompts = PromptMemo()  # noqa: SLF001

    out["preprocess: cold (replica never saw the session)"] = timed(
        lambda: pre.preprocess(gen, scope), cold_samples, warmup=0, before=forget)
    forget()
    pre.preprocess(gen_prev, scope)  # the previous turn, as the replica that served it made it
    out["preprocess: warm, next turn"] = timed(lambda: pre.preprocess(gen, scope), samples)
    out["preprocess: warm, same request again"] = timed(lambda: pre.preprocess(gen, scope), samples)
    done = pre.preprocess(gen, scope)
    outcomes = dict(done.report.replay_outcomes)
    keys = pre.replay_keys(gen, scope)
    out["preprocess part: replay keys (digest chain)"] = timed(lambda: pre.replay_keys(gen, scope), samples)
    if kept is not None:
        out["preprocess part: kept-turn lookup"] = timed(lambda: kept.get_many(list(keys.slots.values())), samples)
    ids = done.engine.token_ids
    out["preprocess part: block hashing, whole prompt (cold)"] = timed(lambda: block_hashes(ids, engine.block_size, None), samples)
    back = _dumps(done)
    out["crossing: Preprocessed dumps"] = timed(lambda: _dumps(done), samples)
    out["crossing: Preprocessed loads"] = timed(lambda: pickle.loads(back), samples)
    eng = _dumps(done.engine)
    out["crossing: EngineRequest dumps"] = timed(lambda: _dumps(done.engine), samples)
    out["crossing: EngineRequest loads"] = timed(lambda: pickle.loads(eng), samples)

    prev_ids = pre.preprocess(gen_prev, scope).engine.token_ids
    doctor = PrefixDoctor.from_args(args, pre._tok)  # noqa: SLF001 - the ingress's doctor, its tokenizer
    loop = asyncio.new_event_loop()
    try:
        session = f"{scope}/{spec.id}/{session_id}"
        doctor.record(session, prev_ids, output_ids)
        report = loop.run_until_complete(doctor.check(session, ids))
        healthy = report is not None and report.cause is None
        out["doctor: check, next turn"] = timed(lambda: loop.run_until_complete(doctor.check(session, ids)), samples)
        out["doctor: record the turn"] = timed(lambda: doctor.record(session, ids, output_ids), samples)
        out["doctor: check, same request again (diagnosed)"] = timed(
            lambda: loop.run_until_complete(doctor.check(session, ids)), samples)
    finally:
        doctor.close()
        loop.close()
        if kept is not None:
            kept.close()
    result: dict[str, Any] = {k: summary(v, digits=3) for k, v in out.items()}
    result["_facts"] = {"prompt_tokens": len(ids), "body_bytes": len(body), "replay_outcomes": outcomes,
                        "doctor_next_turn_extends": healthy, "generation_request_bytes": len(blob),
                        "preprocessed_bytes": len(back)}
    return result

