"""Closed-loop evaluation: drive every scenario of a suite once and record what RAD's metrics need.

``evaluate(act, scenarios, env_config, num_envs)`` runs waves of ``num_envs`` scenarios through one
vector env (one render call per step for the wave); each clip yields a record for
``scenarios.metrics.rad_metrics``. ``act`` maps a batch of observations to actions, e.g. a policy's
deterministic argmax, an exported ONNX policy or a baseline controller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rollout.worker import env_info

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
    from envs.suite import resolve_scenarios
    from envs.vector import VectorDrivingEnv

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
                rec = dict(
                    scenario=pad[i],
                    kind=_kind(sc),
                    horizon=int(getattr(sc, "horizon", 0)),
                    event="",
                    steps=0,
                    ret=0.0,
                    path_distance=[float(info.get("path_distance", 0.0))],
                    speed=[],
                    yaw=[],
                    error="",
                )
                _state(rec, info)
                if keep_frames is not None and keep_frames(pad[i]):
                    rec["frames"] = [venv.envs[i].render()]
                recs.append(rec)
            while live.any():
                actions = np.asarray(act(obs, [env_info(infos, i) for i in range(N)]))
                frames = None
                obs, reward, term, trunc, infos = venv.step(actions)
                for i in np.flatnonzero(live):
                    info = env_info(infos, i)
                    done = bool(term[i] or trunc[i])
                    step = info.get("final_info", info) if done else info
                    rec = recs[i]
                    rec["steps"] += 1
                    rec["ret"] += float(reward[i])
                    rec["path_distance"].append(float(step.get("path_distance", np.nan)))
                    _state(rec, step)
                    if "frames" in rec:
                        frames = frames if frames is not None else venv.render()
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
    return out


def _state(rec: dict, info: Mapping[str, Any]) -> None:
    s = info.get("ego_state")
    if s is not None:
        rec["speed"].append(float(s[3]))
        rec["yaw"].append(float(s[2]))
