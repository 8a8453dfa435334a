"""The one pool of rollout workers: Ray actors (or one worker in this process), for training and evaluation.

``RolloutGroup`` is the only place Ray touches rollouts. With ``num_actors=0`` it runs one
``RolloutWorker`` in this process instead (serial mode: tests, debugging, a laptop without Ray).
Training asks for fragments (:meth:`RolloutGroup.sample`: weights out once per version, one fragment
per actor back through ``ray.wait``); evaluation for whole episodes (:meth:`RolloutGroup.run_episodes`:
chunks of clips handed to actors as they free up). Either way, a crashed actor (its process killed, its
node lost) is replaced by a fresh one with the current weights and its work is asked for again, the
other actors' work is kept, and ``restarts`` counts the replacements: every fragment slot and every
episode is reported exactly once. Actors that reserve no GPU see none (``CUDA_VISIBLE_DEVICES`` is
emptied), and every actor asks for the same custom resources.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from envs.suite import resolve_scenarios
from rollout.cluster import actor_render_report
from rollout.episodes import Actor, Extra
from rollout.fragment import Fragment
from rollout.worker import RolloutWorker, WorkerSpec
from sim.seeding import derive_seed

if TYPE_CHECKING:  # Ray is imported only when actors are asked for (serial mode runs without it)
    from ray import ObjectRef

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True)
class ActorResources:
    num_cpus: float = 1.0
    num_gpus: float = 0.0  # a fraction of a GPU per actor: gsplat renders there
    max_restarts: int = 100  # replacements per actor slot before the group gives up
    resources: Mapping[str, float] = field(default_factory=dict)  # Ray custom resources, e.g. {"rollout_node": 1}


def check_resources(key: str, resources: Mapping) -> None:
    """Ray custom resources: names to amounts >= 0 (what ``ray start --resources`` gives nodes)."""
    for name, amount in resources.items():
        if not isinstance(name, str) or not name or isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"{key}: expected {{resource name: amount}}, got {name!r}: {amount!r}")
        if not amount >= 0:
            raise ValueError(f"{key}.{name}: expected an amount >= 0, got {amount!r}")


def scenario_ref(sc):
    """A scenario as it travels to an actor: its file when it has one (small), else the Scenario."""
    p = getattr(sc, "path", None)
    return str(p) if p else sc


class RolloutGroup:
    """N rollout actors (or one local worker when N = 0): fragments for training, episodes for evaluation."""

    def __init__(self, spec: WorkerSpec, num_actors: int, resources: ActorResources = ActorResources()):
        self.spec = spec
        self.num_actors = int(num_actors)
        self.resources = resources
        self.restarts = 0
        self._slot_restarts = [0] * max(self.num_actors, 1)
        self.version = -1
        self._weights_ref: ObjectRef[dict[str, torch.Tensor]] | None = None  # the latest weights, put once
        self.local: RolloutWorker | None  # the in-process worker of serial mode
        if self.num_actors == 0:
            self.local = RolloutWorker(spec, worker_id=0)
            self.actors: list[Any] = []  # Ray handles (Any: Ray types only @ray.method methods)
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
        spec = WorkerSpec(**{**self.spec.__dict__, "seed": derive_seed(self.spec.seed, slot, self.restarts)})
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

    def _dead_errors(self):
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        return (RayActorError, ActorDiedError, ActorUnavailableError)

    def _each(self, method: Callable[..., R], *args) -> list[R]:
        """``method`` (a RolloutWorker method, or a function of the worker) on every worker, in slot order."""
        if self.local is not None:
            return [method(self.local, *args)]
        return self._ray.get([a.__ray_call__.remote(method, *args) for a in self.actors])

    # -- what the workers are ----------------------------------------------------------------------
    def observation_space(self):
        """The training env's single observation space (a gymnasium Dict)."""
        return self._each(RolloutWorker.observation_space)[0]

    def action_spec(self):
        return self._each(RolloutWorker.action_spec)[0]

    def rig(self) -> tuple[str, int, int]:
        """(rig name, width, height) the training env's cameras render at."""
        return self._each(RolloutWorker.rig)[0]

    def render_reports(self, requested: str) -> list[dict[str, Any]]:
        """Per actor: what ``sim.render`` with ``requested`` uses in that process, and where it runs
        (``rollout.cluster.actor_render_report``); in serial mode, the driver's own report."""
        if self.local is not None:
            from sim.rendering import backend_report

            return [dict(backend_report(requested), in_driver=True)]
        return self._each(actor_render_report, requested)

    def actor_pids(self) -> list[int]:
        """Process ids of the rollout actors (for fault-injection tests and ops)."""
        return self._each(RolloutWorker.pid)

    def stats(self) -> list[dict]:
        return self._each(RolloutWorker.stats)

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

    def weights(self) -> dict[str, torch.Tensor]:
        """The first worker's policy weights (what it samples with)."""
        return self._each(RolloutWorker.weights)[0]

    # -- training: fragments -----------------------------------------------------------------------
    def sample(
        self,
        T: int,
        deterministic: bool = False,
        timeout_s: float | None = None,
        extras: Mapping[str, Extra] | None = None,
    ) -> list[Fragment]:
        """One fragment [T, B] from every actor, gathered as they finish (``ray.wait``).

        An actor that dies mid-fragment is replaced and asked again; the returned list always holds
        one fragment per actor slot, in slot order, all from the current policy version.
        """
        if self.local is not None:
            return [self.local.sample(T, deterministic, extras)]
        ray = self._ray
        pending = {a.sample.remote(T, deterministic, extras): i for i, a in enumerate(self.actors)}
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
                pending[actor.sample.remote(T, deterministic, extras)] = slot
        return [done[i] for i in sorted(done)]

    # -- evaluation: whole episodes ----------------------------------------------------------------
    def run_episodes(
        self,
        actors: Sequence[Actor],
        scenarios: Sequence,
        num_envs: int,
        *,
        chunk: int | None = None,
        frames: bool = False,
        extras: Mapping[str, Extra] | None = None,
        progress: Callable[[int], None] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, list[dict]]:
        """Per actor label, one record per scenario, in the scenarios' order (``rollout.episodes``); scenarios:
        Scenarios, scenario files, suite folders or suite names (``envs.suite.resolve_scenarios``).

        Every actor drives every scenario once, ``num_envs`` clips at a time in each worker. On Ray, the
        clips go out in chunks of ``chunk`` (default 2 x num_envs) per actor, handed to workers as they free
        up; a worker that dies is replaced and its chunk asked for again, so each episode is reported exactly
        once. progress(n): n more clips are done. timeout_s: the longest wait for any one chunk.
        """
        labels = [a.label for a in actors]
        if len(set(labels)) != len(labels):
            raise ValueError(f"run_episodes: actor labels must be distinct, got {labels}")
        scen = resolve_scenarios(list(scenarios))  # files, folders, suite names or Scenarios -> Scenarios
        refs = [scenario_ref(s) for s in scen]
        ids = [str(s.id) for s in scen]
        if self.local is not None:
            tick = None if progress is None else (lambda _done, _total: progress(1))
            return {a.label: self.local.episodes(a, refs, ids, num_envs, frames, extras, tick) for a in actors}
        ray = self._ray
        size = max(1, int(chunk or 2 * num_envs))
        scen_ref = ray.put(refs)
        actor_refs = {a.label: ray.put(a) for a in actors}  # a trained policy's weights travel once
        tasks = [(a.label, k) for a in actors for k in range(0, len(ids), size)]
        todo = list(reversed(tasks))
        results: dict[tuple[str, int], list[dict]] = {}
        pending: dict[Any, tuple[int, tuple[str, int]]] = {}

        def submit(slot: int, task: tuple[str, int]) -> None:
            label, k = task
            ref = self.actors[slot].episodes.remote(
                actor_refs[label], scen_ref, ids[k : k + size], num_envs, frames, extras
            )
            pending[ref] = (slot, task)

        for slot in range(len(self.actors)):
            if todo:
                submit(slot, todo.pop())
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout_s)
            if not ready:
                raise TimeoutError(f"run_episodes: no chunk of episodes finished within {timeout_s} s")
            slot, task = pending.pop(ready[0])
            try:
                results[task] = ray.get(ready[0])
            except self._dead_errors() as e:
                self._replace(slot, e)
                submit(slot, task)  # the same chunk again, on the replacement
                continue
            if progress is not None:
                progress(len(results[task]))
            if todo:
                submit(slot, todo.pop())
        return {a.label: [r for k in range(0, len(ids), size) for r in results[(a.label, k)]] for a in actors}

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []
