"""Rollout workers as Ray actors: weights out once per version, fragments back through ``ray.wait``.

``RolloutGroup`` is the only place Ray touches rollouts. With ``num_actors=0`` it runs one
``RolloutWorker`` in this process instead (serial mode: tests, debugging, a laptop without Ray).
A crashed actor (its process killed, its node lost) is replaced by a fresh one, which gets the
current weights, and its fragment is asked for again; the other actors' work is kept. Training
goes on meanwhile; ``restarts`` counts the replacements.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rollout.fragment import Fragment
from rollout.worker import RolloutWorker, WorkerSpec

if TYPE_CHECKING:  # Ray is imported only when actors are asked for (serial mode runs without it)
    from ray import ObjectRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0  # a fraction of a GPU per actor: gsplat renders there
    max_restarts: int = 100  # replacements per actor slot before the group gives up
    resources: Mapping[str, float] = field(default_factory=dict)  # Ray custom resources, e.g. {"rollout_node": 1}


class RolloutGroup:
    """N rollout actors (or one local worker when N = 0) sampling fragments with the latest weights."""

    def __init__(self, spec: WorkerSpec, num_actors: int, resources: ActorResources = ActorResources()):
        self.spec = spec
        self.num_actors = int(num_actors)
        self.resources = resources
        self.restarts = 0
        self._slot_restarts = [0] * max(self.num_actors, 1)
        self.version = -1
        self._weights_ref: ObjectRef[dict[str, torch.Tensor]] | None = None  # the latest weights, put once
        self._weights: Mapping[str, torch.Tensor] | None = None
        self.local: RolloutWorker | None  # the in-process worker of serial mode
        if self.num_actors == 0:
            self.local = RolloutWorker(spec, worker_id=0)
            self.actors = []
        else:
            import ray

            self._ray = ray
            self._cls = ray.remote(RolloutWorker)
            self.local = None
            self.actors = [self._spawn(i) for i in range(self.num_actors)]
            ray.get([a.ping.remote() for a in self.actors])  # fail fast if an actor cannot start

    # -- actors ------------------------------------------------------------------------------------
    def _spawn(self, slot: int):
        r = self.resources
        spec = WorkerSpec(**{**self.spec.__dict__, "seed": self.spec.seed + 7919 * (slot + 1) * (1 + self.restarts)})
        opts: dict[str, Any] = dict(num_cpus=r.num_cpus, max_restarts=0, max_task_retries=0)
        if r.num_gpus:
            opts["num_gpus"] = r.num_gpus
        else:
            # Ray no longer hides GPUs from actors that reserve none: without this an actor on a GPU node
            # would render with gsplat on a GPU that Ray has handed to someone else.
            opts["runtime_env"] = {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}
        if r.resources:
            opts["resources"] = dict(r.resources)
        return self._cls.options(**opts).remote(spec, slot)

    def _replace(self, slot: int, error: Exception):
        self.restarts += 1
        self._slot_restarts[slot] += 1
        if self._slot_restarts[slot] > self.resources.max_restarts:
            raise RuntimeError(f"rollout actor {slot} crashed {self._slot_restarts[slot]} times; last: {error}")
        log.warning("rollout actor %d died (%s); starting a replacement", slot, type(error).__name__)
        try:
            self._ray.kill(self.actors[slot], no_restart=True)
        except Exception:
            pass
        actor = self._spawn(slot)
        if self._weights_ref is not None:
            self._ray.get(actor.set_weights.remote(self.version, self._weights_ref))
        self.actors[slot] = actor
        return actor

    # -- weights -----------------------------------------------------------------------------------
    def set_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Send a policy version: one ``ray.put``, every actor loads from the same object."""
        self.version = int(version)
        sd = {k: v.detach().cpu() for k, v in state_dict.items()}
        if self.local is not None:
            self.local.set_weights(version, sd)
            return
        self._weights_ref = self._ray.put(sd)
        pending = {i: a.set_weights.remote(version, self._weights_ref) for i, a in enumerate(self.actors)}
        for i, ref in pending.items():
            try:
                self._ray.get(ref)
            except self._dead_errors() as e:
                self._replace(i, e)

    def _dead_errors(self):
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        return (RayActorError, ActorDiedError, ActorUnavailableError)

    # -- sampling ----------------------------------------------------------------------------------
    def sample(self, T: int, deterministic: bool = False, timeout_s: float | None = None) -> list[Fragment]:
        """One fragment [T, B] from every actor, gathered as they finish (``ray.wait``).

        An actor that dies mid-fragment is replaced and asked again; the returned list always holds
        one fragment per actor slot, all from the current policy version.
        """
        if self.local is not None:
            return [self.local.sample(T, deterministic)]
        ray = self._ray
        pending = {a.sample.remote(T, deterministic): i for i, a in enumerate(self.actors)}
        done: dict[int, Fragment] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            if not ready:
                raise TimeoutError(f"rollout: {len(pending)} actor(s) gave no fragment within {timeout_s} s")
            ref = ready[0]
            slot = pending.pop(ref)
            try:
                done[slot] = ray.get(ref)
            except self._dead_errors() as e:
                actor = self._replace(slot, e)
                pending[actor.sample.remote(T, deterministic)] = slot
        return [done[i] for i in sorted(done)]

    def call(self, method: str, *args):
        """Call a worker method on every worker (local or actors) and return the results."""
        if self.local is not None:
            return [getattr(self.local, method)(*args)]
        return self._ray.get([getattr(a, method).remote(*args) for a in self.actors])

    def actor_pids(self) -> list[int]:
        """Process ids of the rollout actors (for fault-injection tests and ops)."""
        return self.call("pid")

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []
