"""ServeArgs: everything `build_app` needs, validated once at deploy time.

The same object is passed (as a plain dict from serve_config.yaml `args`) to every deployment,
so each one reads only the part it needs.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TruncationPolicy(_Strict):
    """How Codex truncates tool output before sending it back (4 bytes/token heuristic in tokens mode)."""

    mode: Literal["tokens", "bytes"] = "tokens"
    limit: int = 10_000


class ModelProfile(_Strict):
    """What an agent harness (Codex) shapes its behaviour from: served as Codex's ModelInfo.

    Codex picks tools, reasoning parameters, parallel calls and tool-output truncation from this;
    an id that resolves to no profile falls back to conservative defaults (fewer, smaller tool calls).
    """

    display_name: str | None = None  # None: the model id
    description: str | None = None
    max_output_tokens: int | None = None  # None: up to the context window
    truncation_policy: TruncationPolicy = TruncationPolicy()
    supports_reasoning_summaries: bool = True
    default_reasoning_level: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = "medium"
    supported_reasoning_levels: tuple[Literal["none", "minimal", "low", "medium", "high", "xhigh"], ...] = (
        "low",
        "medium",
        "high",
    )
    supports_parallel_tool_calls: bool = True
    shell_type: Literal["default", "local", "unified_exec", "disabled", "shell_command"] = "shell_command"
    # How Codex offers apply_patch: "freeform" (a custom tool under its Lark grammar, which agentserve constrains
    # decoding to), "function" (a JSON function tool), None (none: Codex patches through its shell tool). "auto":
    # freeform where the model's tool-call format can be constrained (preprocess/constrain.py), else function: an
    # unconstrained freeform tool is the one local models loop on ("Invalid patch") or give up for `sed`.
    apply_patch_tool_type: Literal["auto", "freeform", "function"] | None = "auto"
    base_instructions: str = (
        "You are a coding agent running in the Codex CLI. Use the tools to inspect and change the "
        "workspace, keep answers short, and finish with a brief summary of what you did."
    )
    support_verbosity: bool = False
    priority: int = 1


class LoraAdapterSpec(_Strict):
    """A LoRA adapter of one catalog model, served under its own id."""

    id: str  # the served model id, e.g. "smollm2-pirate"
    path: str  # local PEFT adapter directory (adapter_config.json + adapter_model.safetensors)
    aliases: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


class RepetitionSpec(_Strict):
    """A degenerate loop: the last `min_tokens` output tokens repeat one unit of at most `max_period` tokens (the same
    sentence again and again, a token run). Small models fall into these and write until their cap; what they wrote
    before the loop already went out, the rest would be the loop again (ingress/output/repetition.py)."""

    min_tokens: int = Field(default=160, ge=4)
    max_period: int = Field(default=64, ge=1)

    @model_validator(mode="after")
    def _two_periods(self) -> "RepetitionSpec":
        if self.min_tokens < 2 * self.max_period:
            raise ValueError("stop_repetition.min_tokens must be at least twice max_period (a loop repeats its unit)")
        return self


class ModelSpec(_Strict):
    """One served model: its catalog identity, how its output is parsed, and (in the catalog form) its engine."""

    id: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    aliases: tuple[str, ...] = ("smollm2", "smollm2-135m-instruct")
    # Local checkpoint directory; None means the embedded default (prepared on first use).
    path: str | None = None
    context_window: int = 8192
    # A server-side cap on each request's output tokens (None: what the window leaves). A client's larger max_tokens
    # is granted up to it and told so (`x-agentserve-max-tokens-clamped`), as past the window: harnesses ask for
    # 32K tokens a turn, which a small model on CPU spends repeating itself for many minutes.
    max_output_tokens: int | None = Field(default=None, ge=1)
    # How a turn that this cap ended finishes: "length" (Anthropic max_tokens, Responses incomplete, chat length: the
    # output was cut) or "stop" (end_turn / completed / stop: the server ended the turn). Claude Code meets a
    # max_tokens stop by asking again with max_tokens 128000 and, capped again, fails the task ("API Error: Claude's
    # response exceeded the 128000 output token maximum"): a server that caps a small model says "stop".
    max_output_tokens_finish: Literal["length", "stop"] = "length"
    # Ends a turn whose output has become a loop (RepetitionSpec; None: never), as "stop".
    stop_repetition: RepetitionSpec | None = None
    reasoning_parser: str | None = "qwen3"
    tool_call_parser: str | None = "hermes"
    skip_special_tokens: bool = True
    # Reasoning effort -> thinking-token budget (Responses reasoning.effort, chat reasoning_effort, Anthropic
    # output_config.effort, Codex's reasoning levels); "none" turns thinking off; a level not listed: no limit.
    reasoning_budgets: dict[str, int] = Field(
        default_factory=lambda: {"minimal": 128, "low": 512, "medium": 2048, "high": 8192, "xhigh": 16384}
    )
    owned_by: str = "agentserve"
    # Replay policy family (preprocess/replay.py); None: follows from the reasoning parser.
    replay_family: str | None = None
    profile: ModelProfile = ModelProfile()
    # This model's engine; None: ServeArgs.engine. ServeArgs.resolve_catalog() fills it in.
    engine: "EngineSpec | None" = None
    # LoRA adapters of this model, each served under its own id; non-empty: the engine runs with LoRA enabled.
    adapters: tuple[LoraAdapterSpec, ...] = ()
    max_lora_rank: int = Field(default=16, ge=1)
    # What the model reads: ("text",), or ("text", "image") for a vision model, whose images reach the engine as
    # multi-modal data with its template's image placeholder where each stood. Codex's model profile reports it.
    input_modalities: tuple[Literal["text", "image"], ...] = ("text",)
    # The text the template renders for one image (Qwen2-VL: "<|vision_start|><|image_pad|><|vision_end|>");
    # None: probed from the chat template as the Preprocessor starts (preprocess/images.py).
    image_placeholder: str | None = None
    # A request carrying input this model does not read (an image to a text-only model, a PDF to any model):
    # "error" refuses it (400 naming the block), "placeholder" puts a fixed text in its place so the session goes
    # on (the same text every turn, so the prompt stays a cached prefix). apis/media.py.
    unsupported_media: Literal["error", "placeholder"] = "error"

    @model_validator(mode="before")
    @classmethod
    def _modalities_moved(cls, data: Any) -> Any:
        profile = data.get("profile") if isinstance(data, dict) else None
        if isinstance(profile, dict) and "input_modalities" in profile:
            raise ValueError("input_modalities is the model's (ModelSpec.input_modalities), no longer its profile's: "
                             "move it up one level; Codex's profile reports it from there")
        return data

    @model_validator(mode="after")
    def _reads_text(self) -> "ModelSpec":
        if "text" not in self.input_modalities:
            raise ValueError('input_modalities must include "text"')
        return self

    @model_validator(mode="after")
    def _freeform_needs_constraints(self) -> "ModelSpec":
        if self.profile.apply_patch_tool_type == "freeform" and not self._constrainable():
            raise ValueError(
                f"profile.apply_patch_tool_type freeform needs a tool-call format agentserve can constrain to the patch "
                f"grammar; {self.tool_call_parser!r} is not one: use function (or auto)"
            )
        return self

    def _constrainable(self) -> bool:
        from agentserve.preprocess.constrain import CALL_FORMATS  # the formats calls can be constrained in

        return self.tool_call_parser in CALL_FORMATS

    def apply_patch_tool_type(self) -> Literal["freeform", "function"] | None:
        """What Codex's model profile says (`auto` resolved for this model's tool-call format)."""
        kind = self.profile.apply_patch_tool_type
        if kind == "auto":
            return "freeform" if self._constrainable() else "function"
        return kind

    def names(self) -> tuple[str, ...]:
        """The names that reach this base model (its adapters' names are theirs: `served_names`)."""
        return (self.id, *self.aliases)

    def served_names(self) -> tuple[str, ...]:
        """Every name a request may use for this model: its own and those of its adapters."""
        return (*self.names(), *(n for a in self.adapters for n in a.names()))

    def resolve_path(self) -> Path:
        if self.path is not None:
            return Path(self.path).expanduser()
        from agentserve.prepare.model import prepare_model

        return prepare_model()


class ScriptRule(_Strict):
    match: str = ""
    reply: str
    itl_ms: float = 0.0
    # The LoRA adapter this rule answers for (None: any request, the base model's or an adapter's).
    adapter: str | None = None


class ScriptedCache(_Strict):
    """The scripted engine's model of a block prefix cache."""

    capacity_blocks: int = 4096
    prefill_ms_per_token: float = 0.0  # simulated cost of each uncached prompt token


class EngineSpec(_Strict):
    kind: Literal["vllm", "scripted"] = "vllm"
    block_size: int = 128  # the CPU platform's default; 16 is usual on GPUs
    # vllm
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    kv_cache_gib: float | None = 1.0  # CPU KV cache size; None leaves vLLM's own sizing
    max_num_seqs: int = 64
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)  # any other AsyncEngineArgs field
    # Publish KV cache events (vLLM's ZMQ format) for the router's prefix index; False: it learns approximately.
    kv_events: bool = True
    num_replicas: int | None = None  # None: the serve config's `deployments` (or 1) decides
    # Stream chunks one replica sends per second across all its requests, after each request's first (always at
    # once). Each chunk costs two Ray hops' worth of CPU (engine -> ingress -> proxy) whatever it carries, so at
    # hundreds of streams tokens travel in groups: a request's chunks are spaced by running requests / this.
    # One stream is never delayed (1 / 1000 s); 256 streams get theirs every 256 ms. None: every engine step is its
    # own chunk. Measured in docs/BENCHMARKS.md ("Ingress capacity"): 1000 carries the most tokens per ingress core.
    max_chunks_per_s: float | None = Field(default=1000.0, gt=0)
    # scripted
    script: str | None = None  # path to the JSON rule list
    rules: tuple[ScriptRule, ...] = ()  # inline alternative to `script`
    cache: ScriptedCache = ScriptedCache()

    @model_validator(mode="after")
    def _scripted_needs_rules(self) -> "EngineSpec":
        if self.kind == "scripted" and self.script is None and not self.rules:
            raise ValueError("engine.kind=scripted needs `script` (a JSON rule file) or inline `rules`")
        return self


class SchedulingSpec(_Strict):
    """Session-aware scheduling in the Router (agentserve/routing/scheduling, routing/kv_pressure.py), each part a
    switch; all off (the default) is FCFS admission with the engine's LRU deciding whose KV goes. The ordering
    parts act only when requests wait in the Router's admission queue, i.e. when replicas are saturated
    (max_in_flight_per_replica / max_active_tokens_per_replica / max_prefill_tokens_per_replica); see OPERATIONS."""

    session_fairness: bool = False  # least attained service per session first
    interactive_first: bool = False  # user messages ahead of tool results, compactions, other
    key_shares: bool = False  # per-key weighted shares of service at saturation
    # sha256 hex digests of API keys -> weight; unlisted keys weigh default_key_weight.
    key_weights: dict[str, float] = Field(default_factory=dict)
    default_key_weight: float = Field(default=1.0, gt=0)
    service_half_life_s: float = Field(default=60.0, gt=0)  # attained service decays with this half-life
    # Session fairness: each second a request waits offsets this much of its session's attained service (0: pure
    # least attained service, which holds a long session's turns until they are shed while short ones arrive).
    aging_tokens_per_s: float = Field(default=500.0, ge=0)
    # KV-pressure awareness: which sessions in a tool gap keep their blocks; new work that would evict them waits.
    kv_pressure: bool = False
    kv_high_watermark: float = Field(default=0.9, gt=0, le=1.0)
    kv_keep_gap_s: float = Field(default=30.0, gt=0)
    kv_max_defer_s: float = Field(default=10.0, ge=0)  # held back for KV room this long: placed anyway (LRU evicts)
    # A request whose best replica (its cached prefix counted) is saturated waits for it, rather than re-prefilling
    # its context on a worse replica that has a free slot.
    wait_for_cache: bool = False
    max_cache_wait_s: float = Field(default=30.0, ge=0)  # then it takes a free replica after all
    # With an ordering part on, a full queue rejects its lowest-ranked waiter instead of a higher-ranked newcomer.
    shed_lowest: bool = True
    # The ordering parts order a waiting request only once it has waited this long (a priority hint counting as time
    # waited); until then it keeps its FCFS place. 0: ranked on arrival. The default, 1 s, is several prefills of a
    # few thousand tokens on a GPU: longer than most waits below saturation, short beside a backlog's (OPERATIONS 3d).
    rank_after_wait_s: float = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _weights(self) -> "SchedulingSpec":
        if any(w <= 0 for w in self.key_weights.values()):
            raise ValueError("router.scheduling.key_weights are positive")
        if not all(re.fullmatch(r"[0-9a-f]{64}", k) for k in self.key_weights):
            raise ValueError("router.scheduling.key_weights are keyed by sha256 hex digests of API keys")
        return self


class RouterSpec(_Strict):
    """The KV-aware router (agentserve/routing): cost weights, index mode, admission limits."""

    policy: Literal["kv", "approx", "least_loaded", "round_robin"] = "kv"  # kv falls back to approx per replica without events
    # Router replicas, each with the whole prefix index (serve/deployments/router_calls.py): 2+ leaves no single
    # Router to lose. A serve config's `deployments: [{name: Router, num_replicas: N}]` still overrides it.
    replicas: int = Field(default=1, ge=1)
    # Weight of prefill work (uncached + pending prompt tokens) against active KV blocks. Dynamo's default is 1;
    # with long agent prompts that lets decode blocks swamp the cache term (see docs/BENCHMARKS.md, router).
    overlap_weight: float = Field(default=16.0, ge=0)
    temperature: float = Field(default=0.0, ge=0)  # > 0: softmax sampling over normalised costs
    default_osl: int = Field(default=256, ge=0)  # expected output tokens when the `osl` hint is absent
    # A session's turn stays on its last replica unless another saves it more than this much prefill.
    session_stay_tokens: int = Field(default=1024, ge=0)
    # A new session goes only to replicas carrying <= this x the mean sessions (seen in the last resident_s);
    # null: placed by cost alone (new sessions then crowd onto replicas caching a popular system prompt).
    session_spread: float | None = Field(default=1.1, ge=1.0)
    resident_s: float = Field(default=30.0, gt=0)
    max_in_flight_per_replica: int | None = Field(default=256, ge=1)
    max_active_tokens_per_replica: int | None = Field(default=None, ge=1)
    # Uncached prompt tokens routed to a replica and not yet prefilled: past this it takes no new request, so the
    # rest wait in the Router, in the scheduling order (None: no such bound; the engine's own queue is FCFS).
    max_prefill_tokens_per_replica: int | None = Field(default=None, ge=1)
    max_waiting: int = Field(default=1024, ge=0)  # admission queue when every replica is saturated
    max_wait_s: float = Field(default=30.0, gt=0)
    retry_after_s: float = Field(default=2.0, gt=0)
    replica_timeout_s: float = Field(default=10.0, gt=0)  # a replica silent this long leaves the index
    approx_ttl_s: float = Field(default=120.0, gt=0)
    # A routed request's slot is a lease: the engine renews it on every heartbeat while the request runs; one
    # nobody renews this long (ingress died, client left before the engine started it) is released.
    lease_s: float = Field(default=15.0, gt=0)
    speculative_prefill: bool = True  # honour the `speculative_prefill` agent hint
    max_speculative_prefills: int = Field(default=16, ge=0)  # in flight per ingress replica; more are skipped
    # Who may raise `priority` / `latency_sensitivity` hints: sha256 digests of API keys, or "*" for every
    # caller. Everyone else's hints are clamped to the default (0 / none): scheduling is not self-service.
    priority_keys: tuple[str, ...] = ()
    scheduling: SchedulingSpec = SchedulingSpec()


class ResponseStoreSpec(_Strict):
    """Bounds of the Responses API store (`store: true`, `previous_response_id`), enforced in the state
    backend's database: past max_entries or max_bytes the least recently used responses go first; an entry
    unused for ttl_s expires."""

    max_entries: int = Field(default=10_000, ge=1)
    max_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    ttl_s: float = Field(default=24 * 3600.0, gt=0)
    # Per owner (API key): past these, that owner's own least recently used responses go. None: the store's caps.
    # Past the store's caps, the owner holding the most bytes loses its least recently used first, so one key's
    # `store: true` traffic never evicts another's `previous_response_id` chains while it holds more than they do.
    max_entries_per_owner: int | None = Field(default=None, ge=1)
    max_bytes_per_owner: int | None = Field(default=None, ge=1)


class KeptTurnsSpec(_Strict):
    """Token-exact replay (preprocess/splice.py): every finished assistant turn's generated token ids are kept in
    the state backend under a digest of its content and history, and an earlier assistant turn a client sends
    back with the same content goes back into the prompt as those tokens instead of the template's re-rendering
    (which differs wherever the model's spelling did: whitespace around reasoning, JSON spacing, key order).

    enabled: keep and splice (off: every turn is re-rendered; the doctor names `output_rerendered`). Bounds as
    the Responses store's: past max_entries or max_bytes the least recently used go first, unused for ttl_s
    they expire. commit_wait_s: how long the end of a stream may wait for its turn's batch to be committed, so
    a follow-up sent the moment the stream ends finds it (the tokens themselves never wait). prompt_memo_bytes:
    the prompts each Preprocessor replica made, kept so a session's next turn extends its prompt without reading it
    back (preprocess/incremental.py). conversation_memo_bytes: the bound of each per-session memory of a replica:
    the conversations each Ingress replica last sent and each Preprocessor replica was sent, so a session's next
    request crosses as its new turns (ingress/sent_conversations.py), and the Messages requests each Ingress replica
    last decoded, so the next decodes only its new messages (apis/anthropic/session_memo.py); 0: all of it whole.
    """

    enabled: bool = True
    max_entries: int = Field(default=200_000, ge=1)
    max_bytes: int = Field(default=1024 * 1024 * 1024, ge=1)
    ttl_s: float = Field(default=24 * 3600.0, gt=0)
    commit_wait_s: float = Field(default=0.25, ge=0)
    prompt_memo_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    conversation_memo_bytes: int = Field(default=128 * 1024 * 1024, ge=0)
    # Sessions whose latest turn is remembered for warm starts (WarmStartSpec), the most recent first.
    max_session_heads: int = Field(default=4096, ge=1)


class WarmStartSpec(_Strict):
    """A new engine replica (a restart, a redeploy, a scale-up) re-prefills the sessions that were live before it
    registers with the Router, so their next turns find their prefix cached (serve/warm_start.py). What it prefills
    is each session's latest kept turn (its prompt and output, rebuilt from the state backend's kept turns, under
    the session's own cache partition and adapter): the most recent sessions first, at most max_sessions, within
    max_kv_share of the engine's KV cache and max_seconds (the prompt running at the deadline is cut; what it
    computed stays cached). Needs kept turns on; with SQLite only the engines on the state's node see them.
    """

    enabled: bool = True
    max_sessions: int = Field(default=32, ge=0)
    max_kv_share: float = Field(default=0.5, gt=0, le=1)
    max_seconds: float = Field(default=60.0, ge=0)


class StateSpec(_Strict):
    """Where state that outlives a process lives: the Responses store, per-key limits, the generated secret key.

    sqlite: one file under data_dir (no server; shared by the replicas of one node). postgres: a server every
    node reaches, for clusters. data_dir None: env AGENTSERVE_DATA_DIR, else ~/.local/share/agentserve.
    postgres_dsn None: env AGENTSERVE_POSTGRES_DSN (so Kubernetes can supply it from a Secret).
    """

    backend: Literal["sqlite", "postgres"] = "sqlite"
    data_dir: str | None = None
    postgres_dsn: str | None = None
    # PostgreSQL connections one replica process holds at most (its store, kept turns and limits share one pool).
    # At the k8s maxima (8 ingress + 16 preprocessor replicas) 4 each is 96 against the server's default
    # max_connections of 100; see docs/OPERATIONS.md before raising it or the replica counts.
    postgres_pool_size: int = Field(default=4, ge=1)
    postgres_connect_timeout_s: float = Field(default=10.0, gt=0)
    # How often each Ingress replica re-counts the stores' running totals from their rows, in the background
    # (state/upkeep.py: drift from writers that did not keep them cannot accumulate). None: never.
    totals_recount_interval_s: float | None = Field(default=3600.0, gt=0)


class LimitsSpec(_Strict):
    """What one request may ask for, and how much one API key may use (ingress/middleware/limits.py).

    Per-key limits are global across ingress replicas: they are held in the state backend (ServeArgs.state),
    concurrency as leases that expire lease_ttl_s after their holder stops renewing them (a crashed ingress
    frees its slots), rate as one token bucket row per key. Unset (the default), they cost nothing.
    """

    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1)  # as sent (compressed or not)
    # The JSON a body holds once decoded (an uncompressed body is held to it as sent). Agent bodies are far smaller:
    # a 300-turn Claude Code session is 0.8-2 MiB, a 1000-turn one 2.5-6.5 MiB (bench/claude_code_shape.py), more
    # than any context window holds; parsing costs up to ~20x its size in memory for dense JSON, hence not more.
    max_decompressed_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    # Every array element and object member in the body, at any depth (content blocks, tool_calls, `tokens`,
    # unknown fields): what the parse, the limits walk and validation cost is linear in. A 300-turn Claude Code
    # session holds ~7.8K, a 1000-turn one ~25K; /detokenize of a 128K-token window 128K. Validation holds the GIL
    # (~1 us per element of dense content blocks) even in a worker thread: this bounds that stall to ~0.15 s.
    max_json_items: int = Field(default=131_072, ge=1)
    max_messages: int = Field(default=10_000, ge=1)  # messages / input items
    max_tools: int = Field(default=1_024, ge=0)
    max_string_chars: int = Field(default=16 * 1024 * 1024, ge=1)  # any one JSON string in the body
    max_json_depth: int = Field(default=64, ge=2)  # nesting of the whole body (tool schemas included)
    max_tool_schema_depth: int = Field(default=32, ge=1)  # nesting inside one tool's input schema
    max_concurrent_per_key: int | None = Field(default=None, ge=1)  # generation requests in flight
    requests_per_minute_per_key: float | None = Field(default=None, gt=0)  # generation requests (token bucket)
    burst_per_key: int | None = Field(default=None, ge=1)  # bucket size; None: a minute's worth
    lease_ttl_s: float = Field(default=30.0, ge=1)  # a concurrency slot outlives a dead ingress this long
    # Connections (ingress/handlers/responses_socket.py, serve/client_headers.py). A WebSocket frame is a request
    # body, capped at the smaller of this and max_body_bytes; frames a client sends ahead of the one being answered
    # may hold max_ws_queued_bytes, past that the connection is closed (1008). Codex sends one request at a time,
    # but its acknowledgement of a response and its next request can both arrive before the first is taken: the
    # default holds one full frame and a little more.
    max_ws_frame_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    max_ws_queued_bytes: int = Field(default=17 * 1024 * 1024, ge=0)
    ws_idle_timeout_s: float = Field(default=3600.0, gt=0)  # no frame and no response in progress this long: closed
    max_websockets_per_key: int | None = Field(default=64, ge=1)  # open WebSockets per key, per ingress replica
    # Ray Serve lets a client set its own request timeout (`x-request-timeout-seconds`; Codex sends 86400 for its
    # session socket) and turn off the abort on disconnect (`x-request-disconnect-disabled: ?1`). The ingress
    # clamps the first to this (0, negative or malformed: the configured request_timeout_s) and drops the second.
    max_request_timeout_s: float = Field(default=86400.0, gt=0)


class DoctorSpec(_Strict):
    """The ingress's prefix doctor (agentserve/doctor): its memory of each session's last turn.

    Each ingress replica keeps up to max_bytes of last turns (4 bytes per token: 256 MiB holds ~670 sessions
    at 100K tokens), least recently used first out. Off: no `x-agentserve-prefix` header, no prefix metrics.
    """

    enabled: bool = True
    max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    # Who gets the `x-agentserve-prefix` header. "keys": only when API keys are configured (a caller then sees its
    # own key's sessions only); without keys every caller shares one identity, and the header's reuse counts would
    # let one recover another's prompt. "always": every caller (one trusted user, e.g. loopback). "never": no one.
    header: Literal["keys", "always", "never"] = "keys"


class AdminSpec(_Strict):
    """The admin routes (`/v1/admin/*`, run-time LoRA adapters): off (404) unless an admin credential is set.

    keys: sha256 hex digests of admin keys (AGENTSERVE_ADMIN_KEYS adds plain ones); an API key never opens them.
    adapter_root: run-time adapter paths must lie under it after realpath (None: run-time loads are refused);
    max_runtime_adapters: adapters loaded at run time per model (each holds engine memory until a restart).
    """

    keys: tuple[str, ...] = ()
    adapter_root: str | None = None
    max_runtime_adapters: int = Field(default=8, ge=0)


class RequestTraceSpec(_Strict):
    """Request traces (agentserve/traces): one JSON line per request end (traces/record.py), no payload; and, where
    an OTLP endpoint is set, OpenTelemetry spans across Ingress, Preprocessor, Router and Engine.

    enabled: write the JSON lines. Each Ingress replica writes `<directory>/requests-<host>-<pid>.jsonl` (files 0600,
    the directory 0700 if made here), rotated past max_bytes_per_file to `.1` .. `.<keep_files>` (the oldest is
    deleted), off the event loop: up to max_pending_bytes of records wait for the disk, past that they are dropped
    and counted (`agentserve_request_traces_total{outcome="dropped"}`), never waited for.
    session_memo_bytes bounds each Ingress replica's memory of when each session's previous response ended (gap_s).
    otlp_endpoint: an OTLP/HTTP endpoint (`http://collector:4318`, or the full `.../v1/traces`) every deployment
    exports spans to; None: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT of each replica's
    environment when `enabled`, else no spans (and no OpenTelemetry set-up at all).
    """

    enabled: bool = False
    directory: str | None = None  # None: <state data dir>/traces
    max_bytes_per_file: int = Field(default=256 * 1024 * 1024, ge=4096)
    keep_files: int = Field(default=4, ge=0)  # rotated files kept beside the current one
    max_pending_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    session_memo_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    otlp_endpoint: str | None = None
    otlp_export_interval_s: float = Field(default=2.0, gt=0)  # the span batch's delay before export


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for a host only this machine reaches (127.0.0.0/8, ::1, localhost); 0.0.0.0 and names are not."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def engine_deployment_slug(model_id: str) -> str:
    """A model id as a Serve deployment name suffix (`HuggingFaceTB/SmolLM2-135M` -> `HuggingFaceTB-SmolLM2-135M`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", model_id).strip("-") or "model"


class ServeArgs(_Strict):
    # The single-model form: one model served by `engine` (deployment `Engine`).
    model: ModelSpec = ModelSpec()
    # The catalog form: several models, each with its own engine (deployment `Engine-<slug of its id>`, so each is
    # scaled on its own); non-empty replaces `model`. A model without `engine` gets ServeArgs.engine.
    models: tuple[ModelSpec, ...] = ()
    engine: EngineSpec = EngineSpec()
    # After the first chunk, engine deltas that queue up while one is in flight are merged.
    coalesce_stream: bool = True
    enable_streaming_tool_dispatch: bool = False
    # Key for what the server seals and later verifies (thinking signatures, encrypted reasoning).
    # None: env AGENTSERVE_SECRET_KEY, else one generated once and kept in the state data directory
    # (agentserve/state/secrets.py). build_app only checks it; the Ingress (the one deployment that signs) reads it
    # when its replica starts (serve/state_args.py): prefer the env var, since Serve keeps these args in its checkpoint.
    # A weak one (short, a placeholder, a few characters repeated) is refused at start, as are weak previous keys:
    # make one with `python -c "import secrets; print(secrets.token_urlsafe(32))"`.
    secret_key: str | None = None
    # Append every finished turn's prompt and output token ids here (for `agentserve doctor TRACE`).
    trace_path: str | None = None
    # Request traces and OpenTelemetry spans (RequestTraceSpec): off unless switched on.
    request_traces: RequestTraceSpec = RequestTraceSpec()
    response_store: ResponseStoreSpec = ResponseStoreSpec()
    router: RouterSpec = RouterSpec()
    # Remove Claude Code's per-session `x-anthropic-billing-header: ...` text from system prompts before
    # tokenizing (it would otherwise defeat the prefix cache on every new session).
    strip_anthropic_preamble: bool = True
    # Render tool definitions in name order whatever order the client sent (preprocess/normalize.py). Off by
    # default: it changes the prompt the model sees; `agentserve bench normalize` measures what it saves.
    normalize_sort_tools: bool = False
    # max_tokens past what the window leaves after the prompt (Claude Code asks for a fixed 32K whatever the
    # model): cut to what is left and say so in `x-agentserve-max-tokens-clamped`. False: refuse, in each API's
    # own words. A prompt that alone fills the window is refused either way.
    clamp_max_tokens: bool = True
    # Anthropic streams send `ping` when no event has gone out for this long (long prefills, long gaps).
    keepalive_interval_s: float = Field(default=5.0, gt=0)
    # API keys as sha256 hex digests (never the keys themselves); AGENTSERVE_API_KEYS adds plain keys (comma
    # separated) that build_app hashes. Empty: no authentication. See ingress/middleware/auth.py.
    api_keys: tuple[str, ...] = ()
    limits: LimitsSpec = LimitsSpec()
    # Where the Responses store, per-key limits and the generated secret key live (agentserve/state).
    state: StateSpec = StateSpec()
    # Keys that signed or sealed earlier: still accepted when verifying, never used to sign (key rotation).
    # AGENTSERVE_PREVIOUS_SECRET_KEYS (comma separated) adds to them.
    previous_secret_keys: tuple[str, ...] = ()
    # A k8s or multi-node deployment refuses to start with a generated secret key unless this is true.
    allow_generated_secret_key: bool = False
    # The prefix doctor's bounds (DoctorSpec); its trace file is trace_path.
    doctor: DoctorSpec = DoctorSpec()
    # Token-exact replay of earlier assistant turns (KeptTurnsSpec), kept in the state backend.
    kept_turns: KeptTurnsSpec = KeptTurnsSpec()
    # What a new engine replica prefills before it takes traffic (WarmStartSpec).
    warm_start: WarmStartSpec = WarmStartSpec()
    # The engines' prefix cache. "per_key": each API key's prompts are cached apart (vLLM's `cache_salt`, also in
    # the router's block hashes), so no key can learn from cached-token counts what another sent; one key's
    # sessions still share. Cost: a system prompt common to many keys is prefilled and held once per key.
    # "shared": one cache for every caller (the most reuse; only for callers who trust each other).
    cache_isolation: Literal["per_key", "shared"] = "per_key"
    # The admin routes and their credential (AdminSpec): 404 without one.
    admin: AdminSpec = AdminSpec()
    # Serving a non-loopback HTTP host with no api_keys is refused (build_app) unless this says it is meant.
    allow_unauthenticated: bool = False

    def check_exposure(self, http_host: str) -> None:
        """Refuse to serve `http_host` when anyone on the network could use it unauthenticated."""
        if self.api_keys or self.allow_unauthenticated or is_loopback(http_host):
            return
        raise ValueError(
            f"refusing to serve on {http_host!r} (not loopback) without API keys: anyone who reaches the port could "
            "use the models, read stored responses and steer other callers' sessions. Set API keys (`api_keys`: "
            "sha256 digests, or AGENTSERVE_API_KEYS with plain keys, comma separated), or set "
            "`allow_unauthenticated: true` in the serve config's args if an authenticating proxy is in front."
        )

    @model_validator(mode="after")
    def _keys_are_digests(self) -> "ServeArgs":
        def digest(k: str) -> bool:
            return len(k) == 64 and all(c in "0123456789abcdef" for c in k)

        if not all(digest(k) for k in self.api_keys):
            raise ValueError("api_keys holds sha256 hex digests of the keys (hashlib.sha256(key.encode()).hexdigest()), not keys")
        if not all(digest(k) for k in self.admin.keys):
            raise ValueError("admin.keys holds sha256 hex digests of the admin keys, not keys")
        if not all(k == "*" or digest(k) for k in self.router.priority_keys):
            raise ValueError('router.priority_keys holds sha256 hex digests of API keys, or "*" for every caller')
        return self

    @model_validator(mode="after")
    def _catalog_names_unique(self) -> "ServeArgs":
        if self.models and self.model != ModelSpec():  # (a dumped catalog form carries the default `model`)
            raise ValueError("give either `model` (one model) or `models` (the catalog), not both")
        seen: dict[str, str] = {}
        for m in self.resolve_catalog().models:
            for owner, names in ((m.id, m.names()), *((f"{m.id} adapter {a.id}", a.names()) for a in m.adapters)):
                for name in names:
                    if name in seen:
                        raise ValueError(
                            f"model name {name!r} is used twice in the catalog ({seen[name]} and {owner}): "
                            "ids, aliases and adapter ids must be unique across all models"
                        )
                    seen[name] = owner
        deployments: dict[str, str] = {}
        for m in self.models:
            name = engine_deployment_slug(m.id)
            if name in deployments:
                raise ValueError(
                    f"models {deployments[name]!r} and {m.id!r} give the same engine deployment name "
                    f"'Engine-{name}': make their ids differ in more than punctuation"
                )
            deployments[name] = m.id
        return self

    def resolve_catalog(self) -> "ResolvedCatalog":
        """The one place that knows the two config forms: every served model with its engine filled in and the
        name of its Engine deployment (`Engine` in the single-model form, so serve configs' `deployments:`
        overrides keep their name; `Engine-<slug of the id>` in the catalog form). The first is the default."""
        models = self.models or (self.model,)
        filled = tuple(m if m.engine is not None else m.model_copy(update={"engine": self.engine}) for m in models)
        names = tuple(f"Engine-{engine_deployment_slug(m.id)}" for m in filled) if self.models else ("Engine",)
        return ResolvedCatalog(models=filled, engine_deployments=names)

    @classmethod
    def from_any(cls, args: "ServeArgs | dict[str, Any] | None") -> "ServeArgs":
        if isinstance(args, ServeArgs):
            return args
        return cls.model_validate(args or {})


class ResolvedCatalog(_Strict):
    """Every served model, each with its engine and its Engine deployment's name: what `build_app` hands every
    deployment, so nothing past it knows whether the config said `model:` or `models:`."""

    models: tuple[ModelSpec, ...]
    engine_deployments: tuple[str, ...]  # one per model, in the same order

    @model_validator(mode="after")
    def _complete(self) -> "ResolvedCatalog":
        if not self.models or len(self.models) != len(self.engine_deployments):
            raise ValueError("a resolved catalog has at least one model and one engine deployment per model")
        if any(m.engine is None for m in self.models):
            raise ValueError("a resolved catalog's models each carry their engine (ServeArgs.resolve_catalog)")
        return self

    @property
    def default(self) -> ModelSpec:
        """The model a request that names none gets: the first."""
        return self.models[0]

    def model(self, model_id: str) -> ModelSpec:
        for m in self.models:
            if m.id == model_id:
                return m
        raise KeyError(f"model {model_id!r} is not in the catalog")

    def engine(self, model_id: str) -> EngineSpec:
        engine = self.model(model_id).engine
        assert engine is not None  # the validator checks it
        return engine

    def deployment_name(self, model_id: str) -> str:
        return self.engine_deployments[[m.id for m in self.models].index(model_id)]

    @classmethod
    def from_any(cls, catalog: "ResolvedCatalog | dict[str, Any]") -> "ResolvedCatalog":
        return catalog if isinstance(catalog, ResolvedCatalog) else cls.model_validate(catalog)


ModelSpec.model_rebuild()
ServeArgs.model_rebuild()
