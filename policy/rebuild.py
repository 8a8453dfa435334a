"""The observation space and camera rig of a training checkpoint whose ``obs_space.json`` is missing
(checkpoints written before it existed) or leaves the rig out: rebuilt from its ``config.json`` with the
env's own code (``envs.observation``). The camera rig and resolution, when the env config leaves them to
the scenarios, come from the first scenario of the run's training suite.
"""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym

from envs.observation import observation_space
from policy.errors import PolicySourceError
from policy.spaces import SPACES_FILE
from scenarios.builtin import builtin_files, is_builtin_spec, is_generated, parse_spec
from scenarios.io import ScenarioError, scenario_files
from scenarios.io import load as load_scenario
from sim.camera import make_rig

log = logging.getLogger(__name__)


def rebuild_obs_space(env_cfg, config: dict, where: str) -> tuple[gym.spaces.Dict, dict | None]:
    """The observation space from the env config (envs.observation), without building an env.

    Cameras need the rig and resolution: the env config's when both are set, else the first
    scenario of the run's training suite (TrainConfig.suite, else EnvConfig.suite).
    """
    if not env_cfg.cameras:
        return observation_space(env_cfg, 0, 0, 0), None
    name, res = env_cfg.rig, env_cfg.resolution
    if name is None or res is None:
        suite = config.get("suite") or env_cfg.suite
        rs = _first_scenario_rig(str(suite), where)
        name = name or rs.name
        res = res or (rs.width, rs.height)
    try:
        rig = make_rig(name, int(res[0]), int(res[1]))
    except ValueError as e:
        raise PolicySourceError(f"{where}: camera rig: {e}") from None
    space = observation_space(env_cfg, len(rig), rig.width, rig.height)
    return space, dict(name=rig.name, width=rig.width, height=rig.height)


def guess_rig(obs_space: gym.spaces.Dict, env_cfg, config: dict) -> dict | None:
    """The rig of an obs_space.json without one: the env config's, else the suite's if it is here (never
    generated for this); the resolution is the cameras input's. None when unknown (only for description)."""
    if "cameras" not in obs_space.spaces:
        return None
    shape = obs_space["cameras"].shape  # [C, H, W, 3]
    assert shape is not None  # a Box: space_from_json makes nothing else
    _, H, W, _ = shape
    name = env_cfg.rig
    if name is None:
        suite = str(config.get("suite") or env_cfg.suite)
        try:
            if is_builtin_spec(suite) and not Path(suite).exists() and not is_generated(_first_of(suite)):
                return None
            name = _first_scenario_rig(suite, "").name
        except PolicySourceError:
            return None
    return dict(name=name, width=int(W), height=int(H))


def _first_of(spec: str) -> str:
    """The spec of a built-in suite spec's first scenario (``train:256`` -> ``train:1``): its rig is the
    suite's, and only the first shard need be there."""
    return f"{parse_spec(spec)[0]}:1"


def _first_scenario_rig(suite: str, where: str):
    """The RigSpec of the first scenario of a scenario file, a suite folder (by file name) or a built-in
    suite spec (``train``, ``train:256``: in the suite's order, its first shard generated if not cached)."""
    p = Path(suite)
    try:
        if p.is_file():
            return load_scenario(p).rig
        if p.is_dir():
            files = scenario_files(p)
        elif is_builtin_spec(suite):
            log.info("reading the camera rig of built-in suite %r (generated first if not cached)", suite)
            files = builtin_files(_first_of(suite))
        else:
            raise ScenarioError(f"{suite}: no such folder or file, nor a built-in suite (train, train:256, ...)")
        if not files:
            raise ScenarioError(f"{p}: no scenario files")
        return load_scenario(files[0]).rig
    except ScenarioError as e:
        raise PolicySourceError(
            f"{where}: the checkpoint has no {SPACES_FILE} and config.json leaves env.rig/env.resolution to the "
            f"scenarios, but the training suite cannot be read: {e}"
        ) from None
