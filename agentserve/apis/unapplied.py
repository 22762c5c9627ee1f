"""No silent drops: a request field that would change the output but is not applied here is a 400 naming it.

Each wire API lists its own such fields (by the name the client sent) and calls `reject_unapplied` from its
decoder; the error is rendered in that API's envelope. Fields that cannot change the output (ids, metadata,
store flags) are not listed: they are accepted and documented in docs/HARNESSES.md.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel

from agentserve.protocol.errors import RequestError

# name -> None: any value is refused; name -> predicate: refused when predicate(value) is true
Unapplied = Mapping[str, Callable[[Any], bool] | None]


def present(model: BaseModel) -> dict[str, Any]:
    """The fields the client actually sent (declared ones it set, and unknown extras), with their values."""
    sent = {name: getattr(model, name) for name in model.model_fields_set}
    sent.update(model.model_extra or {})
    return sent


def reject_unapplied(model: BaseModel, unapplied: Unapplied, *, prefix: str = "", why: str = "") -> None:
    sent = present(model)
    for name, refuse in unapplied.items():
        if name not in sent or sent[name] is None:
            continue
        value = sent[name]
        if refuse is None or refuse(value):
            param = f"{prefix}{name}"
            raise RequestError(
                "invalid_request",
                f"`{param}` is not supported by this server{why}: it would change the output and cannot be "
                "applied, so the request is refused rather than served without it",
                param=param,
            )
