"""DAgger's data, and the choice of a run's final policy on the evaluation suite.

**DAgger** (Ross, Gordon, Bagnell 2011): imitation on the expert's own states alone leaves the policy
untrained on the states its own mistakes lead to (covariate shift). Each round, the policy drives
(the rollout group, its sampled actions), the reactive expert (``rollout.teachers.reactive_labels``, a
pure function of what is observable at each state) or a privileged policy (``rollout.teachers.PolicyTeacher``,
stage distill: its action distribution) labels every state it visits, and the labelled
states join the imitation data: :func:`collect` gathers one round, :class:`Labelled` keeps at most
``cap`` of them (the oldest go first), one part a round, and puts them in a run's checkpoints (one file a
round, ``dagger-00000.safetensors`` ...; each written once: later checkpoints link it, ``store.Reuse``) so
a resumed run keeps what it aggregated. With a frozen lift (stage perception trained it) a camera state keeps
the lift's BEV grid in place of its images (:func:`as_grids`): a fifth of the memory, and no image encoder in IL.

**Selection**: RL's val figures move by a few clips from one evaluation to the next, so the policy a
run reports is not simply its last one: :class:`BestOfLast` keeps the policies of the last K
evaluations and returns the best by one metric.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from functools import partial

import numpy as np
import torch

from envs.observation import is_critic_key
from learner.learner import DemoParts, Demos
from policy.network import BEV_KEY, ActorCritic
from rollout.episodes import Extra
from rollout.fragment import stack_time
from rollout.group import RolloutGroup
from rollout.teachers import reactive_labels
from sim.configs import ConfigError
from store import Reuse, bytes_to_tensors, tensors_to_bytes

LABEL = "teacher"  # the extra's name in fragments
DAGGER_FILE = "dagger.safetensors"  # all the labelled states in one file: checkpoints written before 2026-12-06
DAGGER_PART = "dagger-{:05d}.safetensors"  # one round's (oldest first): a run's checkpoints, never <run>-il's
_DAGGER_PART_RE = re.compile(r"dagger-(\d{5,})\.safetensors")


def is_dagger_file(name: str) -> bool:
    """Is the checkpoint file ``name`` DAgger's labelled states (which only the run's own resume reads)?"""
    return name == DAGGER_FILE or _DAGGER_PART_RE.fullmatch(name) is not None


def collect(
    group: RolloutGroup, steps: int, T: int, timeout_s: float | None = None, teacher: Extra = reactive_labels
) -> tuple[Demos, dict]:
    """At least ``steps`` states visited by the policy the group holds (sampled actions), each labelled by
    ``teacher`` (``rollout.teachers``: the reactive expert's bins, or a privileged policy's bins and action
    distribution): (Demos [N, ...], stats). Rounds of one fragment [T, B] per actor."""
    obs: dict[str, list[torch.Tensor]] = {}
    labels: list[torch.Tensor] = []
    soft: list[torch.Tensor] = []
    n = 0
    agree = 0.0
    episodes = []
    while n < steps:
        frags = group.sample(T, timeout_s=timeout_s, extras={LABEL: teacher})
        batch = stack_time(frags)
        for k, v in batch.obs.items():
            if not is_critic_key(k):  # the asymmetric critic's parts: not the policy's, nothing to imitate from
                obs.setdefault(k, []).append(v.reshape(-1, *v.shape[2:]))
        value = batch.extras[LABEL].reshape(batch.env_steps, -1)
        lab = value[:, :2].round().long()
        if value.shape[1] > 2:  # a policy teacher: bins, n_long, then its distributions (rollout.teachers)
            soft.append(value[:, 2:].float())
        labels.append(lab)
        agree += float((batch.actions.reshape(-1, 2) == lab).all(1).float().sum())
        n += batch.env_steps
        episodes += [e for f in frags for e in f.episodes]
    events = [e["event"] for e in episodes]
    stats = {
        "dagger/states": float(n),
        "dagger/agreement": agree / max(n, 1),  # the policy's sampled action == the expert's label
        "dagger/failure_rate": sum(1 for e in events if e) / max(len(events), 1),
    }
    dist = None
    if soft:
        q = torch.cat(soft)
        n_long = int(q[0, 0])
        dist = (q[:, 1 : 1 + n_long].contiguous(), q[:, 1 + n_long :].contiguous())
    return Demos({k: torch.cat(v) for k, v in obs.items()}, torch.cat(labels), dist), stats


class Labelled:
    """The labelled states DAgger aggregated: one :class:`Demos` a round, oldest first, the newest ``cap``.

    Kept apart rather than concatenated: imitation samples them with the expert's as one (``DemoParts``,
    no copy of ~150 KB of images a camera state, or of its 32 KB grid: :func:`as_grids`), and :meth:`files`
    serialises only the rounds no earlier checkpoint holds; the others it names by content (``store.Reuse``)
    and the store links them from the version that holds them. Twelve camera rounds were 3.6 GB serialised,
    hashed and written at every checkpoint; now each round's 0.3 GB once.
    """

    def __init__(self, rounds: tuple[Demos, ...] | list[Demos] = ()):
        self.rounds: list[Demos] = list(rounds)
        self._reuse: list[Reuse | None] = [None] * len(self.rounds)  # each round's file, once serialised
        if len(self.rounds) > 1:
            DemoParts(tuple(self.rounds))  # the same observation parts throughout

    def __len__(self) -> int:
        return sum(len(r) for r in self.rounds)

    def add(self, new: Demos, cap: int) -> None:
        """One round more, then only the newest ``cap`` states kept (whole rounds go first, then the oldest
        remaining round's first states)."""
        if self.rounds:
            DemoParts((self.rounds[0], new))  # ValueError if the observation parts differ
        self.rounds.append(new)
        self._reuse.append(None)
        excess = len(self) - cap
        while excess > 0:
            first = self.rounds[0]
            if len(first) <= excess:
                del self.rounds[0], self._reuse[0]
                excess -= len(first)
            else:
                self.rounds[0], self._reuse[0] = first.take(torch.arange(excess, len(first))), None
                excess = 0

    def convert(self, fn: Callable[[Demos], Demos]) -> None:
        """Each round replaced by ``fn`` of it (``Stages.as_grids``); a round ``fn`` returns as it is keeps the
        file an earlier checkpoint holds, a changed one is written anew."""
        for i, part in enumerate(self.rounds):
            new = fn(part)
            if new is not part:
                self.rounds[i], self._reuse[i] = new, None

    def data(self) -> Demos | DemoParts:
        """All of them as one (no copy): what imitation samples."""
        out = DemoParts.of(self.rounds)
        if out is None:
            raise ValueError("Labelled.data: no round labelled yet")
        return out

    def files(self) -> dict[str, bytes | Reuse]:
        """A checkpoint's files: each round serialised the first time, named by content after that."""
        out: dict[str, bytes | Reuse] = {}
        for i, part in enumerate(self.rounds):
            reuse = self._reuse[i]
            if reuse is None:
                data = to_bytes(part)
                self._reuse[i] = Reuse.of(data, partial(to_bytes, part))
                out[DAGGER_PART.format(i)] = data
            else:
                out[DAGGER_PART.format(i)] = reuse
        return out

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> Labelled | None:
        """What :meth:`files` wrote (or the one ``dagger.safetensors`` of older checkpoints); None if neither.
        The rounds read back are known by content, so the next checkpoint links them."""
        parts = sorted((int(m.group(1)), name) for name in files if (m := _DAGGER_PART_RE.fullmatch(name)))
        if parts:
            if [i for i, _ in parts] != list(range(len(parts))):
                raise ValueError(f"DAgger's files are not numbered 0..{len(parts) - 1}: {[n for _, n in parts]}")
            out = cls([from_bytes(files[name]) for _, name in parts])
            out._reuse = [Reuse.of(files[name], partial(to_bytes, r)) for (_, name), r in zip(parts, out.rounds)]
            return out
        if DAGGER_FILE in files:
            return cls([from_bytes(files[DAGGER_FILE])])
        return None


# What a DAgger run may hold at most, as a share of the machine's memory: the labelled states and, while a
# resumed run reads them back from its checkpoint, their bytes once more. The rest of a camera run took ~7 GB of
# a 24 GiB machine (measured in the camera study: the driver 7.1 GB resident with 2.6 GB of DAgger data, two
# rollout actors 2.8 GB).
DAGGER_MEMORY_SHARE = 0.6


def state_bytes(observation_space, soft_bins: int = 0, grid: tuple[int, ...] | None = None) -> int:
    """Bytes one labelled state takes (the policy's observation parts, its two bin labels, a teacher's
    distributions over ``soft_bins`` bins); a camera state's images are most of it, unless a frozen lift's
    grid of shape ``grid`` is kept in their place (:func:`as_grids`)."""
    n = 16 + 4 * soft_bins
    for key, space in observation_space.spaces.items():
        if key == "cameras" and grid is not None:
            n += int(math.prod(grid)) * GRID_DTYPE.itemsize
        elif not is_critic_key(key):
            n += int(math.prod(space.shape)) * np.dtype(space.dtype).itemsize
    return n


# A frozen lift's grid as imitation data keeps it: half the bytes of float32, each value rounded to 11
# significant bits (within 2^-11 of itself; the grid's ReLU outputs are far below float16's 65,504).
GRID_DTYPE = torch.float16


def as_grids(d: Demos, policy: ActorCritic) -> Demos:
    """``d`` with its images replaced by the frozen lift's BEV grid of each state (``obs[BEV_KEY]``, float16).

    Stages il and rl never change a frozen perception, so the grid of a state is the same at every imitation
    step: computed once here, it spares every later minibatch the image encoder, and a state takes 32 KB
    (16 x 32 x 32 half floats) in place of ~150 KB of images, so four times the DAgger rounds fit in memory.
    ``d`` as it is when ``policy`` has no frozen lift, or the images are gone already."""
    if "cameras" not in d.obs or policy.frozen_grid_shape() is None:
        return d
    grid = policy.frozen_grid(d.obs)
    obs = {k: v for k, v in d.obs.items() if k != "cameras"}
    if grid is None:  # no state: an empty grid of the right shape
        grid = torch.zeros((0, *policy.frozen_grid_shape()))  # type: ignore[misc]
    obs[BEV_KEY] = grid.to(GRID_DTYPE)
    return Demos(obs, d.labels, d.soft)


def memory_plan(
    observation_space,
    rounds: int,
    steps: int,
    cap: int,
    soft_bins: int = 0,
    total: int | None = None,
    grid: tuple[int, ...] | None = None,
) -> str:
    """The memory ``rounds`` DAgger rounds of at least ``steps`` states each will hold (at most ``cap``; each
    state's images, or a frozen lift's ``grid`` in their place): a progress line, or ``ConfigError`` naming the
    settings when twice that passes ``DAGGER_MEMORY_SHARE`` of this machine's memory (``total`` bytes; the
    physical memory when None), before anything is trained."""
    per = state_bytes(observation_space, soft_bins, grid)
    states = min(cap, rounds * steps)
    need = states * per
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    line = (
        f"DAgger will hold up to {states:,} labelled states of {per / 1e3:,.0f} KB: {need / 1e9:.1f} GB "
        f"(twice that while a resumed run reads them back; this machine has {total / 2**30:.0f} GiB)"
    )
    if 2 * need > DAGGER_MEMORY_SHARE * total:
        raise ConfigError(
            f"il.dagger_rounds={rounds} x il.dagger_steps={steps}: {line}; more than "
            f"{DAGGER_MEMORY_SHARE:.0%} of it. Give fewer rounds, a smaller il.dagger_max (the oldest states go "
            "first) or smaller images (env.resolution)"
        )
    return line


def to_bytes(d: Demos) -> bytes:
    t = {**{f"obs.{k}": v.contiguous() for k, v in d.obs.items()}, "labels": d.labels}
    if d.soft is not None:
        t["soft.long"], t["soft.lat"] = d.soft[0].contiguous(), d.soft[1].contiguous()
    return tensors_to_bytes(t)


def from_bytes(data: bytes) -> Demos:
    t = bytes_to_tensors(data)
    soft = (t["soft.long"].float(), t["soft.lat"].float()) if "soft.long" in t else None
    return Demos({k[4:]: v for k, v in t.items() if k.startswith("obs.")}, t["labels"].long(), soft)


class BestOfLast:
    """The policies of the last ``k`` evaluations, and the best of them by ``metric`` (``sign`` +1: higher is
    better, -1: lower; ties go to the later one, as more trained)."""

    def __init__(self, k: int, metric: str, sign: float):
        self.k, self.metric, self.sign = int(k), metric, float(sign)
        self.kept: list[tuple[str, dict, dict[str, torch.Tensor]]] = []
        self.start: tuple[str, dict, dict[str, torch.Tensor]] | None = None  # a candidate that never ages out

    def offer(self, label: str, metrics: Mapping, weights: dict[str, torch.Tensor]) -> None:
        self.kept = [*self.kept, (label, dict(metrics), weights)][-self.k :]

    def offer_start(self, label: str, metrics: Mapping, weights: dict[str, torch.Tensor]) -> None:
        """The starting point (``eval.select_start``): a candidate beside the last k, older than all of them."""
        self.start = (label, dict(metrics), weights)

    @property
    def candidates(self) -> list[tuple[str, dict, dict[str, torch.Tensor]]]:
        return ([self.start] if self.start is not None else []) + self.kept

    def best(self) -> tuple[str, dict, dict[str, torch.Tensor]]:
        cands = self.candidates
        if not cands:
            raise ValueError("BestOfLast: no evaluation offered")
        scores = [self.sign * float(m.get(self.metric, float("nan"))) for _, m, _ in cands]
        i = max(range(len(scores)), key=lambda j: (scores[j] if scores[j] == scores[j] else float("-inf"), j))
        return cands[i]
