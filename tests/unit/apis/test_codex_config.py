"""`agentserve codex-config`: a config.toml Codex can parse, and a catalog of every served name."""

from __future__ import annotations

import json
import tomllib

import yaml

from agentserve.apis.codex import config as codex_config
from agentserve.cli import main


def test_written_config_and_catalog(tmp_path, capsys):
    serve = tmp_path / "serve.yaml"
    serve.write_text(yaml.safe_dump({"applications": [{"args": {"model": {"id": "org/m", "aliases": ["gpt-5.5"]}}}]}))
    assert main(["codex-config", "--codex-home", str(tmp_path / "home"), "--serve-config", str(serve),
                 "--base-url", "http://h:1/v1/"]) == 0  # fmt: skip
    config = tomllib.loads((tmp_path / "home" / "config.toml").read_text())
    assert config["model"] == "org/m" and config["model_provider"] == "agentserve"
    provider = config["model_providers"]["agentserve"]
    assert provider["wire_api"] == "responses" and provider["base_url"] == "http://h:1/v1"
    assert provider["env_key"] == "AGENTSERVE_API_KEY"
    catalog = json.loads(open(config["model_catalog_json"]).read())
    assert [m["slug"] for m in catalog["models"]] == ["org/m", "gpt-5.5"]


def test_printed_config_parses_and_defaults_without_serve_config(tmp_path, capsys):
    assert main(["codex-config", "--serve-config", str(tmp_path / "missing.yaml"), "--model", "smollm2"]) == 0
    config = tomllib.loads(capsys.readouterr().out)
    assert config["model"] == "smollm2"
    assert codex_config.models_from_serve_config(None)[0].id == "HuggingFaceTB/SmolLM2-135M-Instruct"
