"""Fixed-length trajectory fragments: what a rollout worker hands the learner.

A fragment is T consecutive steps of B environments, all taken with one policy version. Episodes
may start and end inside it: ``terminated`` (an RAD event, -1, no bootstrap) and ``truncated`` (the
clip's end or a scenario failure, bootstrapped from the value of the final observation) stay apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

# Directional auxiliary flags (RAD): front collision -> brake, rear collision -> speed up,
# drifted left -> steer right, drifted right -> steer left; and (not RAD's) fell behind the logged
# expert (progress_deviation) -> speed up. Set on the steps of an episode that led to its event.
AUX_FLAGS = ("collision_front", "collision_rear", "deviation_left", "deviation_right", "progress_behind")


@dataclass
class Fragment:
    """T steps x B envs. Observation parts are [T, B, ...]; the rest as below."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray  # [T, B, 2] int64 (lateral, longitudinal) as applied
    logp: np.ndarray  # [T, B, 2] float32, per action dimension, under the behaviour policy
    values: np.ndarray  # [T, B, 2] float32, V(s_t) per reward part (lateral, longitudinal)
    next_values: np.ndarray  # [T, B, 2] V(s_{t+1}); V(final obs) on a truncated step
    rewards: np.ndarray  # [T, B, 2] float32 per reward part
    terminated: np.ndarray  # [T, B] bool
    truncated: np.ndarray  # [T, B] bool
    aux_flags: np.ndarray  # [T, B, 5] bool, see AUX_FLAGS and rollout.worker.aux_flags
    policy_version: int
    worker_id: int = 0
    episodes: list[dict] = field(default_factory=list)  # finished episodes: returns, length, event...
    errors: list[str] = field(default_factory=list)  # scenario failures seen (in step, reset or rendering)
    quarantined: list[str] = field(default_factory=list)  # scenario ids this worker no longer samples
    seconds: float = 0.0  # wall time spent collecting
    render_seconds: float = 0.0

    @property
    def shape(self) -> tuple[int, int]:
        return self.actions.shape[0], self.actions.shape[1]

    @property
    def env_steps(self) -> int:
        T, B = self.shape
        return T * B


def stack_time(fragments: list[Fragment]) -> dict[str, torch.Tensor]:
    """Concatenate fragments along the env axis into torch tensors [T, sum B, ...] (same T)."""
    if not fragments:
        raise ValueError("stack_time: no fragments")
    T = fragments[0].shape[0]
    if any(f.shape[0] != T for f in fragments):
        raise ValueError("stack_time: fragments of different lengths")

    def cat(get):
        return torch.from_numpy(np.concatenate([get(f) for f in fragments], axis=1))

    out = {k: cat(lambda f, k=k: f.obs[k]) for k in fragments[0].obs}
    batch = {f"obs.{k}": v for k, v in out.items()}
    for name in ("actions", "logp", "values", "next_values", "rewards", "terminated", "truncated", "aux_flags"):
        batch[name] = cat(lambda f, n=name: getattr(f, n))
    return batch
