"""Tool schemas: find a parameter's JSON schema and type an XML/plain-text value by it."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ToolIndex", "coerce"]

_MISSING = object()


class ToolIndex:
    """Maps tool name -> {parameter name -> schema}; accepts OpenAI `{"type":"function","function":{...}}` or bare."""

    __slots__ = ("_params",)

    def __init__(self, tools: Iterable[Mapping[str, Any]] | None) -> None:
        self._params: dict[str, dict[str, Any]] = {}
        for tool in tools or ():
            if not isinstance(tool, Mapping):
                continue
            fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
            name = fn.get("name")
            params = fn.get("parameters") or fn.get("input_schema") or {}
            props = params.get("properties") if isinstance(params, Mapping) else None
            if isinstance(name, str):
                self._params[name] = dict(props) if isinstance(props, Mapping) else {}

    def param(self, tool: str, name: str) -> Any:
        """The parameter's schema, or None when the tool or parameter is unknown."""
        return self._params.get(tool, {}).get(name)


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    out: list[str] = []
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            out += _types(sub)
    if not out and "enum" in schema:
        vals = schema["enum"]
        if vals and all(isinstance(v, str) for v in vals):
            out = ["string"]
    if not out and ("properties" in schema):
        out = ["object"]
    return out


def _as(value: str, t: str) -> Any:
    v = value.strip()
    if t == "string":
        return value
    if t == "integer":
        try:
            return int(v)
        except ValueError:
            f = float(v)
            return int(f) if f.is_integer() else f
    if t == "number":
        try:
            return int(v)
        except ValueError:
            return float(v)
    if t == "boolean":
        low = v.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ValueError(v)
    if t == "null":
        if v.lower() in ("null", "none"):
            return None
        raise ValueError(v)
    return _loose(v)


def _loose(v: str) -> Any:
    """JSON, else a Python literal (models write True/None/'x' too); raises ValueError."""
    try:
        return json.loads(v)
    except ValueError:
        pass
    try:
        out = ast.literal_eval(v)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise ValueError(v) from exc
    json.dumps(out)  # TypeError on sets/bytes -> caught by coerce
    return out


def coerce(value: str, schema: Any, untyped: str = "string") -> Any:
    """Type a textual value by its JSON schema; unknown parameters are strings or loosely parsed (`untyped="json"`).

    When no schema type fits, the value stays the string the model wrote: never invent a value.
    """
    types = _types(schema)
    if not types:
        types = ["string"] if untyped == "string" else ["any"]
    for t in sorted(types, key=lambda t: t == "string"):  # try non-string types first
        if t == "any":
            try:
                return _loose(value.strip())
            except (ValueError, TypeError):
                continue
        try:
            return _as(value, t)
        except (ValueError, TypeError, OverflowError):
            continue
    return value
