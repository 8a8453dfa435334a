"""The rollout worker: the one closed-loop runner, for training and for evaluation.

A plain class, so the whole loop runs in one process (``num_actors=0``, tests, debugging);
``rollout.group`` wraps it in Ray actors. It offers two ways of driving:

- ``sample(T)``: fixed-length fragments [T, B] of its own policy copy on the training scenarios, for PPO.
  The worker keeps these environments running across calls: a fragment continues where the previous
  one stopped, episodes cross fragment boundaries.
- ``episodes(actor, scenarios, ids)``: whole episodes of any :class:`rollout.episodes.Actor` (a trained
  policy, a baseline, a teacher) over a list of scenarios, one record each (``rollout.episodes``), for
  evaluation and filming. Its environments and act functions are kept for the next call.

Both can record per-step extras (e.g. a teacher's action label for every visited state).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from envs.config import EnvConfig
from envs.suite import resolve_scenarios
from envs.vector import VectorDrivingEnv
from policy.network import ActorCritic, PolicyConfig
from rollout.episodes import Actor, Extra, run_episodes
from rollout.fragment import Fragment
from rollout.infos import AUX_FLAGS, aux_flags, env_info
from sim.configs import from_dict
from sim.raster_cpu import set_num_threads as set_renderer_threads
from sim.seeding import derive_seed


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to build a worker anywhere (plain data: it travels to Ray actors)."""

    scenarios: tuple[str, ...] = ()  # training scenarios (files, suite folders, suite names); () : episodes only
    env_config: dict = field(default_factory=dict)  # EnvConfig overrides
    policy_config: dict = field(default_factory=dict)  # PolicyConfig overrides
    num_envs: int = 4
    seed: int = 0
    threads: int = 1  # torch and renderer threads in this worker


def set_threads(n: int) -> None:
    """Torch and renderer threads of this process (a Ray actor gets the CPUs it asked for)."""
    n = max(1, int(n))
    torch.set_num_threads(n)
    try:
        set_renderer_threads(n)
    except Exception:  # numba's threading layer already fixed in this process: keep its default
        pass


def to_torch(obs: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in obs.items()}


def build_env(spec: WorkerSpec, num_envs: int | None = None, config_overrides: dict | None = None):
    cfg = {**spec.env_config, **(config_overrides or {})}
    scen = list(spec.scenarios)
    return VectorDrivingEnv(scen if len(scen) != 1 else scen[0], num_envs or spec.num_envs, cfg)


def build_policy(observation_space, action_spec, policy_config: Mapping[str, Any] | None = None):
    cfg = from_dict(PolicyConfig, dict(policy_config or {}))
    return ActorCritic(observation_space, action_spec, cfg)


class EpisodeTracker:
    """Per-env running episode totals; emits a summary when an episode ends."""

    def __init__(self, n: int):
        self.n = n
        self.ret = np.zeros((n, 2))
        self.terms: list[dict[str, float]] = [{} for _ in range(n)]
        self.length = np.zeros(n, np.int64)
        self.scenario = [""] * n

    def start(self, i: int, scenario: str) -> None:
        self.ret[i] = 0.0
        self.terms[i] = {}
        self.length[i] = 0
        self.scenario[i] = scenario

    def add(self, i: int, parts: np.ndarray, terms: Mapping[str, float] | None) -> None:
        self.ret[i] += parts
        self.length[i] += 1
        for k, v in (terms or {}).items():
            self.terms[i][k] = self.terms[i].get(k, 0.0) + float(v)

    def finish(self, i: int, info: Mapping[str, Any], terminated: bool) -> dict:
        return dict(
            scenario=self.scenario[i],
            length=int(self.length[i]),
            ret=float(self.ret[i].sum()),
            ret_lateral=float(self.ret[i, 0]),
            ret_longitudinal=float(self.ret[i, 1]),
            terms=dict(self.terms[i]),
            event=str(info.get("event", "")),
            terminated=bool(terminated),
            error=str(info.get("error", "") or ""),
            collision_location=str(info.get("collision_location", "") or ""),
        )


class RolloutWorker:
    """Owns a vector env and a policy copy; ``sample(T)`` returns a Fragment [T, B]."""

    def __init__(self, spec: WorkerSpec, worker_id: int = 0):
        set_threads(spec.threads)
        torch.manual_seed(spec.seed)
        self.spec = spec
        self.worker_id = worker_id
        self.version = -1
        self.total_steps = 0
        # episodes(): vector envs by (env config, scenarios) and act functions by actor label, kept for reuse
        self._episode_envs: dict[tuple, VectorDrivingEnv] = {}
        self._acts: dict[str, Any] = {}
        self._scenarios: dict[tuple, list] = {}
        self._reset_errors: list[str] = []  # failures of the first reset, reported with the first fragment
        if not spec.scenarios:  # an episodes-only worker (evaluation): no training env, no policy
            return
        self.env = build_env(spec)
        self.policy = build_policy(self.env.single_observation_space, self.env.action_spec, spec.policy_config)
        self.policy.eval()
        self.B = self.env.num_envs
        self.tracker = EpisodeTracker(self.B)
        obs, infos = self.env.reset(seed=derive_seed(spec.seed, worker_id))
        self.obs = obs
        for i in range(self.B):
            info = env_info(infos, i)
            self.tracker.start(i, str(info.get("scenario", "")))
            if info.get("error"):
                self._reset_errors.append(str(info["error"]))

    # -- weights -----------------------------------------------------------------------------------
    def set_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> int:
        self.policy.load_state_dict(state_dict)
        self.version = int(version)
        return self.version

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def observation_space(self):
        return self.env.single_observation_space

    def action_spec(self):
        return self.env.action_spec

    def rig(self) -> tuple[str, int, int]:
        """(rig name, width, height) the cameras render at."""
        r = self.env.rig
        return (r.name, r.width, r.height)

    def ping(self) -> int:
        return self.worker_id

    def pid(self) -> int:
        return os.getpid()

    # -- sampling ----------------------------------------------------------------------------------
    @torch.no_grad()
    def _forward(self, obs: Mapping[str, np.ndarray], deterministic: bool = False):
        return self.policy.act(to_torch(obs), deterministic=deterministic)

    @torch.no_grad()
    def sample(self, T: int, deterministic: bool = False, extras: Mapping[str, Extra] | None = None) -> Fragment:
        """A fragment [T, B] of the policy on the training scenarios (module docstring); extras: per name, a
        function of the current states (``rollout.episodes.Extra``) recorded before every action."""
        t0 = time.perf_counter()
        B = self.B
        obs_buf: dict[str, list] = {k: [] for k in self.obs}
        actions = np.zeros((T, B, 2), np.int64)
        logp = np.zeros((T, B, 2), np.float32)
        values = np.zeros((T, B, 2), np.float32)
        next_values = np.zeros((T, B, 2), np.float32)
        rewards = np.zeros((T, B, 2), np.float32)
        terminated = np.zeros((T, B), bool)
        truncated = np.zeros((T, B), bool)
        flags = np.zeros((T, B, len(AUX_FLAGS)), bool)
        # first step of each env's running episode inside this fragment: an episode that ends with an
        # event gets its direction on every step from there up to (not including) the terminal one.
        # Steps of the same episode in an earlier fragment (already handed out) keep no flag.
        ep_first = np.zeros(B, np.int64)
        episodes: list[dict] = []
        errors, self._reset_errors = self._reset_errors, []
        extra_buf: dict[str, list] = {name: [] for name in extras or {}}
        infos_now: list[Mapping[str, Any]] = [{} for _ in range(B)]
        out = self._forward(self.obs, deterministic)
        for t in range(T):
            for k, v in self.obs.items():
                obs_buf[k].append(v)
            for name, fn in (extras or {}).items():
                extra_buf[name].append(np.asarray(fn(self.env, self.obs, infos_now)))
            actions[t] = out.action.numpy()
            logp[t] = out.log_prob.numpy()
            values[t] = out.values.numpy()
            obs, _, term, trunc, infos = self.env.step(actions[t])
            terminated[t], truncated[t] = term, trunc
            done = term | trunc
            nxt = self._forward(obs, deterministic)
            next_values[t] = nxt.values.numpy()
            final_idx = np.flatnonzero(trunc)
            if len(final_idx):  # bootstrap truncated episodes from their final observation, not the reset one
                finals = [infos["final_obs"][i] for i in final_idx]
                fo = {k: np.stack([f[k] for f in finals]) for k in finals[0]}
                next_values[t, final_idx] = self._forward(fo).values.numpy()
            for i in range(B):
                step_info = env_info(infos, i)
                infos_now[i] = step_info
                info = step_info.get("final_info", step_info) if done[i] else step_info
                parts = np.asarray(info.get("reward_parts", np.zeros(2)), np.float32)
                rewards[t, i] = parts
                self.tracker.add(i, parts, info.get("reward_terms"))
                if done[i]:
                    # RAD (Eq. 8-13) weighs every step that led to the event; its code zeroes the loss on
                    # the collided frame itself, here the terminal step t (its next state is the event's)
                    flags[ep_first[i] : t, i] = aux_flags(info)
                    ep_first[i] = t + 1
                    ep = self.tracker.finish(i, info, bool(term[i]))  # ep["error"]: this episode's own failure
                    episodes.append(ep)
                    # the step's failure and those of the autoreset that followed it (a scenario that
                    # fails to load is charged and replaced inside reset, so it ends no episode)
                    if step_info.get("error"):
                        errors.append(str(step_info["error"]))
                    self.tracker.start(i, str(step_info.get("scenario", "")))
            self.obs, out = obs, nxt
        self.total_steps += T * B
        obs_arr = {k: np.stack(v) for k, v in obs_buf.items()}
        frag = Fragment(
            obs=obs_arr,
            actions=actions,
            logp=logp,
            values=values,
            next_values=next_values,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            aux_flags=flags,
            policy_version=self.version,
            worker_id=self.worker_id,
            episodes=episodes,
            errors=errors,
            quarantined=list(self.env.quarantined),
            seconds=time.perf_counter() - t0,
            extras={name: np.stack(v) for name, v in extra_buf.items()},
        )
        return frag

    def stats(self) -> dict:
        quarantined = list(self.env.quarantined) if self.spec.scenarios else []
        return dict(worker_id=self.worker_id, total_steps=self.total_steps, quarantined=quarantined)

    # -- whole episodes ----------------------------------------------------------------------------
    def episodes(
        self,
        actor: Actor,
        scenarios: Sequence,
        ids: Sequence[str],
        num_envs: int,
        frames: bool = False,
        extras: Mapping[str, Extra] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[dict]:
        """Drive ``actor`` over the clips ``ids`` of ``scenarios`` (files, suite folders, Scenarios: the list
        the ids come from), ``num_envs`` at a time; one record per id, in order (``rollout.episodes``).
        frames: keep every clip's rgb_array frames (filming). The env (per actor env config and scenario
        list) and the act function (per actor label: a label names one policy for the worker's life) are built
        once and kept for later calls. progress(done, total) after each clip (in this process only)."""
        key = tuple(str(getattr(s, "path", None) or getattr(s, "id", s)) for s in scenarios)
        if key not in self._scenarios:
            self._scenarios[key] = resolve_scenarios(list(scenarios))
        n = max(1, min(int(num_envs), len(ids)))  # no more envs than clips (the last chunk may be short)
        env_key = (json.dumps(actor.env, sort_keys=True, default=str), key, n, bool(frames))
        venv = self._episode_envs.get(env_key)
        if venv is None:
            mode = "rgb_array" if frames else None
            venv = VectorDrivingEnv(self._scenarios[key], n, dict(actor.env), render_mode=mode, autoreset=False)
            self._episode_envs[env_key] = venv
        if actor.label not in self._acts:
            self._acts[actor.label] = actor.build(EnvConfig.from_dict(actor.env).action_spec, self.spec.threads)
        keep = (lambda _sid: True) if frames else None
        return run_episodes(self._acts[actor.label], venv, ids, frames=keep, extras=extras, progress=progress)
