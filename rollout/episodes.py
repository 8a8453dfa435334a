"""Whole episodes over a list of scenarios: what evaluation, filming and teacher labelling drive.

:func:`run_episodes` drives one act function over scenario ids through a vector env built with
``autoreset=False``: every sub-env runs one clip; when it ends, the sub-env starts the next clip of the
list (several starts in one render call), so no env idles while clips are left. Each clip gives one
record (the clip's order), the input of ``evaluation.metrics``:

- ``scenario``, ``kind``, ``horizon``, ``event`` ('' or the first failure), ``steps``, ``ret`` (sum of
  rewards), ``error`` ('' or the scenario's failure), ``collision_location``;
- per state, from the reset state on (``steps + 1`` entries): ``speed`` (m/s), ``yaw`` (rad),
  ``route_completion``, ``progress_lag`` (m), ``expert_gap`` (m to the logged expert at the same step),
  ``expert_speed`` (m/s); ``path_distance`` (m to the expert path);
- with ``frames``: ``frames`` [steps + 1] rgb_array images (cameras + bird's-eye view), the last one the
  state in which the episode ended;
- with ``extras``: per name, the list of the extra's values at every state an action was taken in.

An act function maps a batch of observations and the envs' infos to actions: ``act(obs, infos) ->
int64 [N, 2]`` (lateral index, longitudinal index). Rows of sub-envs with no clip left are ignored. An
:class:`Actor` is what travels to a worker and builds its act function there (a policy, a baseline, a
teacher).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from envs.vector import VectorDrivingEnv
from rollout.infos import env_info

ActFn = Callable[[Mapping[str, np.ndarray], Sequence[Mapping[str, Any]]], np.ndarray]
# An extra: (vector env, observation batch, per-env infos) -> [N, ...] values of the current states
Extra = Callable[[VectorDrivingEnv, Mapping[str, np.ndarray], Sequence[Mapping[str, Any]]], np.ndarray]


class Actor(Protocol):
    """What a rollout worker drives whole episodes with, as plain data (it travels to Ray actors).

    label: its name in results; env: the EnvConfig overrides it drives with (its observation mode and
    parts); build(action_spec, threads) -> act function, called once in the process that drives.
    """

    @property
    def label(self) -> str: ...

    @property
    def env(self) -> dict: ...

    def build(self, action_spec, threads: int) -> ActFn: ...


def _new_record(scenario, info: Mapping[str, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = dict(
        scenario=str(scenario.id),
        kind=str(getattr(scenario, "tags", {}).get("kind", "")),
        horizon=int(getattr(scenario, "horizon", 0)),
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
        collision_location="",
    )
    return rec


def _state(rec: dict, info: Mapping[str, Any], expert) -> None:
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
    k = min(rec["steps"], len(expert) - 1)  # the step this state is at (0 at reset)
    rec["expert_gap"].append(float(np.hypot(*(np.asarray(s[:2], np.float64) - expert.xy[k]))))
    rec["expert_speed"].append(float(expert.speed[k]))


def run_episodes(
    act: ActFn,
    venv: VectorDrivingEnv,
    scenario_ids: Sequence[str],
    *,
    frames: Callable[[str], bool] | None = None,
    extras: Mapping[str, Extra] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """One record per scenario id, in the given order (module docstring).

    venv: a vector env made with ``autoreset=False`` whose pool holds the scenarios (``render_mode=
    "rgb_array"`` when ``frames`` is given), with no more envs than clips (a sub-env whose clip has ended
    keeps its last observation and info in the batch, its action ignored); frames(scenario_id) -> keep that
    clip's frames; extras: per name, a function of the current states recorded at every step;
    progress(done, total) after each clip.
    """
    if venv.autoreset:
        raise ValueError("run_episodes: the vector env must be made with autoreset=False")
    ids = [str(s) for s in scenario_ids]
    if frames is not None and venv.render_mode != "rgb_array":
        raise ValueError("run_episodes: frames need a vector env made with render_mode='rgb_array'")
    N = venv.num_envs
    if len(ids) < N:  # every sub-env starts on a clip: act gets a whole batch of real observations
        raise ValueError(f"run_episodes: {len(ids)} clip(s) for {N} envs; make the vector env with at most {len(ids)}")
    todo = list(range(len(ids)))[::-1]  # indices into ids, popped from the end
    running: list[int | None] = [None] * N  # the index into ids each sub-env drives
    recs: dict[int, dict] = {}
    expert: dict[int, Any] = {}  # per id index: the logged expert track (for expert_gap)
    infos: list[Mapping[str, Any]] = [{} for _ in range(N)]  # each sub-env's latest info
    done_count = 0
    t0 = time.perf_counter()

    def start(slots: list[int]):
        picks = [todo.pop() for _ in slots]
        obs, merged = venv.reset_envs(slots, [ids[j] for j in picks])
        for i, j in zip(slots, picks):
            running[i] = j
            info = env_info(merged, i)
            infos[i] = info
            sc = venv.envs[i].scenario
            rec = recs[j] = _new_record(sc, info)
            expert[j] = sc.expert
            _state(rec, info, sc.expert)
            if frames is not None and frames(ids[j]):
                rec["frames"] = [venv.envs[i].render()]
            for name in extras or {}:
                rec.setdefault("extras", {})[name] = []
        return obs

    obs = start(list(range(min(N, len(todo)))))
    while any(r is not None for r in running):
        live = [i for i in range(N) if running[i] is not None]
        if extras:
            values = {name: np.asarray(fn(venv, obs, infos)) for name, fn in extras.items()}
            for i in live:
                for name, v in values.items():
                    recs[running[i]]["extras"][name].append(v[i])  # type: ignore[index]
        actions = np.asarray(act(obs, infos), dtype=np.int64)
        obs, reward, term, trunc, step_infos = venv.step(actions)
        ended = []
        for i in live:
            j = running[i]
            assert j is not None
            rec = recs[j]
            info = env_info(step_infos, i)
            infos[i] = info
            rec["steps"] += 1
            rec["ret"] += float(reward[i])
            rec["path_distance"].append(float(info.get("path_distance", np.nan)))
            _state(rec, info, expert[j])
            if "frames" in rec:
                rec["frames"].append(venv.envs[i].render())  # no autoreset: the state the step ended in
            if term[i] or trunc[i]:
                rec["event"] = str(info.get("event", "") or "")
                rec["error"] = str(info.get("error", "") or "")
                rec["collision_location"] = str(info.get("collision_location", "") or "")
                running[i] = None
                ended.append(i)
                done_count += 1
                if progress is not None:
                    progress(done_count, len(ids))
        if ended and todo:
            obs = start(ended[: len(todo)])
    seconds = time.perf_counter() - t0
    out = [recs[j] for j in range(len(ids))]
    for r in out:
        r["seconds"] = seconds
    return out
