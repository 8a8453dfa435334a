"""The learner: PPO with RAD's per-dimension clipping and imitation rounds, on one or N processes.

A plain class (``Learner``) holding the policy, the optimizer and the counters;
``learner.group.LearnerGroup`` runs it in this process (N = 1) or as N Ray actors that all-reduce
gradients over a ``torch.distributed`` group (gloo on CPU, NCCL on GPU). Every rank gets the whole batch and takes
its own slice of every minibatch; advantages are normalised over the whole minibatch before slicing
and gradients are averaged, so N learners take exactly the steps one would (up to float rounding).
The loss of one minibatch is ``loss_fn`` (overridable, RLlib style); a non-finite loss skips the
step on every rank and is counted.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from learner.losses import directional_aux_loss, il_loss, normalize_advantages, ppo_loss
from policy.network import ActorCritic
from rollout.gae import gae

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner needs from the training config (plain data: it travels to Ray actors).

    No defaults here: ``learner.train.learner_settings`` builds it from ``TrainConfig`` (``ppo``, ``il``,
    ``seed``), the one place the PPO and IL settings have theirs, plus the stage's learning rate and
    schedule length.
    """

    lr: float
    lr_final_fraction: float  # linear decay to lr * this over total_updates
    total_updates: int  # optimizer-step horizon of the LR schedule
    adam_eps: float
    gamma: float
    lam: float
    clip_lateral: float
    clip_longitudinal: float
    value_clip: float | None
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    epochs: int
    minibatches: int
    aux_weights: tuple[float, ...]  # learner.losses.AUX_NAMES order
    il_batch_size: int
    il_focal_gamma: float
    il_weight: float  # > 0: add il_weight * IL loss to every PPO minibatch (the weighted-sum mode)
    max_consecutive_skips: int  # non-finite losses in a row before the learner gives up
    seed: int
    device: str


class NonFiniteLoss(RuntimeError):
    """Losses kept coming out NaN/Inf: training stops, the last good checkpoint stays as it is."""


def _flatten(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """[T, B, ...] -> [T * B, ...] for every entry."""
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()}


def _obs(batch: Mapping[str, torch.Tensor], idx: torch.Tensor | slice) -> dict[str, torch.Tensor]:
    return {k[4:]: v[idx] for k, v in batch.items() if k.startswith("obs.")}


class Learner:
    """Policy + optimizer + counters; ``update_rl`` (PPO epochs) and ``update_il`` (imitation)."""

    def __init__(self, policy: ActorCritic, settings: LearnerSettings, rank: int = 0, world_size: int = 1):
        self.s = settings
        self.rank, self.world_size = rank, world_size
        self.device = torch.device(settings.device)
        self.policy = policy.to(self.device)
        self.opt = torch.optim.Adam(self.policy.parameters(), lr=settings.lr, eps=settings.adam_eps)
        self.updates = 0  # optimizer steps taken
        self.stage: str | None = None  # the LR schedule restarts when the stage changes
        self.schedule_start = 0  # updates count where the current schedule began
        self.skipped = 0  # non-finite losses skipped, in all
        self.consecutive_skips = 0
        self.gen = torch.Generator().manual_seed(settings.seed)

    # -- schedule and state ------------------------------------------------------------------------
    def lr_now(self) -> float:
        frac = min(1.0, (self.updates - self.schedule_start) / max(1, self.s.total_updates))
        return self.s.lr * (1.0 - frac * (1.0 - self.s.lr_final_fraction))

    def set_settings(self, settings: LearnerSettings, stage: str | None = None) -> None:
        """New hyperparameters (a stage change: IL pre-training -> PPO+IL); a new stage restarts the LR
        schedule, the same stage (a resume) keeps its place in it."""
        self.s = settings
        if stage != self.stage:
            self.stage = stage
            self.schedule_start = self.updates

    def state(self) -> dict[str, Any]:
        return dict(
            policy=self.weights(),
            optimizer=copy.deepcopy(self.opt.state_dict()),  # a snapshot, not the live moments
            counters=dict(
                updates=self.updates, skipped=self.skipped, stage=self.stage, schedule_start=self.schedule_start
            ),
            generator=self.gen.get_state(),
        )

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        if state.get("optimizer") is not None:
            self.opt.load_state_dict(state["optimizer"])
        c = state.get("counters", {})
        self.updates = int(c.get("updates", 0))
        self.skipped = int(c.get("skipped", 0))
        self.stage = c.get("stage", self.stage)
        self.schedule_start = int(c.get("schedule_start", 0))
        if state.get("generator") is not None:
            self.gen.set_state(state["generator"])

    def weights(self) -> dict[str, torch.Tensor]:
        """A copy of the policy's state (weights and normalisation buffers), on CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}

    # -- distributed helpers -----------------------------------------------------------------------
    def _all_ok(self, ok: bool) -> bool:
        if self.world_size == 1:
            return ok
        import torch.distributed as dist

        flag = torch.tensor([0.0 if ok else 1.0], device=self.device)
        dist.all_reduce(flag)
        return float(flag) == 0.0

    def _average_grads(self) -> None:
        if self.world_size == 1:
            return
        import torch.distributed as dist

        grads = [p.grad for p in self.policy.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        o = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[o : o + n].view_as(g))
            o += n

    def _shard(self, idx: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of a minibatch's indices."""
        if self.world_size == 1:
            return idx
        return idx.tensor_split(self.world_size)[self.rank]

    def _step(self, loss: torch.Tensor, terms: Mapping[str, torch.Tensor]) -> bool:
        ok = self._all_ok(bool(torch.isfinite(loss)) and all(bool(torch.isfinite(t).all()) for t in terms.values()))
        if not ok:
            self.skipped += 1
            self.consecutive_skips += 1
            log.warning("non-finite loss: step skipped (%d in a row, %d in all)", self.consecutive_skips, self.skipped)
            if self.consecutive_skips >= self.s.max_consecutive_skips:
                raise NonFiniteLoss(
                    f"{self.consecutive_skips} non-finite losses in a row ({self.skipped} in all): stopping; "
                    "the last committed checkpoint is intact"
                )
            return False
        self.consecutive_skips = 0
        for g in self.opt.param_groups:
            g["lr"] = self.lr_now()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self._average_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.s.max_grad_norm)
        if not torch.isfinite(grad_norm):
            self.opt.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.opt.step()
        self.updates += 1
        return True

    # -- the loss (one minibatch) --------------------------------------------------------------------
    def loss_fn(
        self, mb: Mapping[str, torch.Tensor], demo: Mapping[str, torch.Tensor] | None
    ) -> dict[str, torch.Tensor]:
        """PPO (+ directional aux, + weighted IL) on one minibatch shard. Advantages arrive normalised."""
        s = self.s
        out = self.policy.evaluate_actions(_obs(mb, slice(None)), mb["actions"])
        terms = ppo_loss(
            out.log_prob,
            mb["logp"],
            mb["adv"],
            (s.clip_lateral, s.clip_longitudinal),
            new_values=out.values,
            returns=mb["returns"],
            old_values=mb["values"],
            value_clip=s.value_clip,
            entropy=out.entropy,
            ent_coef=s.ent_coef,
            vf_coef=s.vf_coef,
            norm_adv=False,
        )
        loss = terms["loss"]
        if any(w != 0.0 for w in s.aux_weights):
            aux = directional_aux_loss(
                out.logits_long, out.logits_lat, mb["actions"], mb["adv"], mb["aux_flags"], s.aux_weights
            )
            loss = loss + aux.pop("loss")
            terms.update(aux)
        if demo is not None and s.il_weight > 0.0:
            il = self._il_terms(demo)
            loss = loss + s.il_weight * il.pop("loss")
            terms.update(il)
        terms["loss"] = loss
        return terms

    def _il_terms(self, demo: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        labels = demo["labels"]
        logits_long, logits_lat = self.policy.logits(_obs(demo, slice(None)), long_idx=labels[:, 1])
        return il_loss(logits_long, logits_lat, labels[:, 0], labels[:, 1], self.s.il_focal_gamma)

    # -- updates -----------------------------------------------------------------------------------
    def advantages(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE per reward part over a [T, B] batch (bootstrapped on truncation)."""
        return gae(
            batch["rewards"].float(),
            batch["values"].float(),
            batch["next_values"].float(),
            batch["terminated"].bool(),
            batch["truncated"].bool(),
            self.s.gamma,
            self.s.lam,
        )

    def update_rl(self, batch: Mapping[str, torch.Tensor], demos: Mapping[str, torch.Tensor] | None = None) -> dict:
        """PPO epochs over a [T, B] batch (the gathered fragments). Returns mean diagnostics."""
        s = self.s
        self.policy.train()
        adv, ret = self.advantages(batch)
        flat = _flatten({**batch, "adv": adv, "returns": ret})
        flat = {k: v.to(self.device) for k, v in flat.items()}
        N = flat["actions"].shape[0]
        mb_size = max(self.world_size, math.ceil(N / s.minibatches))
        sums: dict[str, float] = {}
        count = 0
        for _ in range(s.epochs):
            perm = torch.randperm(N, generator=self.gen)
            for start in range(0, N, mb_size):
                idx = perm[start : start + mb_size]
                # normalise over the whole minibatch, then take this rank's slice
                adv_n = normalize_advantages(flat["adv"][idx])
                mine = self._shard(torch.arange(len(idx)))
                mb = {k: v[idx][mine] for k, v in flat.items()}
                mb["adv"] = adv_n[mine]
                demo = self._demo_batch(demos) if (demos is not None and s.il_weight > 0) else None
                terms = self.loss_fn(mb, demo)
                # a rank's mean is over its slice: weight it by the slice's share, so the averaged
                # gradient is the whole minibatch's even when the slices differ in size
                terms["loss"] = terms["loss"] * (len(mine) * self.world_size / len(idx))
                if self._step(terms["loss"], terms):
                    count += 1
                    for k, v in terms.items():
                        if k != "loss":
                            sums[k] = sums.get(k, 0.0) + float(v)
        # The batch joins the observation statistics only now, after the PPO epochs. The rollout actors
        # scored their actions (old log-probs) with the normaliser of the weights they were sent, i.e.
        # this policy's as the iteration began; merging first would have changed every new log-prob
        # (ratio != 1 for unchanged weights, clipping on the normaliser's move rather than the policy's).
        # The merged statistics go to the actors with the next weights, so each iteration is scored and
        # updated under one normaliser.
        self.policy.update_obs_stats({k[4:]: v for k, v in batch.items() if k.startswith("obs.")})
        out = {k: v / max(count, 1) for k, v in sums.items()}
        with torch.no_grad():
            y, yhat = ret.reshape(-1, 2), batch["values"].float().reshape(-1, 2)
            var = y.var(dim=0)
            ev = 1.0 - (y - yhat).var(dim=0) / var.clamp_min(1e-8)
            out["losses/explained_variance"] = float(torch.where(var > 1e-8, ev, torch.zeros_like(ev)).mean())
        out.update(self._counters())
        return out

    def _demo_batch(self, demos: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        n = demos["labels"].shape[0]
        idx = torch.randint(0, n, (self.s.il_batch_size,), generator=self.gen)
        idx = self._shard(idx)
        return {k: v[idx].to(self.device) for k, v in demos.items()}

    def merge_obs_stats(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Merge a batch's observations (``obs.<part>`` entries) into the policy's running statistics.

        The training driver calls it once with the demonstrations, before the first IL iteration;
        ``update_il`` leaves the statistics alone, so the same frames are not merged again every IL
        round (they would outweigh the rollouts more with each round).
        """
        self.policy.update_obs_stats({k[4:]: v for k, v in batch.items() if k.startswith("obs.")})

    def update_il(self, demos: Mapping[str, torch.Tensor], steps: int) -> dict:
        """``steps`` imitation minibatches (cross-entropy on the expert's bins) from the demonstrations.
        The observation statistics are not touched (see ``merge_obs_stats``)."""
        self.policy.train()
        sums: dict[str, float] = {}
        count = 0
        for _ in range(steps):
            terms = self._il_terms(self._demo_batch(demos))
            if self._step(terms["loss"], terms):
                count += 1
                for k, v in terms.items():
                    if k != "loss":
                        sums[k] = sums.get(k, 0.0) + float(v)
        out = {k: v / max(count, 1) for k, v in sums.items()}
        out.update(self._counters())
        return out

    def _counters(self) -> dict:
        return {"charts/learning_rate": self.lr_now(), "charts/skipped_steps": float(self.skipped)}
