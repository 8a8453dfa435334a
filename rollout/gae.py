"""Generalised advantage estimation per reward part, as a pure function (TorchRL's functional style).

RAD splits the reward into a lateral and a longitudinal part and runs GAE on each with its own value
head; the parts share the episode boundaries.
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) over a fixed-length fragment, per reward part.

    rewards:     [T, B, P] reward of step t (the transition s_t -> s_{t+1}), one column per part.
    values:      [T, B, P] V(s_t).
    next_values: [T, B, P] V(s_{t+1}); on a truncated step, the value of the episode's *final* observation
                 (not the reset observation); ignored on a terminated step.
    terminated:  [T, B] bool, the episode ended at step t by an MDP terminal (no bootstrap).
    truncated:   [T, B] bool, the episode was cut at step t (time limit, clip end): bootstrap from next_values.
    Returns (advantages [T, B, P], returns [T, B, P]) with returns = advantages + values.

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   done_t = terminated_t | truncated_t
        A_T     = 0 past the fragment's last step (its delta already bootstraps from next_values).

    ``done`` cuts the lambda-trace so nothing flows across an episode boundary inside a fragment; a step that is
    both terminated and truncated counts as terminated.
    """
    where = "gae"
    if rewards.ndim != 3:
        raise ValueError(f"{where}: rewards must be [T, B, P], got shape {tuple(rewards.shape)}")
    for name, x in (("values", values), ("next_values", next_values)):
        if x.shape != rewards.shape:
            raise ValueError(
                f"{where}: {name} must have the rewards' shape {tuple(rewards.shape)}, got {tuple(x.shape)}"
            )
    for name, x in (("terminated", terminated), ("truncated", truncated)):
        if x.shape != rewards.shape[:2]:
            raise ValueError(f"{where}: {name} must be [T, B] = {tuple(rewards.shape[:2])}, got {tuple(x.shape)}")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"{where}: gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")

    dtype = values.dtype
    not_terminal = (~terminated.bool()).to(dtype)[..., None]  # [T, B, 1]
    not_done = (~(terminated.bool() | truncated.bool())).to(dtype)[..., None]  # [T, B, 1]
    deltas = rewards.to(dtype) + gamma * not_terminal * next_values.to(dtype) - values  # [T, B, P]

    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])  # [B, P], A_{t+1}
    for t in reversed(range(rewards.shape[0])):
        last = deltas[t] + gamma * lam * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values
