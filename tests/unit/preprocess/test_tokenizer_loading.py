"""The Ingress and Preprocessor load the tokenizer `AutoTokenizer` would give them, without importing torch.

The checkpoint variants copy the embedded model's tokenizer files and change what `AutoTokenizer` decides the class
from (tokenizer_config.json's `tokenizer_class`, config.json's `model_type`), so each case checks the remembered
class against the one transformers itself picks for those files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from agentserve.preprocess.tokenizer import load_tokenizer_uncached, remember_tokenizer_class

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")
_CONVERSATION = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is <|im_start|> in ünïcödé? 🦀"},
    {"role": "assistant", "content": "<think>a marker</think>A token."},
    {"role": "user", "content": "And 12345 + 0.5?"},
]


_KEEP = "keep"  # the checkpoint's own value


def _variant(model_path: Path, dest: Path, *, tokenizer_class: str | None, model_type: str | None) -> Path:
    dest.mkdir()
    for name in _TOKENIZER_FILES:
        if (model_path / name).exists():
            shutil.copy(model_path / name, dest / name)
    for name in model_path.glob("*.jinja"):
        shutil.copy(name, dest / name.name)
    if tokenizer_class != _KEEP:
        tok_config = json.loads((dest / "tokenizer_config.json").read_text())
        tok_config.pop("tokenizer_class", None)
        if tokenizer_class is not None:
            tok_config["tokenizer_class"] = tokenizer_class
        (dest / "tokenizer_config.json").write_text(json.dumps(tok_config))
    if model_type is not None:
        config = json.loads((dest / "config.json").read_text())
        config["model_type"] = model_type
        (dest / "config.json").write_text(json.dumps(config))
    return dest


def _same_tokenizer(ours, auto) -> None:
    assert type(ours) is type(auto)
    assert ours.all_special_tokens == auto.all_special_tokens
    assert ours.all_special_ids == auto.all_special_ids
    assert {i: str(t) for i, t in ours.added_tokens_decoder.items()} == {
        i: str(t) for i, t in auto.added_tokens_decoder.items()
    }
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (
        auto.bos_token_id,
        auto.eos_token_id,
        auto.pad_token_id,
    )
    rendered = ours.apply_chat_template(_CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert rendered == auto.apply_chat_template(_CONVERSATION, tokenize=False, add_generation_prompt=True)
    ids = ours.encode(rendered, add_special_tokens=False)
    assert ids == auto.encode(rendered, add_special_tokens=False)
    assert ours.decode(ids) == auto.decode(ids)
    assert ours.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize(
    ("tokenizer_class", "model_type"),
    [
        (_KEEP, None),  # as shipped
        (None, None),
        (None, "qwen2"),  # no class named: the model type decides
        ("PreTrainedTokenizerFast", None),
        ("GPT2TokenizerFast", None),
        ("Qwen2Tokenizer", "qwen2"),
        ("LlamaTokenizerFast", "llama"),
    ],
)
def test_the_remembered_class_is_the_one_auto_tokenizer_picks(model_path, tmp_path, tokenizer_class, model_type):
    from transformers import AutoTokenizer

    ckpt = _variant(model_path, tmp_path / "ckpt", tokenizer_class=tokenizer_class, model_type=model_type)
    cache = tmp_path / "classes"
    auto = AutoTokenizer.from_pretrained(str(ckpt))
    first = load_tokenizer_uncached(ckpt, cache)  # decides through AutoTokenizer and remembers
    assert len(list(cache.glob("*.json"))) == 1
    second = load_tokenizer_uncached(ckpt, cache)  # through the remembered class
    _same_tokenizer(first, auto)
    _same_tokenizer(second, auto)


def test_a_changed_tokenizer_config_is_decided_again(model_path, tmp_path):
    ckpt = _variant(model_path, tmp_path / "ckpt", tokenizer_class="GPT2TokenizerFast", model_type=None)
    cache = tmp_path / "classes"
    remember_tokenizer_class(ckpt, cache)
    before = load_tokenizer_uncached(ckpt, cache)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    after = load_tokenizer_uncached(ckpt, cache)
    assert len(list(cache.glob("*.json"))) == 2
    assert type(before).__name__ == "GPT2Tokenizer"
    assert type(after).__name__ == "TokenizersBackend"


def test_a_stale_entry_falls_back_to_auto_tokenizer_and_is_replaced(model_path, tmp_path):
    cache = tmp_path / "classes"
    remember_tokenizer_class(model_path, cache)
    (entry,) = cache.glob("*.json")
    entry.write_text(json.dumps({"module": "transformers.no_such_module", "name": "Gone"}))
    tok = load_tokenizer_uncached(model_path, cache)
    assert json.loads(entry.read_text()) == {"module": type(tok).__module__, "name": type(tok).__qualname__}
    for garbage in ("", "{", '{"module": 3}', "[]"):
        entry.write_text(garbage)
        assert type(load_tokenizer_uncached(model_path, cache)) is type(tok)


def test_a_tokenizer_with_its_own_code_is_never_remembered(model_path, tmp_path):
    from transformers import AutoTokenizer

    ckpt = _variant(model_path, tmp_path / "ckpt", tokenizer_class=_KEEP, model_type=None)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    # Named but absent remote code: whatever AutoTokenizer makes of it is the answer, decided anew on every load.
    config["auto_map"] = {"AutoTokenizer": [None, "tokenization_custom.CustomTokenizer"]}
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    cache = tmp_path / "classes"
    try:
        auto = type(AutoTokenizer.from_pretrained(str(ckpt)))
    except Exception as exc:  # noqa: BLE001 - the same refusal must come through our loader
        with pytest.raises(type(exc)):
            load_tokenizer_uncached(ckpt, cache)
    else:
        assert type(load_tokenizer_uncached(ckpt, cache)) is auto
    assert not list(cache.glob("*.json"))


def test_a_remembered_class_loads_without_importing_torch(model_path, tmp_path):
    cache = tmp_path / "classes"
    remember_tokenizer_class(model_path, cache)
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from agentserve.preprocess.tokenizer import load_tokenizer_uncached\n"
        f"tok = load_tokenizer_uncached({str(model_path)!r}, Path({str(cache)!r}))\n"
        "tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=True, add_generation_prompt=True)\n"
        "print(type(tok).__name__, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["TokenizersBackend", "False"]


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=0, max_size=200))
def test_remembered_and_auto_tokenizers_encode_any_text_alike(model_path, auto_and_remembered, text):
    auto, ours = auto_and_remembered
    ids = ours.encode(text, add_special_tokens=False)
    assert ids == auto.encode(text, add_special_tokens=False)
    assert ours.decode(ids) == auto.decode(ids)


@pytest.fixture(scope="module")
def auto_and_remembered(model_path, tmp_path_factory):
    from transformers import AutoTokenizer

    cache = tmp_path_factory.mktemp("classes")
    remember_tokenizer_class(model_path, cache)
    return AutoTokenizer.from_pretrained(str(model_path)), load_tokenizer_uncached(model_path, cache)


def test_only_local_checkpoints_are_remembered_and_each_path_apart(model_path, tmp_path):
    cache = tmp_path / "classes"
    remember_tokenizer_class("HuggingFaceTB/SmolLM2-135M-Instruct", cache)  # a hub id: AutoTokenizer's to resolve
    assert not cache.exists() or not list(cache.glob("*.json"))
    # The same files under two paths: two entries (AutoTokenizer matches a few hub ids by the path's name).
    a = _variant(model_path, tmp_path / "a", tokenizer_class=_KEEP, model_type=None)
    b = _variant(model_path, tmp_path / "b", tokenizer_class=_KEEP, model_type=None)
    remember_tokenizer_class(a, cache)
    remember_tokenizer_class(b, cache)
    assert len(list(cache.glob("*.json"))) == 2


def test_an_edited_entry_never_imports_a_module_outside_transformers(model_path, tmp_path, monkeypatch):
    """An attacker who can write the class cache names a module of theirs (its import runs their code) or a
    callable outside transformers: nothing is imported from outside transformers; the tokenizer is decided again."""
    cache = tmp_path / "classes"
    remember_tokenizer_class(model_path, cache)
    (entry,) = cache.glob("*.json")
    (tmp_path / "planted.py").write_text("import os\nos.environ['AGENTSERVE_PLANTED_RAN'] = '1'\nclass X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("AGENTSERVE_PLANTED_RAN", raising=False)
    for module, name in (("planted", "X"), ("transformers", "pipeline"), ("os", "system")):
        entry.write_text(json.dumps({"module": module, "name": name}))
        tok = load_tokenizer_uncached(model_path, cache)
        assert type(tok).__module__.startswith("transformers")
    import os

    assert "AGENTSERVE_PLANTED_RAN" not in os.environ and "planted" not in sys.modules
