"""Closed-loop rollouts for evaluation: drive every scenario of a suite once and record what RAD's metrics need.

- :func:`evaluate` ``(act, scenarios, env_config, num_envs)``: waves of ``num_envs`` scenarios through
  one vector env (one render call per step for the wave); each clip yields a record for
  ``evaluation.metrics.rad_metrics``. ``act`` maps a batch of observations to actions, e.g. a policy's
  deterministic argmax, an exported ONNX policy or a baseline controller. The training driver calls it
  in its own process; :class:`EvalWorker` calls it for ``python -m evaluation``.
- :func:`rollouts`: the one evaluation pool. Every policy entry on every scenario, either in this
  process (``num_actors=0``) or on Ray actors (:class:`EvalWorker` as the actor class), waves handed
  out as actors free up (``ray.wait``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from envs.config import EnvConfig
from envs.suite import resolve_scenarios
from envs.vector import VectorDrivingEnv
from evaluation.baselines import baseline_act
from rollout.cluster import connect
from rollout.worker import env_info, set_threads

ActFn = Callable[[Mapping[str, np.ndarray], Sequence[Mapping[str, Any]]], np.ndarray]


def _kind(scenario) -> str:
    return str(getattr(scenario, "tags", {}).get("kind", ""))


def evaluate(
    act: ActFn,
    scenarios: Sequence,
    env_config: Mapping[str, Any] | None = None,
    num_envs: int = 4,
    progress: Callable[[int, int], None] | None = None,
    keep_frames: Callable[[str], bool] | None = None,
) -> list[dict]:
    """One record per scenario (in the given order). act(obs, infos) -> actions [N, 2] (lat, long).

    keep_frames(scenario_id) -> bool: keep the env's rgb_array frames (cameras + bird's-eye view) of
    those clips in the record's ``frames`` (for videos).
    """
    scen = resolve_scenarios(list(scenarios))
    ids = [str(s.id) for s in scen]
    N = max(1, min(int(num_envs), len(scen)))
    render_mode = "rgb_array" if keep_frames is not None else None
    venv = VectorDrivingEnv(scen, N, dict(env_config or {}), render_mode=render_mode)
    records: dict[str, dict] = {}
    done_count = 0
    t0 = time.perf_counter()
    try:
        for w0 in range(0, len(ids), N):
            wave = ids[w0 : w0 + N]
            pad = wave + [wave[-1]] * (N - len(wave))  # extra envs repeat the last clip; ignored
            obs, infos = venv.reset(options={"scenario": pad})
            live = np.array([i < len(wave) for i in range(N)])
            recs = []
            for i in range(N):
                info = env_info(infos, i)
                sc = scen[ids.index(pad[i])]
                rec: dict[str, Any] = dict(
                    scenario=pad[i],
                    kind=_kind(sc),
                    horizon=int(getattr(sc, "horizon", 0)),
                    event="",
                    steps=0,
                    ret=0.0,
                    path_distance=[float(info.get("path_distance", 0.0))],
                    speed=[],
                    yaw=[],
                    route_completion=[],
                    progress_lag=[],
                    expert_gap=[],
                    expert_speed=[],
                    error="",
                )
                rec["_expert"] = sc.expert
                _state(rec, info)
                if keep_frames is not None and keep_frames(pad[i]):
                    rec["frames"] = [venv.envs[i].render()]
                recs.append(rec)
            while live.any():
                actions = np.asarray(act(obs, [env_info(infos, i) for i in range(N)]))
                frames = None
                obs, reward, term, trunc, infos = venv.step(actions)
                for i in np.flatnonzero(live).tolist():
                    info = env_info(infos, i)
                    done = bool(term[i] or trunc[i])
                    step = info.get("final_info", info) if done else info
                    rec = recs[i]
                    rec["steps"] += 1
                    rec["ret"] += float(reward[i])
                    rec["path_distance"].append(float(step.get("path_distance", np.nan)))
                    _state(rec, step)
                    if "frames" in rec:
                        if frames is None:
                            frames = venv.render()
                            assert frames is not None  # render_mode="rgb_array" where frames are kept
                        rec["frames"].append(frames[i] if not done else rec["frames"][-1])
                    if done:
                        rec["event"] = str(step.get("event", "") or "")
                        rec["error"] = str(step.get("error", "") or "")
                        rec["collision_location"] = str(step.get("collision_location", "") or "")
                        live[i] = False
                        done_count += 1
                        if progress is not None:
                            progress(done_count, len(ids))
            for i, sid in enumerate(wave):
                records[sid] = recs[i]
    finally:
        venv.close()
    out = [records[s] for s in ids]
    for r in out:
        r["seconds"] = time.perf_counter() - t0
        r.pop("_expert", None)
    return out


def _state(rec: dict, info: Mapping[str, Any]) -> None:
    """Append the state after a step (or at reset): the ego's speed and yaw, progress along the route
    (``info["route_completion"]``, ``info["progress_lag"]``), and the time-matched gap to the logged
    expert (the ego's rear axle vs the expert's at the same step, metres) with the expert's speed."""
    s = info.get("ego_state")
    if s is None:
        return
    rec["speed"].append(float(s[3]))
    rec["yaw"].append(float(s[2]))
    rec["route_completion"].append(float(info.get("route_completion", np.nan)))
    rec["progress_lag"].append(float(info.get("progress_lag", np.nan)))
    expert = rec["_expert"]
    k = min(rec["steps"], len(expert) - 1)  # the step this state is at (0 at reset)
    rec["expert_gap"].append(float(np.hypot(*(np.asarray(s[:2], np.float64) - expert.xy[k]))))
    rec["expert_speed"].append(float(expert.speed[k]))


# -- policies as they travel to the workers ----------------------------------------------------------


@dataclass(frozen=True)
class PolicyEntry:
    """One policy to evaluate, as plain data (it travels to the Ray actors).

    label: its name in tables and file names; spec: what the user gave; kind: 'baseline' or 'source';
    env: the EnvConfig overrides it is evaluated with; source: for kind 'source', the resolved
    policy source (``policy.sources``), which each actor turns into an act function.
    """

    label: str
    spec: str
    kind: str
    env: dict
    source: Any = None


def make_act(entry: PolicyEntry, action_spec, threads: int | None = None) -> Callable:
    """``act(obs, infos) -> actions [B, 2]`` for a policy entry: the baseline's, or the trained policy's
    deterministic action (``PolicySource.make_actor``: eager for checkpoints, onnxruntime for exported
    packages), built here, so in whichever process evaluates."""
    if entry.kind == "baseline":
        return baseline_act(entry.spec, action_spec)
    actor = entry.source.make_actor(threads=threads)
    return lambda obs, infos: np.asarray(actor(obs), dtype=np.int64)


# -- the pool ----------------------------------------------------------------------------------------


class EvalWorker:
    """Evaluates shares of scenarios for any policy entry; a plain class, wrapped as a Ray actor."""

    def __init__(self, threads: int = 1):
        set_threads(threads)
        self.threads = threads
        self._acts: dict[str, Callable] = {}

    def run(self, entry: PolicyEntry, scenarios: Sequence, num_envs: int, progress=None) -> list[dict]:
        if entry.label not in self._acts:
            self._acts[entry.label] = make_act(entry, EnvConfig.from_dict(entry.env).action_spec, self.threads)
        return evaluate(self._acts[entry.label], list(scenarios), entry.env, num_envs, progress=progress)

    def pid(self) -> int:
        return os.getpid()


@dataclass(frozen=True)
class PoolSettings:
    """Where the rollouts run: ``num_actors`` Ray actors (0: this process), each stepping ``num_envs`` envs."""

    num_actors: int = 0
    num_envs: int = 4
    threads: int = 1  # torch and renderer threads per actor (and in this process)
    cpus_per_actor: float = 1.0
    gpus_per_actor: float = 0.0  # a fraction of a GPU per actor: gsplat renders there
    ray_address: str = ""  # '': RAY_ADDRESS, else a local instance
    progress: bool = True  # a tqdm bar over clips (stderr)


def scenario_ref(sc):
    """A scenario as it travels to an actor: its file when it has one (small), else the Scenario."""
    p = getattr(sc, "path", None)
    return str(p) if p else sc


def rollouts(entries: Sequence[PolicyEntry], scenarios: Sequence, pool: PoolSettings) -> dict[str, list[dict]]:
    """Per policy label, one record per scenario (in the suite's order): Ray actors, or this process."""
    total = len(entries) * len(scenarios)
    bar = tqdm(total=total, unit="clip", desc="evaluating", disable=not pool.progress, file=sys.stderr)
    out: dict[str, list[dict]] = {}
    try:
        if pool.num_actors == 0:
            worker = EvalWorker(pool.threads)
            for e in entries:
                bar.set_postfix_str(e.label)
                seen = [0]

                def tick(done, _total, seen=seen):
                    bar.update(done - seen[0])
                    seen[0] = done

                out[e.label] = worker.run(e, scenarios, pool.num_envs, progress=tick)
        else:
            out = _ray_rollouts(entries, scenarios, pool, bar)
    finally:
        bar.close()
    return out


def _ray_rollouts(entries, scenarios, pool: PoolSettings, bar) -> dict[str, list[dict]]:
    """Waves of ``num_envs`` scenarios handed out to ``num_actors`` actors as they free up (ray.wait)."""
    import ray  # here, not at the top: in-process evaluation (num_actors=0) runs without Ray

    started = connect(pool.ray_address, log_to_driver=False)
    refs = [scenario_ref(s) for s in scenarios]
    put = {e.label: ray.put(e) for e in entries}  # a trained policy's weights travel once, not per wave
    waves = [(e, k, refs[k : k + pool.num_envs]) for e in entries for k in range(0, len(refs), pool.num_envs)]
    opts: dict[str, Any] = dict(num_cpus=pool.cpus_per_actor, max_restarts=1, max_task_retries=1)
    if pool.gpus_per_actor:
        opts["num_gpus"] = pool.gpus_per_actor
    n = max(1, min(pool.num_actors, len(waves)))
    cls = ray.remote(EvalWorker)
    # Any: Ray types a handle's methods only for @ray.method ones, and EvalWorker is a plain class
    actors: list[Any] = [cls.options(**opts).remote(pool.threads) for _ in range(n)]
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        todo = list(waves)
        pending = {}
        for a in actors:
            if todo:
                e, k, share = todo.pop(0)
                pending[a.run.remote(put[e.label], share, pool.num_envs)] = (a, e, k, len(share))
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            a, e, k, size = pending.pop(ready[0])
            results[(e.label, k)] = ray.get(ready[0])
            bar.update(size)
            if todo:
                e2, k2, share = todo.pop(0)
                pending[a.run.remote(put[e2.label], share, pool.num_envs)] = (a, e2, k2, len(share))
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        if started:
            ray.shutdown()
    return {e.label: [r for k in range(0, len(refs), pool.num_envs) for r in results[(e.label, k)]] for e in entries}
