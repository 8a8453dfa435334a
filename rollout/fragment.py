"""Fixed-length trajectory fragments: what a rollout worker hands the learner.

A fragment is T consecutive steps of B environments, all taken with one policy version. Episodes
may start and end inside it: ``terminated`` (an RAD event, -1, no bootstrap) and ``truncated`` (the
clip's end or a scenario failure, bootstrapped from the value of the final observation) stay apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


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
    aux_flags: np.ndarray  # [T, B, 5] bool, see AUX_FLAGS and rollout.infos.aux_flags
    policy_version: int
    worker_id: int = 0
    episodes: list[dict] = field(default_factory=list)  # finished episodes: returns, length, event...
    errors: list[str] = field(default_factory=list)  # scenario failures seen (in step, reset or rendering)
    quarantined: list[str] = field(default_factory=list)  # scenario ids this worker no longer samples
    seconds: float = 0.0  # wall time spent collecting
    render_seconds: float = 0.0
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # per name [T, B, ...]: values at each state

    @property
    def shape(self) -> tuple[int, int]:
        return self.actions.shape[0], self.actions.shape[1]

    @property
    def env_steps(self) -> int:
        T, B = self.shape
        return T * B


@dataclass
class Batch:
    """Fragments gathered for one update: T steps x B envs (B summed over the fragments), as torch tensors.

    What the learner's PPO epochs take (``learner.learner.Learner.update_rl``); the actor slots' fragments
    side by side in slot order, so the same rollouts give the same batch whatever order they arrived in.
    """

    obs: dict[str, torch.Tensor]  # per observation part [T, B, ...]
    actions: torch.Tensor  # [T, B, 2] int64 (lateral, longitudinal) as applied
    logp: torch.Tensor  # [T, B, 2] float32 under the behaviour policy
    values: torch.Tensor  # [T, B, 2] float32 V(s_t) per reward part
    next_values: torch.Tensor  # [T, B, 2] float32 V(s_{t+1}); V(final obs) on a truncated step
    rewards: torch.Tensor  # [T, B, 2] float32 per reward part (lateral, longitudinal)
    terminated: torch.Tensor  # [T, B] bool
    truncated: torch.Tensor  # [T, B] bool
    aux_flags: torch.Tensor  # [T, B, 5] bool (AUX_FLAGS)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # per name [T, B, ...]

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.actions.shape[0]), int(self.actions.shape[1])

    @property
    def env_steps(self) -> int:
        T, B = self.shape
        return T * B


def stack_time(fragments: list[Fragment]) -> Batch:
    """Concatenate fragments along the env axis into a :class:`Batch` [T, sum B, ...] (same T)."""
    if not fragments:
        raise ValueError("stack_time: no fragments")
    T = fragments[0].shape[0]
    if any(f.shape[0] != T for f in fragments):
        raise ValueError("stack_time: fragments of different lengths")

    def cat(arrays):
        return torch.from_numpy(np.concatenate(list(arrays), axis=1))

    return Batch(
        obs={k: cat(f.obs[k] for f in fragments) for k in fragments[0].obs},
        actions=cat(f.actions for f in fragments),
        logp=cat(f.logp for f in fragments),
        values=cat(f.values for f in fragments),
        next_values=cat(f.next_values for f in fragments),
        rewards=cat(f.rewards for f in fragments),
        terminated=cat(f.terminated for f in fragments),
        truncated=cat(f.truncated for f in fragments),
        aux_flags=cat(f.aux_flags for f in fragments),
        extras={k: cat(f.extras[k] for f in fragments) for k in fragments[0].extras},
    )
