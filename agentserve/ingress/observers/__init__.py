"""What watches a request without owning any of it: each observer subscribes to the one `TurnEnded` event.

The lifecycle (ingress/lifecycle.py) owns resources only; metrics, the prefix doctor, kept turns and speculative
prefill each read the finished request from `TurnEnded` and do their own work. An observer may return an awaitable:
the end of the stream waits for it (each observer bounds its own wait) before its last bytes go out, so a follow-up
the client sends the moment it sees the end finds what the observer stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Protocol

from agentserve.ingress.output.request_state import RequestState
from agentserve.protocol import GenerationRequest, Preprocessed, RouteDecision


@dataclass(frozen=True, slots=True)
class Timings:
    """When a request passed each point (perf_counter seconds; None: it never got there), and the wall clock of
    its arrival."""

    arrived_unix: float
    arrived: float
    routed: float | None  # the Router's lease
    first_token: float | None  # the first engine delta
    ended: float


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """One request's end, once, however it ended (finished, client gone, engine or ingress failure)."""

    request: GenerationRequest
    model: str  # the catalog model that served it
    prepared: Preprocessed | None  # None: it ended before the Preprocessor answered
    route: RouteDecision | None
    state: RequestState | None  # None: it ended before the engine stream opened
    session: str  # `<caller>/<model>/<session key>`; "" when the request names no session
    warm_only: bool  # a pre-warm: its output is not a turn of the session
    metered: bool = True  # False: work the server chose to do itself (speculative prefill), kept out of metrics
    api: str = ""  # the wire API ("anthropic", "responses", "chat", ...)
    scope: str = ""  # the caller's identity (its key's digest, ingress/middleware/auth.py)
    timings: Timings | None = None

    @property
    def finished(self) -> bool:
        """The engine ended the turn itself (stop or length): the output is the whole turn the client saw."""
        return self.state is not None and self.state.finish_reason in ("stop", "length")

    @property
    def keepable(self) -> bool:
        """The turn's generated tokens may stand in for the template's rendering of it next turn."""
        return (
            not self.warm_only
            and self.prepared is not None
            and bool(self.prepared.report.replay_prefix)
            and self.state is not None
            and self.state.kept_as_generated
            and self.state.turn is not None
        )


class TurnObserver(Protocol):
    def turn_ended(self, ended: TurnEnded) -> Awaitable[None] | None: ...
