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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from envs.demos import Demonstrations
from envs.observation import is_critic_key
from learner.config import ILConfig, PPOConfig
from learner.losses import directional_aux_loss, il_loss, normalize_advantages, ppo_loss
from policy.network import BEV_KEY, ActorCritic
from rollout.fragment import Batch
from rollout.gae import gae

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner needs from the training config (plain data: it travels to Ray actors): the run's
    ``ppo`` and ``il`` sections as they are (the one place their settings have defaults), plus the stage's
    learning rate, the length of its schedule in optimizer steps, the seed and the device.
    ``learner.train.learner_settings`` builds it."""

    ppo: PPOConfig
    il: ILConfig
    lr: float  # this stage's learning rate (ppo.lr or il.lr)
    total_updates: int  # optimizer-step horizon of the LR schedule
    seed: int
    device: str

    @property
    def il_weight(self) -> float:
        """> 0: il_weight * IL loss is added to every PPO minibatch (the weighted-sum mode)."""
        return self.il.weight if self.il.mode == "weighted" else 0.0

    @property
    def aux_weights(self) -> tuple[float, ...]:
        """The directional loss weights in ``learner.losses.AUX_NAMES`` order."""
        p = self.ppo
        return (p.aux_front, p.aux_rear, p.aux_left, p.aux_right, p.aux_progress)


@dataclass
class Demos:
    """Imitation data on the learner's side, as torch tensors: N states with the expert's bins.

    Built from ``envs.demos.Demonstrations`` (the expert's own states) by :meth:`of`; labels of other
    states (a teacher's, on the states a policy visited) join with :meth:`concat`. A teacher that gives its
    action distribution (stage distill) fills ``soft``: (longitudinal probabilities [N, n_long], lateral
    probabilities given the label's longitudinal bin [N, n_lat]); states labelled with bins alone then count
    as one-hot distributions beside them.
    """

    obs: dict[str, torch.Tensor]  # per observation part [N, ...]
    labels: torch.Tensor  # [N, 2] int64 (lateral index, longitudinal index)
    soft: tuple[torch.Tensor, torch.Tensor] | None = None  # ([N, n_long], [N, n_lat]) float32, or None

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @staticmethod
    def of(d: Demonstrations) -> Demos:
        obs = {k: torch.from_numpy(v) for k, v in d.obs.items() if not is_critic_key(k)}  # the policy's parts
        return Demos(obs, torch.from_numpy(d.labels).long())

    def distributions(self, n_long: int, n_lat: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``soft``, or the labels as one-hot distributions."""
        if self.soft is not None:
            return self.soft
        return (
            torch.nn.functional.one_hot(self.labels[:, 1], n_long).float(),
            torch.nn.functional.one_hot(self.labels[:, 0], n_lat).float(),
        )

    def concat(self, other: Demos) -> Demos:
        _same_obs_parts("Demos.concat", self, other)
        obs = {k: torch.cat([self.obs[k], other.obs[k]]) for k in self.obs}
        soft = None
        if self.soft is not None or other.soft is not None:
            n_long, n_lat = (self.soft or other.soft)[0].shape[1], (self.soft or other.soft)[1].shape[1]  # type: ignore[index]
            a, b = self.distributions(n_long, n_lat), other.distributions(n_long, n_lat)
            soft = (torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]]))
        return Demos(obs, torch.cat([self.labels, other.labels]), soft)

    def take(self, idx: torch.Tensor) -> Demos:
        soft = None if self.soft is None else (self.soft[0][idx], self.soft[1][idx])
        return Demos({k: v[idx] for k, v in self.obs.items()}, self.labels[idx], soft)

    def to(self, device) -> Demos:
        soft = None if self.soft is None else (self.soft[0].to(device), self.soft[1].to(device))
        return Demos({k: v.to(device) for k, v in self.obs.items()}, self.labels.to(device), soft)


def _same_obs_parts(what: str, a: Demos, b: Demos) -> None:
    if set(a.obs) != set(b.obs):
        raise ValueError(f"{what}: observation parts differ: {sorted(a.obs)} vs {sorted(b.obs)}")


@dataclass
class DemoParts:
    """Several :class:`Demos` sampled as their concatenation, without building it: the expert's states and the
    states DAgger labelled, in that order. In camera mode a labelled state carries its images (~150 KB at
    128x64, two frames of three cameras), so a concatenated copy of 12 DAgger rounds is 3.6 GB more memory
    each time imitation data is assembled; :meth:`take` copies only the minibatch, and gives what
    ``Demos.concat`` of the parts then ``take`` would, bit for bit."""

    parts: tuple[Demos, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("DemoParts: no parts")
        for p in self.parts[1:]:
            _same_obs_parts("DemoParts", self.parts[0], p)

    @classmethod
    def of(cls, parts: Sequence[Demos]) -> Demos | DemoParts | None:
        """``parts`` as one sample space: None if there are none, the one part itself if there is one."""
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else cls(tuple(parts))

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def take(self, idx: torch.Tensor) -> Demos:
        idx = torch.as_tensor(idx, dtype=torch.long)
        n = len(self)
        if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise IndexError(f"DemoParts.take: an index outside 0..{n - 1}")
        idx = torch.where(idx < 0, idx + n, idx)
        pieces: list[Demos] = []
        where: list[torch.Tensor] = []  # positions in idx that each piece holds, in the order taken
        lo = 0
        for p in self.parts:
            hi = lo + len(p)
            pos = torch.nonzero((idx >= lo) & (idx < hi)).flatten()
            if pos.numel():
                pieces.append(p.take(idx[pos] - lo))
                where.append(pos)
            lo = hi
        if not pieces:  # an empty minibatch: the parts' layout with no rows
            return self.parts[0].take(idx)
        out = pieces[0]
        for piece in pieces[1:]:
            out = out.concat(piece)
        if any(p.soft is not None for p in self.parts) and out.soft is None:  # one-hot, as concat of all would
            long_, lat = next(p.soft for p in self.parts if p.soft is not None)
            out = Demos(out.obs, out.labels, out.distributions(long_.shape[1], lat.shape[1]))
        return out.take(torch.argsort(torch.cat(where)))


ImitationData = Demos | DemoParts  # what the learner's imitation minibatches are drawn from


@dataclass
class Minibatch:
    """N flattened steps of a :class:`rollout.fragment.Batch` with their advantages, for one PPO step."""

    obs: dict[str, torch.Tensor]  # per part [N, ...]
    actions: torch.Tensor  # [N, 2] int64
    logp: torch.Tensor  # [N, 2] old log-probabilities per action dimension
    values: torch.Tensor  # [N, 2] old values per reward part
    adv: torch.Tensor  # [N, 2] advantages per reward part (normalised when they reach the loss)
    returns: torch.Tensor  # [N, 2] GAE returns per reward part
    aux_flags: torch.Tensor  # [N, 5] bool

    def take(self, idx: torch.Tensor) -> Minibatch:
        return Minibatch(
            {k: v[idx] for k, v in self.obs.items()}, self.actions[idx], self.logp[idx], self.values[idx],
            self.adv[idx], self.returns[idx], self.aux_flags[idx],
        )  # fmt: skip

    def to(self, device: torch.device) -> Minibatch:
        return Minibatch(
            {k: v.to(device) for k, v in self.obs.items()}, self.actions.to(device), self.logp.to(device),
            self.values.to(device), self.adv.to(device), self.returns.to(device), self.aux_flags.to(device),
        )  # fmt: skip


class NonFiniteLoss(RuntimeError):
    """Losses kept coming out NaN/Inf: training stops, the last good checkpoint stays as it is."""


def _flat(x: torch.Tensor) -> torch.Tensor:
    """[T, B, ...] -> [T * B, ...]."""
    return x.reshape(-1, *x.shape[2:])


class Learner:
    """Policy + optimizer + counters; ``update_rl`` (PPO epochs) and ``update_il`` (imitation)."""

    def __init__(self, policy: ActorCritic, settings: LearnerSettings, rank: int = 0, world_size: int = 1):
        self.s = settings
        self.rank, self.world_size = rank, world_size
        self.device = torch.device(settings.device)
        self.policy = policy.to(self.device)
        self.opt = torch.optim.Adam(self.policy.parameters(), lr=settings.lr, eps=settings.ppo.adam_eps)
        self.updates = 0  # optimizer steps taken
        self.stage: str | None = None  # the LR schedule restarts when the stage changes
        self.schedule_start = 0  # updates count where the current schedule began
        self.skipped = 0  # non-finite losses skipped, in all
        self.consecutive_skips = 0
        self.gen = torch.Generator().manual_seed(settings.seed)

    # -- schedule and state ------------------------------------------------------------------------
    def lr_now(self) -> float:
        frac = min(1.0, (self.updates - self.schedule_start) / max(1, self.s.total_updates))
        return self.s.lr * (1.0 - frac * (1.0 - self.s.ppo.lr_final_fraction))

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
            if self.consecutive_skips >= self.s.ppo.max_consecutive_skips:
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
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.s.ppo.max_grad_norm)
        if not torch.isfinite(grad_norm):
            self.opt.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.opt.step()
        self.updates += 1
        return True

    # -- the loss (one minibatch) --------------------------------------------------------------------
    def loss_fn(self, mb: Minibatch, demo: Demos | None, critic_only: bool = False) -> dict[str, torch.Tensor]:
        """PPO (+ directional aux, + weighted IL) on one minibatch shard. Advantages arrive normalised.
        critic_only: the value loss alone (the critic's warm-up: the policy's own parameters get no gradient
        unless the critic shares them, ``policy.critic='shared'``)."""
        p = self.s.ppo
        out = self.policy.evaluate_actions(mb.obs, mb.actions)
        if critic_only:
            v_dim = 0.5 * ((out.values - mb.returns) ** 2).mean(dim=0)  # [2], as ppo_loss's unclipped value loss
            return {
                "loss": p.vf_coef * v_dim.sum(),
                "losses/value_loss": v_dim.sum().detach(),
                "losses/value_loss_lat": v_dim[0].detach(),
                "losses/value_loss_long": v_dim[1].detach(),
            }
        terms = ppo_loss(
            out.log_prob,
            mb.logp,
            mb.adv,
            clip=(p.clip_lateral, p.clip_longitudinal),
            new_values=out.values,
            returns=mb.returns,
            old_values=mb.values,
            value_clip=p.value_clip,
            entropy=out.entropy,
            ent_coef=p.ent_coef,
            vf_coef=p.vf_coef,
            norm_adv=False,
        )
        loss = terms["loss"]
        weights = self.s.aux_weights
        if any(w != 0.0 for w in weights):
            aux = directional_aux_loss(
                out.logits_long, out.logits_lat, mb.actions, mb.adv, mb.aux_flags, weights=weights
            )
            loss = loss + aux.pop("loss")
            terms.update(aux)
        if demo is not None and self.s.il_weight > 0.0:
            il = self._il_terms(demo)
            loss = loss + self.s.il_weight * il.pop("loss")
            terms.update(il)
        terms["loss"] = loss
        return terms

    def _il_terms(self, demo: Demos) -> dict[str, torch.Tensor]:
        labels = demo.labels
        logits_long, logits_lat = self.policy.logits(demo.obs, long_idx=labels[:, 1])
        return il_loss(
            logits_long, logits_lat, labels[:, 0], labels[:, 1], focal_gamma=self.s.il.focal_gamma, soft=demo.soft
        )

    # -- updates -----------------------------------------------------------------------------------
    def advantages(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE per reward part over a [T, B] batch (bootstrapped on truncation)."""
        return gae(
            batch.rewards.float(),
            batch.values.float(),
            batch.next_values.float(),
            batch.terminated.bool(),
            batch.truncated.bool(),
            gamma=self.s.ppo.gamma,
            lam=self.s.ppo.lam,
        )

    def update_rl(self, batch: Batch, demos: ImitationData | None = None, critic_only: bool = False) -> dict:
        """PPO epochs over a [T, B] batch (the gathered fragments). Returns mean diagnostics (CleanRL's names;
        per action head ``_lat``/``_long``, per reward part for the explained variance).

        Advantages are normalised per reward part by ``ppo.adv_norm``: over the whole batch with the std
        floored at ``ppo.adv_std_floor`` ('batch'), per minibatch ('minibatch', CleanRL's), or not ('none').
        critic_only: train the value function alone (the warm-up of stage rl)."""
        p = self.s.ppo
        self.policy.train()
        adv, ret = self.advantages(batch)
        if p.adv_norm == "batch":  # every rank holds the whole batch: the same statistics everywhere
            adv = normalize_advantages(adv.reshape(-1, adv.shape[-1]), std_floor=p.adv_std_floor).reshape(adv.shape)
        flat = Minibatch(
            {k: _flat(v) for k, v in batch.obs.items()}, _flat(batch.actions), _flat(batch.logp),
            _flat(batch.values).float(), _flat(adv), _flat(ret), _flat(batch.aux_flags),
        ).to(self.device)  # fmt: skip
        grid = self.policy.frozen_grid(flat.obs)  # a frozen lift's grid: once per batch, not per minibatch
        if grid is not None:
            flat.obs[BEV_KEY] = grid
        N = flat.actions.shape[0]
        mb_size = max(self.world_size, math.ceil(N / p.minibatches))
        sums: dict[str, float] = {}
        count = 0
        for _ in range(p.epochs):
            perm = torch.randperm(N, generator=self.gen)
            for start in range(0, N, mb_size):
                idx = perm[start : start + mb_size]
                mine = self._shard(torch.arange(len(idx)))
                mb = flat.take(idx[mine])
                if p.adv_norm == "minibatch":  # over the whole minibatch, then this rank's slice
                    mb.adv = normalize_advantages(flat.adv[idx], std_floor=0.0)[mine]
                use_demos = demos is not None and self.s.il_weight > 0 and not critic_only
                demo = self._demo_batch(demos) if use_demos else None  # type: ignore[arg-type]
                terms = self.loss_fn(mb, demo, critic_only)
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
        self.policy.update_obs_stats(batch.obs)
        out = {k: v / max(count, 1) for k, v in sums.items()}
        with torch.no_grad():  # how well the rollout's values (before this update) predicted the returns
            y, yhat = ret.reshape(-1, 2), batch.values.float().reshape(-1, 2)
            var = y.var(dim=0)
            ev = torch.where(var > 1e-8, 1.0 - (y - yhat).var(dim=0) / var.clamp_min(1e-8), torch.zeros_like(var))
            out["losses/explained_variance"] = float(ev.mean())
            out["losses/explained_variance_lat"], out["losses/explained_variance_long"] = float(ev[0]), float(ev[1])
        out.update(self._counters())
        return out

    def _demo_batch(self, demos: ImitationData) -> Demos:
        idx = torch.randint(0, len(demos), (self.s.il.batch_size,), generator=self.gen)
        return demos.take(self._shard(idx)).to(self.device)

    def merge_obs_stats(self, demos: Demos) -> None:
        """Merge the demonstrations' observations into the policy's running statistics.

        The training driver calls it once with the demonstrations, before the first IL iteration;
        ``update_il`` leaves the statistics alone, so the same frames are not merged again every IL
        round (they would outweigh the rollouts more with each round).
        """
        self.policy.update_obs_stats(demos.obs)

    def update_il(self, demos: ImitationData, steps: int) -> dict:
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
