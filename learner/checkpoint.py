"""What a training checkpoint holds, and its encoding into store files (no pickle anywhere).

The learner's side of a checkpoint: which files, and what its state (optimizer, RNG, counters)
looks like in them, built on the store's codec (``store.codec``: safetensors and JSON).

Files of one version:
    policy.safetensors      the policy's weights and observation-normalisation buffers
    optimizer.safetensors   optimizer tensors (Adam moments, step counts)
    optimizer.json          the rest of the optimizer state (param groups, structure)
    rng.safetensors         torch's global RNG state and the learner's minibatch generator
    trainer.json            stage, counters, python / numpy RNG states, the IL stage's evaluation
    config.json             the resolved TrainConfig
    metrics.json            the evaluation history so far
    obs_space.json          the policy's observation space, action bins and camera rig (when the
                            trainer passes them to ``encode``; ``policy.sources`` reads it to export
                            or evaluate the checkpoint without building an env; older checkpoints
                            lack it and are read from config.json's ``env`` instead)
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from policy.spaces import SPACES_FILE, spaces_json
from store import (
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    tensors_to_bytes,
)

FORMAT = 1


@dataclass
class TrainState:
    """The driver's counters; everything needed to continue a run exactly where it stopped."""

    stage: str = "il"  # the stage in progress: "il", "rl", or "done"
    il_iteration: int = 0  # IL pre-training iterations done
    iteration: int = 0  # RL iterations done (rollout + PPO update)
    warmup: int = 0  # critic warm-up iterations done (rollout + value-only update, before the first RL iteration)
    dagger_round: int = 0  # DAgger rounds done (stage il); the aggregated labels are in dagger.safetensors
    selected: str = ""  # the evaluation whose policy the run reports (stage rl's selection on the eval suite)
    rounds: int = 0  # PPO+IL rounds done (RL and IL rounds, for the RL:IL alternation)
    version: int = 0  # policy version (one per update), tags fragments
    env_steps: int = 0
    il_steps: int = 0  # demonstration samples trained on
    il_eval: dict | None = None  # evaluation of the policy at the end of stage il (the RL start point)
    last_eval: dict | None = None
    history: list = field(default_factory=list)  # evaluation rows

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> TrainState:
        return TrainState(**dict(d))


def rng_state() -> dict:
    return dict(python=_py_to_json(random.getstate()), numpy=np.random.get_state(legacy=False))  # noqa: NPY002 (global RNG: third-party code)


def _py_to_json(state):
    version, internal, gauss = state
    return [version, list(internal), gauss]


def set_rng_state(d: Mapping[str, Any]) -> None:
    version, internal, gauss = d["python"]
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state(d["numpy"])  # noqa: NPY002


def encode(
    learner_state: Mapping[str, Any],
    state: TrainState,
    config: Mapping[str, Any],
    *,
    observation_space: Any = None,
    action_spec: Any = None,
    rig: Any = None,
) -> dict[str, bytes]:
    """Store files for a checkpoint (see module docstring).

    observation_space (gymnasium Dict), action_spec (envs.actions.ActionSpec) and rig ((name, width,
    height) or a sim.CameraRig): what the policy was built for, written to obs_space.json when given.
    """
    opt_t, opt_tree = optimizer_state_to_payload(learner_state["optimizer"])
    numpy_state = rng_state()["numpy"]
    trainer = dict(
        format=FORMAT,
        state=state.to_json(),
        learner_counters=dict(learner_state["counters"]),
        python_rng=_py_to_json(random.getstate()),
        numpy_rng=_jsonable(numpy_state),
    )
    rng_t = {"torch": torch.get_rng_state(), "learner_generator": learner_state["generator"]}
    files = {
        "policy.safetensors": tensors_to_bytes(learner_state["policy"]),
        "optimizer.safetensors": tensors_to_bytes(opt_t),
        "optimizer.json": json_bytes(opt_tree),
        "rng.safetensors": tensors_to_bytes(rng_t),
        "trainer.json": json_bytes(trainer),
        "config.json": json_bytes(dict(config)),
        "metrics.json": json_bytes(state.history),
    }
    if observation_space is not None:
        files[SPACES_FILE] = json_bytes(spaces_json(observation_space, action_spec, rig))
    return files


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def decode(files: Mapping[str, bytes]) -> tuple[dict[str, Any], TrainState, dict, dict]:
    """(learner_state, TrainState, rng json, config) from a checkpoint's files."""
    trainer = from_json_bytes(files["trainer.json"])
    if trainer.get("format") != FORMAT:
        raise ValueError(f"checkpoint trainer.json format {trainer.get('format')!r}, this code reads {FORMAT}")
    opt = optimizer_state_from_payload(
        bytes_to_tensors(files["optimizer.safetensors"]), from_json_bytes(files["optimizer.json"])
    )
    rng_t = bytes_to_tensors(files["rng.safetensors"])
    learner_state = dict(
        policy=bytes_to_tensors(files["policy.safetensors"]),
        optimizer=opt,
        counters=trainer["learner_counters"],
        generator=rng_t["learner_generator"],
    )
    rng = dict(python=trainer["python_rng"], numpy=trainer["numpy_rng"], torch=rng_t["torch"])
    return learner_state, TrainState.from_json(trainer["state"]), rng, from_json_bytes(files["config.json"])


def restore_rng(rng: Mapping[str, Any]) -> None:
    set_rng_state(rng)
    torch.set_rng_state(rng["torch"])


def policy_weights(files: Mapping[str, bytes]) -> dict[str, torch.Tensor]:
    return bytes_to_tensors(files["policy.safetensors"])
