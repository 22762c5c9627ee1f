"""What an API handler needs from the ingress replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.serve.handle import DeploymentHandle

from agentserve.apis.models import Catalog
from agentserve.config import ServeArgs
from agentserve.serve.pipeline import Pipeline


@dataclass(frozen=True)
class IngressContext:
    args: ServeArgs
    catalog: Catalog
    tokenizer: Any
    pipeline: Pipeline
    preprocessor: DeploymentHandle
