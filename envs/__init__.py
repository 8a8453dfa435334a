"""The Gymnasium environment: RAD's actions, rewards and termination over 3DGS digital twins.

Importing ``envs`` registers ``SplatDrive-v0`` -- ``gymnasium.make("SplatDrive-v0", config=...)``
gives a :class:`DrivingEnv`, ``gymnasium.make_vec("SplatDrive-v0", num_envs=8, config=...)`` a
:class:`VectorDrivingEnv` -- and does nothing heavier: the env classes (and torch, numba, the
renderers) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym

from envs.config import EnvConfig, default_config
from scenarios.actions import ActionSpec, decode, feasibility, nearest_bins

if TYPE_CHECKING:
    from envs.driving import DrivingEnv
    from envs.vector import VectorDrivingEnv

ENV_ID = "SplatDrive-v0"

if ENV_ID not in gym.registry:
    # gym.make -> DrivingEnv; gym.make_vec -> VectorDrivingEnv (one render call for all sub-envs)
    gym.register(id=ENV_ID, entry_point="envs.driving:DrivingEnv", vector_entry_point="envs.vector:VectorDrivingEnv")

__all__ = [
    "ENV_ID",
    "ActionSpec",
    "DrivingEnv",
    "EnvConfig",
    "VectorDrivingEnv",
    "decode",
    "default_config",
    "feasibility",
    "nearest_bins",
]


def __getattr__(name: str):
    if name == "DrivingEnv":
        from envs.driving import DrivingEnv

        return DrivingEnv
    if name == "VectorDrivingEnv":
        from envs.vector import VectorDrivingEnv

        return VectorDrivingEnv
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
