"""Loading the model's tokenizer once per process, without importing torch in processes that run no model.

`AutoTokenizer` decides the tokenizer class from the checkpoint's config.json and tokenizer_config.json, and
transformers 5 reads the model config through modules that import torch: 3+ s of CPU and ~300 MB in each Ingress
and Preprocessor replica, spent while the Engine replica imports vLLM on the same cores. The class it decides on
depends only on those two files, the path as given (a few hub ids are matched by name) and the transformers version,
so it is decided once by `AutoTokenizer` itself and remembered on disk; later loads import that class alone and
load the same files through it. A tokenizer with its own code (`auto_map`), and a model that is not a local
checkpoint directory (a hub id), always go through `AutoTokenizer`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

_DECIDING_FILES = ("config.json", "tokenizer_config.json")


def default_class_cache_dir() -> Path:
    """``$AGENTSERVE_TOKENIZER_CLASS_CACHE`` if set, else ``~/.cache/agentserve/tokenizer_classes``."""
    env = os.environ.get("AGENTSERVE_TOKENIZER_CLASS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "agentserve" / "tokenizer_classes"


@dataclass(frozen=True)
class TokenizerClass:
    """Where the class `AutoTokenizer` chose for a checkpoint lives."""

    module: str
    name: str

    def load(self) -> type:
        """The class, imported only from `transformers` (the cache file is data anyone with write access to the
        cache directory could edit: it must not name a module to import). ImportError: not one of those."""
        if self.module != "transformers" and not self.module.startswith("transformers."):
            raise ImportError(f"a remembered tokenizer class must come from transformers, not {self.module!r}")
        cls = getattr(importlib.import_module(self.module), self.name)
        from transformers import PreTrainedTokenizerBase

        if not (isinstance(cls, type) and issubclass(cls, PreTrainedTokenizerBase)):
            raise ImportError(f"{self.module}.{self.name} is not a tokenizer class")
        return cls


def _rememberable(model_path: Path) -> bool:
    """A local checkpoint whose tokenizer is transformers' own code (no `auto_map`)."""
    try:
        config = json.loads((model_path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "auto_map" not in config


def _class_key(model_path: Path) -> str:
    """Names what decides the class: the path as given, the checkpoint's two deciding files and the transformers
    version (read from the installed package's metadata: importing transformers costs most of a second)."""
    digest = hashlib.sha256(importlib.metadata.version("transformers").encode())
    digest.update(b"\0" + str(model_path).encode())
    for name in _DECIDING_FILES:
        digest.update(b"\0" + name.encode() + b"\0")
        try:
            digest.update((model_path / name).read_bytes())
        except OSError:
            digest.update(b"<absent>")
    return digest.hexdigest()


def _remembered(cache_dir: Path, key: str) -> TokenizerClass | None:
    try:
        entry = json.loads((cache_dir / f"{key}.json").read_text())
        return TokenizerClass(module=entry["module"], name=entry["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(cache_dir: Path, key: str, chosen: TokenizerClass) -> None:
    """Atomic (write, then rename), so replicas starting together never read half an entry; best effort."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache_dir, suffix=".tmp", delete=False) as out:
            json.dump({"module": chosen.module, "name": chosen.name}, out)
        os.replace(out.name, cache_dir / f"{key}.json")
    except OSError as exc:
        logger.debug("could not remember the tokenizer class in %s: %s", cache_dir, exc)


def _auto_tokenizer(path: Path, cache_dir: Path, key: str | None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if key is not None:
        cls = type(tokenizer)
        _remember(cache_dir, key, TokenizerClass(module=cls.__module__, name=cls.__qualname__))
    return tokenizer


def load_tokenizer_uncached(model_path: str | Path, cache_dir: Path | None = None):
    """The tokenizer `AutoTokenizer` gives for `model_path`, through the remembered class when there is one."""
    path = Path(model_path)
    cache_dir = cache_dir if cache_dir is not None else default_class_cache_dir()
    if not _rememberable(path):
        return _auto_tokenizer(path, cache_dir, None)
    key = _class_key(path)
    chosen = _remembered(cache_dir, key)
    if chosen is not None:
        try:
            return chosen.load().from_pretrained(str(path))
        except (ImportError, AttributeError) as exc:  # a stale entry: decide again below
            logger.info("remembered tokenizer class %s.%s is gone (%s)", chosen.module, chosen.name, exc)
    return _auto_tokenizer(path, cache_dir, key)


def remember_tokenizer_class(model_path: str | Path, cache_dir: Path | None = None) -> None:
    """Decide the class now if it is not remembered yet (`agentserve prepare-model`), so even a machine's first
    `make serve` starts its light replicas without torch; costs nothing once remembered."""
    path = Path(model_path)
    cache_dir = cache_dir if cache_dir is not None else default_class_cache_dir()
    if _rememberable(path) and _remembered(cache_dir, key := _class_key(path)) is None:
        _auto_tokenizer(path, cache_dir, key)


@lru_cache(maxsize=4)
def load_tokenizer(model_path: str):
    return load_tokenizer_uncached(model_path)
