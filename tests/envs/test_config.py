"""EnvConfig through the one loader (sim.configs): what gym.make(config=...) and the training config's
env section get; every key has help, every error names its key, plain data reads back the same."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers SplatDrive-v0)
from envs.config import EnvConfig, default_config
from sim.configs import ConfigError, describe


def test_every_env_key_has_its_help():
    lines = describe(EnvConfig)
    assert len(lines) == len(dataclasses.fields(EnvConfig))
    for f in dataclasses.fields(EnvConfig):
        assert f.metadata.get("help"), f.name
    assert any(line.startswith("  cameras (bool, default True): observe the rig's images") for line in lines)
    assert any(line.startswith("  progress_threshold (float, default 10.0): Progress deviation") for line in lines)


def test_unknown_keys_name_the_nearest():
    with pytest.raises(ConfigError, match=r"^EnvConfig: unknown config key camras \(did you mean cameras\?\)"):
        EnvConfig.from_dict({"camras": False})
    with pytest.raises(ValueError, match=r"unknown config key rezolution \(did you mean resolution\?\)"):
        EnvConfig.from_dict(rezolution=(32, 16))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"cameras": "maybe"}, r"^EnvConfig: cameras: expected true/false, got 'maybe'"),
        ({"rig": 5}, r"^EnvConfig: rig: expected a string, got 5 \(or None\)"),
        ({"suite": None}, r"^EnvConfig: suite: expected a string, got None"),
        ({"resolution": 5}, r"^EnvConfig: resolution: expected a list, got 5 \(or None\)"),
        ({"resolution": [32, 0]}, r"^EnvConfig\.resolution: expected None or \(width, height\) positive ints"),
        ({"position_threshold": -1.0}, r"^EnvConfig\.position_threshold: expected a positive number, got -1.0"),
        ({"render_backend": "opengl"}, r"^EnvConfig\.render_backend: expected one of auto, gsplat, cpu, reference"),
        ({"horizon": 0}, r"^EnvConfig\.horizon: expected None or an int >= 1 \(steps\), got 0"),
        ({"max_agents": 2.5}, r"^EnvConfig: max_agents: expected an integer, got 2.5"),
        ("cameras=false", r"^EnvConfig: expected a mapping of settings, got str"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data, match):
    with pytest.raises(ConfigError, match=match):
        EnvConfig.from_dict(data)


def test_values_are_converted_to_the_declared_types():
    cfg = EnvConfig.from_dict({"resolution": [32, 16], "max_agents": np.int64(4), "cameras": np.bool_(False)})
    assert cfg.resolution == (32, 16) and type(cfg.max_agents) is int and cfg.cameras is False
    direct = EnvConfig(resolution=[32, 16], seed=np.int64(3), agent_radius=np.float32(30.0))  # built directly too
    assert direct.resolution == (32, 16) and type(direct.seed) is int and type(direct.agent_radius) is float
    with pytest.raises(ConfigError, match=r"EnvConfig\.cameras: expected true/false, got 'x'"):
        EnvConfig(cameras="x")


def test_to_dict_from_dict_round_trip_and_the_defaults():
    cfg = EnvConfig.from_dict({"resolution": (64, 32), "cameras": False, "rig": "front3", "seed": 7})
    plain = cfg.to_dict()
    assert plain["resolution"] == [64, 32] and plain["rig"] == "front3"
    assert EnvConfig.from_dict(plain) == cfg
    assert EnvConfig.from_dict(cfg) is cfg and EnvConfig.from_dict(cfg, seed=8).seed == 8
    d = default_config()
    assert EnvConfig.from_dict(d) == EnvConfig() and d["position_threshold"] == 2.0 and d["render_backend"] == "auto"


def test_gym_make_config_goes_through_the_same_loader():
    with pytest.raises(ValueError, match=r"unknown config key static_lfit \(did you mean static_lift\?\)"):
        gym.make("SplatDrive-v0", config={"static_lfit": 0.1})
