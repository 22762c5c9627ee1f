"""The ingress OpenAPI schema with real request bodies.

Handlers parse bodies themselves (decompression, limits, the API's own error envelope), so FastAPI cannot see
them; this adds each route's pydantic model as its JSON request body, so clients and fuzzers (schemathesis)
know what to send. Each API's definitions get a prefix: `Message` in one API is not `Message` in another.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

Bodies = dict[tuple[str, str], tuple[str, type[BaseModel]]]  # (path, method) -> (prefix, model)


def _rename(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        out = {k: _rename(v, prefix) for k, v in value.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/components/schemas/" + prefix + ref[len("#/$defs/") :]
        return out
    if isinstance(value, list):
        return [_rename(v, prefix) for v in value]
    return value


def body_schemas(bodies: Bodies) -> tuple[dict[tuple[str, str], str], dict[str, Any]]:
    """(path, method) -> component name, and the components (every model's $defs, prefixed)."""
    refs: dict[tuple[str, str], str] = {}
    components: dict[str, Any] = {}
    for key, (prefix, model) in bodies.items():
        schema = model.model_json_schema()
        for name, sub in schema.pop("$defs", {}).items():
            components[prefix + name] = _rename(sub, prefix)
        name = prefix + model.__name__
        components[name] = _rename(schema, prefix)
        refs[key] = name
    return refs, components


def install(app: FastAPI, bodies: Bodies) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        refs, components = body_schemas(bodies)
        for (path, method), name in refs.items():
            op = schema.get("paths", {}).get(path, {}).get(method)
            if op is not None:
                op["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
                }
        comps = schema.setdefault("components", {})
        comps.setdefault("schemas", {}).update(components)
        comps["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }
        schema["security"] = [{"bearer": []}, {"apiKey": []}]
        for op in schema.get("paths", {}).get("/health", {}).values():
            op["security"] = []  # the one open route
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
