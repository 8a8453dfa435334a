"""Fuzzing the configs: ``key=value`` overrides and YAML files of the training config (TrainConfig,
with its env and policy sections), and ``EnvConfig.from_dict`` (what ``gymnasium.make`` passes on).

Every input either gives a config whose values have the declared types (and a seed that seeds), or
raises the config's own error with a message naming the key: ``sim.configs.ConfigError`` for the
training config, ``ValueError`` starting with ``EnvConfig`` for the env's. A YAML file that cannot be
read as a mapping is refused with a message naming the file. Never another exception (a TypeError
from a comparison, a RecursionError from deeply nested YAML), never a hang.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from datetime import timedelta

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.config import EnvConfig
from learner.config import TrainConfig
from policy.network import PolicyConfig
from sim.configs import ConfigError, from_dict, resolve, to_dict
from tests.fuzz.counting import count

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


def _keys(cls, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


ENV_KEYS = [f.name for f in dataclasses.fields(EnvConfig)]
KEYS = (
    _keys(TrainConfig)
    + [f"env.{k}" for k in ENV_KEYS]
    + [f"policy.{f.name}" for f in dataclasses.fields(PolicyConfig)]
    + ["nope", "rollout.nope", "env.nope", "ppo", "a.b.c", "", ".", "rollout..num_actors", "1", "env.resolution.0"]
)
TEXT_VALUES = st.one_of(
    st.sampled_from(
        ["", "0", "-1", "1", "2", "1e400", "-1e400", "nan", ".nan", ".inf", "-.inf", "1e20", "4294967296", "-5",
         "true", "false", "null", "~", "[]", "{}", "[32,16]", "[1]", "[a, 1]", "{1: 2, a: 3}", "{a: 1}", "x",
         "il", "rl", "il+rl", "../x", "/etc", "a/b", "'3'", "0x10", "1_000", "!!python/object:os.system", "&a [*a]",
         "cpu", "gsplat", "front3", "max", "attention", "[16, 32]", "[3, 3]", "[0.5, 0.5, 0.5]"]
    ),
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
    st.integers(1, 200).map(lambda n: "[" * n),
    st.integers(1, 200).map(lambda n: "{a: " * n),
)  # fmt: skip


def names_key(message: str, key: str) -> bool:
    """Does ``message`` name the dotted config ``key``: the key itself, its last part as a word
    (``TrainConfig: EnvConfig.rig: ...`` for ``env.rig``), or the part of it that is unknown
    (``unknown config key a; ...`` for ``a.b.c``)?"""
    if key == "":
        return "empty key" in message
    parts = key.split(".")
    if any(f"unknown config key {'.'.join(parts[:i])}" in message for i in range(1, len(parts) + 1)):
        return True
    last = parts[-1]
    return key in message or (last != "" and re.search(rf"(?<!\w){re.escape(last)}(?!\w)", message) is not None)


def names_an_override(message: str, items: list[str]) -> bool:
    """Does ``message`` name one of the ``key=value`` items: its key, or the item itself when it has none?"""
    for item in items:
        if "=" not in item:
            if item[:20] in message or repr(item)[1:21] in message:
                return True
        elif names_key(message, item.split("=", 1)[0].strip()):
            return True
    return False


def dotted_keys(data, prefix: str = "") -> list[str]:
    """Every key path of a nested mapping, sections included: ``{"a": {"b": 1}}`` -> ``["a", "a.b"]``."""
    out = []
    for k, v in data.items():
        out.append(f"{prefix}{k}")
        if isinstance(v, dict):
            out += dotted_keys(v, f"{prefix}{k}.")
    return out


def test_names_key_tells_a_named_key_from_an_unnamed_one():
    assert names_key("TrainConfig: EnvConfig.rig: expected a string or None, got 0.0", "env.rig")
    assert names_key("unknown config key a; valid keys here: env, il", "a.b.c")
    assert names_key("override '=x' has an empty key", "")
    assert not names_key("TrainConfig: EnvConfig.rig: expected a string", "env.resolution")
    assert not names_key("TrainConfig: EnvConfig.rigs: expected a string", "env.rig")  # a word, not a substring
    assert not names_key("expected a mapping", "a.b.c")
    assert names_an_override("override 'nokey' is not key=value", ["seed=1", "nokey"])
    assert not names_an_override("seed: expected an integer", ["iterations=x"])
    assert dotted_keys({"a": {"b": 1}, "c": 2}) == ["a", "a.b", "c"]


def check_train(items: list[str]) -> str:
    try:
        cfg = resolve(TrainConfig, None, items)
    except ConfigError as e:
        assert names_an_override(str(e), items), (str(e), items)
        return "refused"
    _sane(cfg)
    return "accepted"


def _sane(cfg: TrainConfig) -> None:
    """An accepted config is one a run can be made of and resumed from: its saved form (config.json,
    through JSON) loads back to the same config, its seed seeds numpy, its env section makes an env's."""
    saved = json.loads(json.dumps(to_dict(cfg)))
    assert from_dict(TrainConfig, saved) == cfg, saved
    np.random.RandomState(cfg.seed)  # what the driver seeds numpy's global generator with
    EnvConfig.from_dict(cfg.env)


@pytest.mark.timeout(300)
@FUZZ
@given(items=st.lists(st.tuples(st.sampled_from(KEYS), TEXT_VALUES).map("=".join), min_size=1, max_size=4))
def test_fuzz_train_config_overrides(items):
    count("config")
    check_train(items)


@pytest.mark.timeout(300)
@FUZZ
@given(
    doc=st.one_of(
        st.text(max_size=200),
        st.dictionaries(st.sampled_from(KEYS), TEXT_VALUES, max_size=4).map(
            lambda d: "\n".join(
                f"{k.split('.')[0]}: {v}" if "." not in k else f"{k.split('.')[0]}: {{{k.split('.', 1)[1]}: {v}}}"
                for k, v in d.items()
            )
        ),
        st.integers(1, 200).map(lambda n: "- " * n),
        st.integers(1, 200).map(lambda n: "[" * n + "]" * n),
    )
)
def test_fuzz_train_config_yaml_file(tmp_path_factory, doc):
    count("config")
    path = tmp_path_factory.getbasetemp() / "fuzz-config.yaml"
    path.write_text(doc, encoding="utf-8", errors="surrogatepass")
    try:
        cfg = resolve(TrainConfig, str(path), [])
    except ConfigError as e:
        # sim.configs.load_yaml names the file when the file itself is unusable (not UTF-8, not YAML,
        # not a mapping, nested too deeply); an unusable value in it is named by its key.
        try:
            data = yaml.safe_load(doc)
        except (yaml.YAMLError, RecursionError):
            data = None
        keys = dotted_keys(data) if isinstance(data, dict) else []
        assert str(path) in str(e) or any(names_key(str(e), str(k)) for k in keys), (str(e), doc)
        return
    _sane(cfg)


ENV_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 100), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([np.int64(4), np.float32(0.5), np.bool_(True), (32, 16), [32, 16], "cpu", "front3", 1e308]),
)
ENV_HINTS = typing.get_type_hints(EnvConfig)


def _has_type(value, hint) -> bool:
    args = typing.get_args(hint)
    if args and type(None) in args:
        return value is None or _has_type(value, next(a for a in args if a is not type(None)))
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return isinstance(value, bool | np.bool_)
    if origin is int:
        return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if origin is float:
        return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)
    if origin is tuple:
        return isinstance(value, tuple) and all(_has_type(v, a) for v, a in zip(value, args))
    return isinstance(value, origin)


@pytest.mark.timeout(300)
@FUZZ
@given(d=st.dictionaries(st.one_of(st.sampled_from(ENV_KEYS), st.text(max_size=6)), ENV_VALUES, max_size=4))
def test_fuzz_env_config(d):
    count("config")
    try:
        cfg = EnvConfig.from_dict(d)
    except ValueError as e:
        assert str(e).startswith("EnvConfig"), e
        return
    for k in d:
        assert _has_type(getattr(cfg, k), ENV_HINTS[k]), (k, d[k])


@pytest.mark.parametrize("depth", [1000, 5000])
def test_deeply_nested_yaml_is_a_config_error(tmp_path, depth):
    """YAML nested past Python's recursion limit (in a value or a file) is refused, not a RecursionError."""
    count("config")
    with pytest.raises(ConfigError, match="nested too deeply"):
        resolve(TrainConfig, None, ["env=" + "[" * depth])
    count("config")
    path = tmp_path / "deep.yaml"
    path.write_text("env: " + "[" * depth + "]" * depth)
    with pytest.raises(ConfigError, match="nested too deeply"):
        resolve(TrainConfig, str(path), [])


def test_yaml_in_configs_is_safe_yaml(tmp_path):
    """A YAML tag that would construct a Python object is refused (safe_load), not executed."""
    path = tmp_path / "evil.yaml"
    path.write_text("seed: !!python/object/apply:os.system ['touch " + str(tmp_path / "pwned") + "']\n")
    with pytest.raises(ConfigError):
        resolve(TrainConfig, str(path), [])
    assert not (tmp_path / "pwned").exists()
    assert yaml.safe_load("a: 1") == {"a": 1}
