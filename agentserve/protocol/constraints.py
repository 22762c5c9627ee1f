"""What the answer's shape must be, API-neutral. The preprocessor turns it, with the conversation's tool choice and
strict tools, into the model's own grammar (preprocess/constrain.py); engines apply that grammar while decoding."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class OutputFormat(BaseModel):
    """The final answer is one JSON value: any object (`json_object`) or one matching `schema`."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["json_object", "json_schema"]
    schema_: dict[str, Any] | None = None
    param: str = "response_format"  # the wire field it came from: errors name it
