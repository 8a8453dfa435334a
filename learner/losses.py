"""PPO + IL losses for RAD's decoupled action space, written to be checked against the paper line by line.

Column convention everywhere: [:, 0] lateral, [:, 1] longitudinal (the env's action order). The policy
factorises as pi(lat, long | s) = pi_long(long | s) * pi_lat(lat | long, s); each factor gets its own
ratio, its own clip range and its own advantage part (RAD: lateral clip 0.1 with the lateral advantage,
longitudinal clip 0.2 with the longitudinal advantage).

Every loss function returns a dict: "loss" is the scalar to minimise (with gradient), every other entry
is a detached diagnostic under CleanRL's metric names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

# Same large negative finite value as the network's masked logits: no -inf, so no NaN in 0 * -inf.
_NEG = -1e9
AUX_NAMES = ("dc_front", "dc_rear", "dev_left", "dev_right", "progress")  # rollout.infos.AUX_FLAGS order


def normalize_advantages(adv: torch.Tensor, *, std_floor: float, eps: float = 1e-8) -> torch.Tensor:
    """Per-part advantage normalisation, safe on tiny minibatches. adv: [N, P] -> [N, P].

    (adv - mean) / max(std, std_floor) per column, with the population std (correction 0). With std_floor > 0
    a column whose advantages are all small (a reward part with no event in the batch: only the critic's
    noise) stays small instead of being blown up to unit size. Where std <= eps (a minibatch of one, or
    all-equal advantages) the column is only centred, i.e. returned as zeros-ish without dividing by ~0:
    all-equal advantages carry no preference between the samples once the baseline is removed. CleanRL's
    ``(adv - mean) / (adv.std() + 1e-8)`` instead gives NaN for N = 1 (unbiased std) and blows noise up to
    +-1 when the std is tiny but non-zero (sb3#325).
    """
    if adv.ndim != 2:
        raise ValueError(f"normalize_advantages: adv must be [N, P], got shape {tuple(adv.shape)}")
    centred = adv - adv.mean(dim=0, keepdim=True)
    std = centred.pow(2).mean(dim=0, keepdim=True).sqrt()  # [1, P]
    return torch.where(std > eps, centred / std.clamp_min(max(std_floor, eps)), centred)


def _pair(x: float | Sequence[float], name: str) -> tuple[float, float]:
    if isinstance(x, (int, float)):
        return float(x), float(x)
    if len(x) != 2:
        raise ValueError(f"ppo_loss: {name} must be a float or a (lateral, longitudinal) pair, got {x!r}")
    return float(x[0]), float(x[1])


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    *,
    clip: float | Sequence[float],
    new_values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor | None,
    value_clip: float | None,
    entropy: torch.Tensor | None,
    ent_coef: float | Sequence[float],
    vf_coef: float,
    norm_adv: bool,
) -> dict[str, torch.Tensor]:
    """PPO clipped surrogate per action dimension + per-part value loss + entropy bonus.

    new_logp, old_logp: [N, 2] log pi of the taken action per dimension (lat | long, long).
    adv: [N, 2] advantages (lateral part, longitudinal part), normalised per part here when norm_adv (CleanRL's
    per-minibatch normalisation; the learner normalises beforehand and passes norm_adv=False).
    clip: (lateral, longitudinal) clip ranges (RAD: 0.1, 0.2), or one float for both.
    new_values, returns: [N, 2] value predictions and GAE returns per part; old_values: [N, 2], needed when
    value_clip is set (CleanRL's clipped value loss, clip range value_clip).
    entropy: [N, 2] per-dimension entropies (None: no bonus); ent_coef: one float or a (lateral, longitudinal)
    pair. Every setting is keyword-only and has no default here: the caller passes the run's ``PPOConfig``.

    For each dimension d (0 lateral, 1 longitudinal) with clip eps_d:
        ratio_d = exp(new_logp_d - old_logp_d)
        L_pg_d  = mean( max(-A_d * ratio_d, -A_d * clip(ratio_d, 1 - eps_d, 1 + eps_d)) )
        L_v_p   = 0.5 * mean( (V_p - R_p)^2 )                  (or CleanRL's max with the clipped value)
    loss = sum_d L_pg_d + vf_coef * sum_p L_v_p - sum_d ent_coef_d * mean(entropy_d)

    Diagnostics: approx_kl is CleanRL's ((r - 1) - log r) estimator of KL(old || new) for the *joint* policy
    (log r = sum of the per-dimension log-ratios), clipfrac the mean over dimensions of the fraction of samples
    whose |ratio_d - 1| > eps_d; per-dimension versions carry a _lat / _long suffix.
    """
    named = {"new_logp": new_logp, "old_logp": old_logp, "adv": adv, "new_values": new_values, "returns": returns}
    for name, t in named.items():
        if t.ndim != 2 or t.shape[1] != 2 or t.shape[0] != new_logp.shape[0]:
            raise ValueError(f"ppo_loss: {name} must be [N, 2] with N = {new_logp.shape[0]}, got {tuple(t.shape)}")
    if value_clip is not None and old_values is None:
        raise ValueError("ppo_loss: value_clip is set, so old_values [N, 2] is required")
    clip_coef = torch.tensor(_pair(clip, "clip"), dtype=new_logp.dtype, device=new_logp.device)  # [2]
    ent_coefs = _pair(ent_coef, "ent_coef")

    logratio = new_logp - old_logp.detach()  # [N, 2]
    ratio = logratio.exp()
    with torch.no_grad():
        joint_logratio = logratio.sum(dim=1)
        old_approx_kl = (-joint_logratio).mean()
        approx_kl = ((joint_logratio.exp() - 1) - joint_logratio).mean()
        approx_kl_dim = ((ratio - 1) - logratio).mean(dim=0)  # [2]
        clipfrac_dim = ((ratio - 1.0).abs() > clip_coef).float().mean(dim=0)  # [2]

    mb_advantages = adv.detach()
    if norm_adv:
        mb_advantages = normalize_advantages(mb_advantages, std_floor=0.0)

    # Policy loss, one clipped surrogate per action dimension with its own advantage part and clip range.
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss_dim = torch.max(pg_loss1, pg_loss2).mean(dim=0)  # [2]
    pg_loss = pg_loss_dim.sum()

    # Value loss, one per reward part.
    returns = returns.detach()
    if value_clip is not None:
        assert old_values is not None  # checked above
        v_loss_unclipped = (new_values - returns) ** 2
        v_clipped = old_values.detach() + torch.clamp(new_values - old_values.detach(), -value_clip, value_clip)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss_dim = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean(dim=0)  # [2]
    else:
        v_loss_dim = 0.5 * ((new_values - returns) ** 2).mean(dim=0)  # [2]
    v_loss = v_loss_dim.sum()

    # Entropy bonus, one per action dimension.
    if entropy is None:
        entropy_dim = torch.zeros(2, dtype=new_logp.dtype, device=new_logp.device)
    else:
        entropy_dim = entropy.mean(dim=0)  # [2]
    entropy_loss = ent_coefs[0] * entropy_dim[0] + ent_coefs[1] * entropy_dim[1]

    loss = pg_loss - entropy_loss + v_loss * vf_coef

    out = {
        "loss": loss,
        "losses/policy_loss": pg_loss.detach(),
        "losses/value_loss": v_loss.detach(),
        "losses/entropy": entropy_dim.sum().detach(),
        "losses/approx_kl": approx_kl,
        "losses/old_approx_kl": old_approx_kl,
        "losses/clipfrac": clipfrac_dim.mean(),
    }
    for i, suffix in enumerate(("lat", "long")):
        out[f"losses/policy_loss_{suffix}"] = pg_loss_dim[i].detach()
        out[f"losses/value_loss_{suffix}"] = v_loss_dim[i].detach()
        out[f"losses/entropy_{suffix}"] = entropy_dim[i].detach()
        out[f"losses/approx_kl_{suffix}"] = approx_kl_dim[i]
        out[f"losses/clipfrac_{suffix}"] = clipfrac_dim[i]
    return out


def il_loss(
    logits_long: torch.Tensor,
    logits_lat_given_expert_long: torch.Tensor,
    expert_lat: torch.Tensor,
    expert_long: torch.Tensor,
    *,
    focal_gamma: float,
    soft: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Imitation loss on the expert's bins (RAD's IL regularisation), with teacher forcing.

    logits_long: [N, n_long]; logits_lat_given_expert_long: [N, n_lat], the (masked) lateral logits conditioned on
    the *expert's* longitudinal bin (``ActorCritic.logits(obs, long_idx=expert_long)``).
    expert_lat, expert_long: [N] int64 bins from ``envs.actions.nearest_bins`` (feasible by construction; an
    infeasible target would cost ~1e9).

    Per head, with p_t the predicted probability of the expert bin:
        L = mean( -(1 - p_t)^focal_gamma * log p_t )        (plain cross-entropy when focal_gamma = 0)
    loss = L_lat + L_long.

    soft: a teacher's distributions instead (distillation): (longitudinal [N, n_long], lateral given
    ``expert_long`` [N, n_lat]), each row summing to 1; per head L = mean( -sum_k q_k log p_k ), the
    cross-entropy to the teacher's distribution (its KL divergence plus the teacher's entropy; focal_gamma
    is not applied). One-hot rows give the plain cross-entropy of the bins.
    """
    for name, logits, target in (
        ("logits_long", logits_long, expert_long),
        ("logits_lat_given_expert_long", logits_lat_given_expert_long, expert_lat),
    ):
        if logits.ndim != 2 or target.shape != logits.shape[:1]:
            raise ValueError(
                f"il_loss: {name} must be [N, bins] with a [N] target, "
                f"got {tuple(logits.shape)} and {tuple(target.shape)}"
            )

    def focal_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logp_t = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.long()[:, None])[:, 0]  # [N]
        if focal_gamma == 0.0:
            return -logp_t.mean()
        return (-((1.0 - logp_t.exp()) ** focal_gamma) * logp_t).mean()

    def soft_ce(logits: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        if q.shape != logits.shape:
            raise ValueError(f"il_loss: soft targets {tuple(q.shape)} do not match logits {tuple(logits.shape)}")
        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(q.float() * logp.clamp_min(-1e4)).sum(-1).mean()  # masked bins: q = 0 there, logp ~ -1e9

    if soft is not None:
        l_lat = soft_ce(logits_lat_given_expert_long, soft[1])
        l_long = soft_ce(logits_long, soft[0])
    else:
        l_lat = focal_ce(logits_lat_given_expert_long, expert_lat)
        l_long = focal_ce(logits_long, expert_long)
    with torch.no_grad():
        acc_lat = (logits_lat_given_expert_long.argmax(-1) == expert_lat).float().mean()
        acc_long = (logits_long.argmax(-1) == expert_long).float().mean()
    return {
        "loss": l_lat + l_long,
        "losses/il_loss": (l_lat + l_long).detach(),
        "losses/il_loss_lat": l_lat.detach(),
        "losses/il_loss_long": l_long.detach(),
        "il/accuracy_lat": acc_lat,
        "il/accuracy_long": acc_long,
    }


def _mass(logits: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """Probability mass of the selected bins. logits [N, K], select bool [N, K] -> [N] (0 where none)."""
    return torch.softmax(logits.float(), dim=-1).mul(select.to(torch.float32)).sum(-1)


def directional_aux_loss(
    logits_long: torch.Tensor,
    logits_lat: torch.Tensor,
    actions: torch.Tensor,
    adv: torch.Tensor,
    aux_flags: torch.Tensor,
    *,
    weights: Sequence[float] | Mapping[str, float],
) -> dict[str, torch.Tensor]:
    """RAD's four directional auxiliary losses, and one for progress: before an event, push probability
    mass the corrective way.

    logits_long: [N, n_long]; logits_lat: [N, n_lat], masked and conditioned on the *taken* longitudinal bin
    (``PolicyOutput.logits_lat`` from ``evaluate_actions``). actions: [N, 2] (lat, long) bins taken.
    adv: [N, 2] advantages (lateral part, longitudinal part). aux_flags: [N, 5] bool, the steps the rollout marks
    as leading to an event (every step of the episode before its terminal one, ``rollout.worker``): (dynamic
    collision at the front, dynamic collision at the rear, deviation to the left, deviation to the right, fell
    behind the logged expert). weights: the five loss weights (0: off), a sequence in that order or a
    mapping with keys AUX_NAMES. Lateral bins grow to the left (ego y), so "to the right" is lower indices.

    With a_lat, a_long the taken bins, p the policy's probabilities and w = max(-A, 0) (detached: only steps
    that did worse than expected push, harder the worse they did):
        dc_front:  P = sum_{j < a_long} p_long(j)        w from A_long   (brake harder)
        dc_rear:   P = sum_{j > a_long} p_long(j)        w from A_long   (speed up)
        dev_left:  P = sum_{i < a_lat}  p_lat(i | a_long) w from A_lat    (steer back to the right)
        dev_right: P = sum_{i > a_lat}  p_lat(i | a_long) w from A_lat    (steer back to the left)
        progress:  P = sum_{j > a_long} p_long(j)        w from A_long   (speed up: not one of RAD's)
        L_k = (1 / N) * sum_n flag_nk * w_n * (-P_nk)
    loss = sum_k weight_k * L_k. Minimising -P raises the corrective mass (RAD's E[A * pi_dir] for A < 0);
    it is bounded, so a flagged step can never produce a huge or non-finite loss. Steps with no corrective bin
    (e.g. already the lowest longitudinal bin) have P = 0 and no gradient. Infeasible lateral bins have
    probability 0 under the masked logits, so they never count.
    """
    N, K = actions.shape[0], len(AUX_NAMES)
    if aux_flags.shape != (N, K):
        raise ValueError(
            f"directional_aux_loss: aux_flags must be [N, {K}] = [{N}, {K}] ({', '.join(AUX_NAMES)}), "
            f"got {tuple(aux_flags.shape)}"
        )
    if adv.shape != (N, 2):
        raise ValueError(f"directional_aux_loss: adv must be [N, 2] = [{N}, 2], got {tuple(adv.shape)}")
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(AUX_NAMES))
        if unknown:
            raise ValueError(f"directional_aux_loss: unknown weight names {unknown}; expected some of {AUX_NAMES}")
        weights = [float(weights.get(k, 0.0)) for k in AUX_NAMES]
    if len(weights) != K:
        raise ValueError(f"directional_aux_loss: weights must have {K} entries {AUX_NAMES}, got {weights!r}")

    a_lat, a_long = actions[:, 0].long(), actions[:, 1].long()
    long_bins = torch.arange(logits_long.shape[-1], device=logits_long.device)[None, :]  # [1, n_long]
    lat_bins = torch.arange(logits_lat.shape[-1], device=logits_lat.device)[None, :]  # [1, n_lat]
    w = (-adv.detach().float()).clamp_min(0.0)  # [N, 2]
    flags = aux_flags.to(torch.float32)  # [N, 5]

    faster = _mass(logits_long, long_bins > a_long[:, None])
    corrective_mass = (
        _mass(logits_long, long_bins < a_long[:, None]),  # front collision -> brake
        faster,  # rear collision -> speed up
        _mass(logits_lat, lat_bins < a_lat[:, None]),  # drifted left -> go right
        _mass(logits_lat, lat_bins > a_lat[:, None]),  # drifted right -> go left
        faster,  # behind the logged expert -> speed up
    )
    part = (1, 1, 0, 0, 1)  # advantage part per term: longitudinal for collisions and progress, lateral else
    out: dict[str, torch.Tensor] = {}
    loss = logits_long.new_zeros((), dtype=torch.float32)
    for k, name in enumerate(AUX_NAMES):
        l_k = (flags[:, k] * w[:, part[k]] * -corrective_mass[k]).mean()
        loss = loss + weights[k] * l_k
        out[f"losses/aux_{name}"] = l_k.detach()
    out["loss"] = loss
    return out


def finite_or_skip(loss: torch.Tensor | Mapping[str, torch.Tensor]) -> bool:
    """True when the loss (a tensor, or every tensor of a loss dict) is finite; False means skip the step.

    The learner's guard: ``if not finite_or_skip(terms): skipped += 1; continue`` before ``backward()``, so one
    NaN/Inf minibatch neither poisons the weights nor the optimizer's moments. (One device sync per call.)
    """
    tensors = list(loss.values()) if isinstance(loss, Mapping) else [loss]
    return all(bool(torch.isfinite(t).all()) for t in tensors if isinstance(t, torch.Tensor))


class NonFiniteGuard:
    """Counts skipped steps: ``guard = NonFiniteGuard(); if not guard(terms): continue``; log ``guard.skipped``."""

    def __init__(self) -> None:
        self.skipped = 0

    def __call__(self, loss: torch.Tensor | Mapping[str, torch.Tensor]) -> bool:
        ok = finite_or_skip(loss)
        if not ok:
            self.skipped += 1
        return ok
