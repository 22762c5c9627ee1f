"""The secret key outlives a deployment: configured, from the environment, or generated once into the data dir;
clustered deployments refuse a generated key; previous keys verify signatures and open sealed reasoning."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentserve.apis.anthropic.signature import ThinkingSigner
from agentserve.apis.origin import origin_after
from agentserve.apis.responses.sealing import SealedReasoning, Sealer, SealError
from agentserve.config import ServeArgs, StateSpec
from agentserve.serve.state_args import secret_keys_at_start, settle_state
from agentserve.state import data_dir
from agentserve.state.secrets import GeneratedKeyRefused, WeakSecretKey, load_or_create_key, resolve_secret_keys
from tests.support.keys import signing_key

CONF, ENV, NEW, OLD1, OLD2 = (signing_key(n) for n in ("conf", "env", "new", "old1", "old2"))


def resolve(tmp_path, configured=None, previous=(), env=None, multi_node=False, allow=False):
    return resolve_secret_keys(
        configured, previous, data_dir=tmp_path, multi_node=multi_node, allow_generated=allow, env=env or {}
    )


def test_configured_key_wins_then_env_then_the_kept_file(tmp_path):
    assert resolve(tmp_path, CONF, env={"AGENTSERVE_SECRET_KEY": ENV}).current == CONF
    assert resolve(tmp_path, env={"AGENTSERVE_SECRET_KEY": f" {ENV} "}).source == "env"
    assert not (tmp_path / "secret_key").exists()  # nothing generated while a key is given
    first = resolve(tmp_path)
    assert first.source == "file" and len(first.current) == 64
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    assert resolve(tmp_path).current == first.current  # the next start (make serve again) keeps it


def test_generated_key_is_created_once_even_by_concurrent_starters(tmp_path):
    path = tmp_path / "nested" / "secret_key"
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: load_or_create_key(path), range(32)))
    assert len(keys) == 1 and path.read_text().strip() in keys
    assert list(path.parent.iterdir()) == [path]  # no temporary files left behind


def test_a_key_file_that_lost_its_mode_is_made_private_again(tmp_path):
    (tmp_path / "secret_key").write_text(CONF + "\n")
    (tmp_path / "secret_key").chmod(0o644)
    assert resolve(tmp_path).current == CONF
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600


@pytest.mark.parametrize("env, multi_node", [({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False), ({}, True)])
def test_clustered_deployments_refuse_a_generated_key_unless_allowed(tmp_path, env, multi_node):
    with pytest.raises(GeneratedKeyRefused, match="AGENTSERVE_SECRET_KEY"):
        resolve(tmp_path, env=env, multi_node=multi_node)
    assert not (tmp_path / "secret_key").exists()
    assert resolve(tmp_path, env=env, multi_node=multi_node, allow=True).source == "file"
    assert resolve(tmp_path, env={**env, "AGENTSERVE_SECRET_KEY": ENV}, multi_node=multi_node).current == ENV


def test_previous_keys_from_config_and_env_without_the_current_one(tmp_path):
    keys = resolve(tmp_path, NEW, previous=(OLD1, NEW), env={"AGENTSERVE_PREVIOUS_SECRET_KEYS": f"{OLD2}, {OLD1},,"})
    assert keys.current == NEW and keys.previous == (OLD1, OLD2)


WEAK = ["secret", "changeme", "0" * 64, "k" * 64, "ab" * 32, "changeme-" * 4, "my-prod-signing-secret-2024-do-not-share"]


@pytest.mark.parametrize("weak", WEAK)
def test_a_weak_key_is_refused_at_start_naming_the_setting_and_how_to_make_one(tmp_path, weak):
    """A guessable key lets anyone sign thinking and seal reasoning the model is shown as its own."""
    hint = "secrets.token_urlsafe(32)"
    with pytest.raises(WeakSecretKey, match=r"ServeArgs\.secret_key.*token_urlsafe") as refused:
        resolve(tmp_path, weak)
    assert hint in str(refused.value) and (len(weak) < 32 or weak not in str(refused.value))  # never logs the key
    with pytest.raises(WeakSecretKey, match="AGENTSERVE_SECRET_KEY"):
        resolve(tmp_path, env={"AGENTSERVE_SECRET_KEY": weak})
    with pytest.raises(WeakSecretKey, match="previous_secret_keys"):  # a previous key verifies: as forgeable
        resolve(tmp_path, NEW, previous=(weak,))
    with pytest.raises(WeakSecretKey, match="AGENTSERVE_PREVIOUS_SECRET_KEYS"):
        resolve(tmp_path, NEW, env={"AGENTSERVE_PREVIOUS_SECRET_KEYS": f"{OLD1},{weak}"})
    (tmp_path / "secret_key").write_text(weak + "\n")
    with pytest.raises(WeakSecretKey, match="key file"):
        resolve(tmp_path)


def test_generated_and_recommended_keys_pass_the_check(tmp_path):
    import secrets

    generated = load_or_create_key(tmp_path / "k")
    for key in (secrets.token_urlsafe(32), secrets.token_hex(32), secrets.token_hex(16), generated):
        assert resolve(tmp_path, key).current == key


def test_build_app_refuses_a_weak_configured_key_before_deploying_anything(tmp_path):
    with pytest.raises(WeakSecretKey, match="secret_key"):
        settle_state(ServeArgs(secret_key="changeme"), {"AGENTSERVE_DATA_DIR": str(tmp_path)}, multi_node=False)


def test_settle_state_pins_the_data_dir_and_checks_the_key_without_binding_it(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTSERVE_SECRET_KEY", raising=False)
    env = {"AGENTSERVE_DATA_DIR": str(tmp_path / "data"), "AGENTSERVE_PREVIOUS_SECRET_KEYS": OLD1}
    settled = settle_state(ServeArgs(), env, multi_node=False)
    assert settled.state.data_dir == str(tmp_path / "data")
    assert settled.secret_key is None and settled.previous_secret_keys == ()  # never in the deployments' args
    generated = (tmp_path / "data" / "secret_key").read_text().strip()  # created now, read by the Ingress at start
    started = secret_keys_at_start(settled, env)
    assert started.secret_key == generated and started.previous_secret_keys == (OLD1,)
    again = secret_keys_at_start(settle_state(ServeArgs(), env, multi_node=False), env)  # a redeploy: the same key
    assert again.secret_key == generated
    # The settled args round-trip through the dict every deployment receives.
    assert ServeArgs.from_any(settled.model_dump(mode="json")) == settled
    with pytest.raises(GeneratedKeyRefused):
        settle_state(ServeArgs(), env, multi_node=True)
    # Allowed explicitly on many nodes, a generated key travels (other nodes cannot read this node's file).
    assert settle_state(ServeArgs(allow_generated_secret_key=True), env, multi_node=True).secret_key == generated
    from_env = {**env, "AGENTSERVE_SECRET_KEY": ENV}
    assert settle_state(ServeArgs(), from_env, multi_node=True).secret_key is None
    assert secret_keys_at_start(settle_state(ServeArgs(), from_env, multi_node=False), from_env).secret_key == ENV


def test_data_dir_default_and_env():
    assert data_dir(StateSpec(), {}).name == "agentserve"
    assert str(data_dir(StateSpec(), {})).endswith(".local/share/agentserve")
    assert str(data_dir(StateSpec(), {"AGENTSERVE_DATA_DIR": "/srv/as"})) == "/srv/as"
    assert str(data_dir(StateSpec(data_dir="/x"), {"AGENTSERVE_DATA_DIR": "/srv/as"})) == "/x"


HERE = origin_after("caller", ())
ELSEWHERE = origin_after("another caller", ())


def test_signatures_from_a_previous_key_verify_and_new_ones_use_the_current_key():
    old = ThinkingSigner(OLD1)
    rotated = ThinkingSigner(NEW, previous=[OLD1])
    sig = old.sign("I should check the file.", HERE)
    assert rotated.verify("I should check the file.", sig, HERE)
    assert not rotated.verify("I should check the other file.", sig, HERE)
    assert not rotated.verify("I should check the file.", sig, ELSEWHERE)  # still bound to its origin
    assert rotated.sign("x", HERE) == ThinkingSigner(NEW).sign("x", HERE) != old.sign("x", HERE)
    assert not ThinkingSigner(NEW).verify("I should check the file.", sig, HERE)  # without it: rejected
    assert not ThinkingSigner(OLD2, previous=[CONF]).verify("I should check the file.", sig, HERE)


def test_reasoning_sealed_under_a_previous_key_opens_after_rotation():
    item = SealedReasoning(text="plan: read then edit", model="m", response_id="resp_1", output_index=0)
    blob = Sealer(OLD1).seal(item, HERE)
    rotated = Sealer(NEW, previous=(OLD1,))
    assert rotated.open(blob, HERE) == item
    with pytest.raises(SealError, match="authentication"):
        rotated.open(blob, ELSEWHERE)  # still bound to its origin
    with pytest.raises(SealError, match="authentication"):
        Sealer(NEW).open(blob, HERE)
    with pytest.raises(SealError):
        Sealer(OLD1).open(rotated.seal(item, HERE), HERE)  # new blobs use the current key only
