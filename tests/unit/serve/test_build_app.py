"""build_app as an operator meets it: it refuses to expose an unauthenticated server off loopback, and what each
deployment is bound with (Serve keeps init args in its checkpoint) holds only the credentials that deployment uses."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from ray.serve.deployment import Application

from agentserve.config import ServeArgs, is_loopback
from agentserve.ingress.middleware.auth import hash_key
from agentserve.serve import app as app_module
from agentserve.serve.app import build_app
from tests.support.keys import signing_key

SCRIPTED = {"engine": {"kind": "scripted", "rules": [{"reply": "ok"}]}}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in ("AGENTSERVE_API_KEYS", "AGENTSERVE_ADMIN_KEYS", "AGENTSERVE_SECRET_KEY", "AGENTSERVE_POSTGRES_DSN",
                 "AGENTSERVE_PREVIOUS_SECRET_KEYS", "KUBERNETES_SERVICE_HOST"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTSERVE_DATA_DIR", str(tmp_path / "data"))


def _served_on(monkeypatch, host: str) -> None:
    monkeypatch.setattr(app_module, "serve_http_host", lambda: host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_without_keys_starts_as_make_serve_does(host):
    assert is_loopback(host)
    ServeArgs().check_exposure(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "agentserve.example.com", ""])
def test_a_network_host_without_keys_is_refused_naming_both_fixes(host):
    with pytest.raises(ValueError) as info:
        ServeArgs().check_exposure(host)
    message = str(info.value)
    assert "api_keys" in message and "AGENTSERVE_API_KEYS" in message and "allow_unauthenticated: true" in message
    ServeArgs(api_keys=(hash_key("k"),)).check_exposure(host)
    ServeArgs(allow_unauthenticated=True).check_exposure(host)


def test_build_app_refuses_the_gpu_config_host_without_keys(monkeypatch):
    _served_on(monkeypatch, "0.0.0.0")
    with pytest.raises(ValueError, match="allow_unauthenticated"):
        build_app(SCRIPTED)
    monkeypatch.setenv("AGENTSERVE_API_KEYS", "team-key")  # a Kubernetes Secret, as the generator wires it
    assert isinstance(build_app(SCRIPTED), Application)


def test_build_app_on_loopback_needs_nothing(monkeypatch):
    _served_on(monkeypatch, "127.0.0.1")
    assert isinstance(build_app(SCRIPTED), Application)


def test_serve_http_host_is_loopback_without_a_running_serve():
    assert app_module.serve_http_host() == "127.0.0.1"


def _bound(app: Application) -> Iterator[tuple[str, list[Any]]]:
    """Every deployment of the graph with its init args (nested deployments walked)."""
    seen: set[int] = set()
    todo = [app]
    while todo:
        a = todo.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        d = a._bound_deployment
        args = list(d.init_args)
        yield d.name, args
        for x in args:
            todo += [x] if isinstance(x, Application) else [v for v in x.values() if isinstance(v, Application)] if isinstance(x, dict) else []


def _text(args: list[Any]) -> str:
    return json.dumps([a for a in args if not isinstance(a, Application) and not (isinstance(a, dict) and any(
        isinstance(v, Application) for v in a.values()))], default=str)  # fmt: skip


def test_the_secret_key_and_the_dsn_reach_only_the_deployments_that_use_them(monkeypatch):
    _served_on(monkeypatch, "127.0.0.1")
    monkeypatch.setenv("AGENTSERVE_SECRET_KEY", signing_key("from the Secret"))
    monkeypatch.setenv("AGENTSERVE_POSTGRES_DSN", "postgresql://u:env-password@db/agentserve")
    dsn = "postgresql://u:config-password@db/agentserve"  # an operator who wrote it into the config
    app = build_app({**SCRIPTED, "state": {"backend": "postgres", "postgres_dsn": dsn},
                     "previous_secret_keys": [signing_key("old")]})  # fmt: skip
    bound = dict(_bound(app))
    assert set(bound) == {"Ingress", "Preprocessor", "Router", "Engine"}
    for name, args in bound.items():
        text = _text(args)
        assert signing_key("from the Secret") not in text and "env-password" not in text, name  # read at start
        assert (signing_key("old") in text) == (name == "Ingress"), name
        assert ("config-password" in text) == (name in ("Ingress", "Preprocessor")), name


def test_admin_keys_from_the_environment_are_hashed_into_the_ingress_args(monkeypatch):
    _served_on(monkeypatch, "127.0.0.1")
    monkeypatch.setenv("AGENTSERVE_ADMIN_KEYS", "admin-one, admin-two")
    bound = dict(_bound(build_app(SCRIPTED)))
    config = ServeArgs.from_any(bound["Ingress"][0])
    assert config.admin.keys == (hash_key("admin-one"), hash_key("admin-two"))
    assert "admin-one" not in _text(bound["Ingress"])
