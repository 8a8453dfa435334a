"""Demonstrations for imitation: observations rendered along each expert's logged path, with its labels.

RAD's IL rounds train on the expert's action bins at states the expert visited. For every scenario
and step t < horizon the ego is placed on the expert's pose at t, with the expert's speed, yaw rate,
acceleration and steering, and the expert's previous label as the "last action", exactly the state
the env would be in had the ego driven the expert's path; the observation is built there (cameras
rendered in batches) and labelled with ``expert_action[t]``, the nearest feasible bins to the
expert's displacement over the next 0.5 s.

Built once per scenario set and env config and cached on disk (``.npz`` without pickle) under
``<cache>/demos/``; a second call loads in a fraction of a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.driving import DrivingEnv, render_requests
from sim.files import atomic_path, cache_dir, sha256_file

log = logging.getLogger("envs")

DEMOS_VERSION = 2  # 2: the key holds the observation space
RENDER_BATCH = 8


def _cache_root() -> Path:
    return cache_dir("demos")


def _fingerprint(scenarios, config_dict: dict, observation_space: str = "") -> str:
    """The cache key: the format version, the env config, the observation space it gives (so a change of
    what an observation holds, at the same settings, is never read from an older file) and the scenarios."""
    h = hashlib.sha256()
    h.update(json.dumps({"v": DEMOS_VERSION, "config": config_dict}, sort_keys=True, default=str).encode())
    h.update(observation_space.encode())
    for sc in scenarios:
        path = getattr(sc, "path", None)
        h.update(str(sc.id).encode())
        if path is not None and Path(path).is_file():
            h.update(bytes.fromhex(sha256_file(path)))
    return h.hexdigest()[:24]


@dataclass
class Demonstrations:
    """Observations along the experts' paths with their IL labels: N frames.

    obs: per observation part, [N, ...] (the env's dtypes: cameras uint8 [N, C, H, W, 3], the rest float32).
    labels: int64 [N, 2] (lateral index, longitudinal index), the expert's bins for the next action.
    scenario_index: int64 [N] index into ``scenario_ids``; step: int64 [N] the clip step of each frame.
    scenario_ids: the scenarios' ids in pool order; skipped: {id: error} of scenarios left out (broken).
    """

    obs: dict[str, np.ndarray]
    labels: np.ndarray
    scenario_index: np.ndarray
    step: np.ndarray
    scenario_ids: list[str]
    skipped: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_scenarios(self) -> int:
        """Scenarios that gave frames."""
        return len(self.scenario_ids) - len(self.skipped)


def expert_motion(d, t: int) -> dict[str, Any]:
    """The env's dynamic state had the ego driven the expert's path up to step t: ``state`` [4] and the
    ego part's yaw rate, acceleration and steering (``DrivingEnv.observe_state``'s arguments)."""
    poses = d.expert_poses
    speed = np.asarray(d.scenario.expert.speed, dtype=np.float64)
    dt = d.dt
    yaw_rate = 0.0
    accel = 0.0
    if t > 0:
        dyaw = (poses[t, 3] - poses[t - 1, 3] + math.pi) % (2 * math.pi) - math.pi
        yaw_rate = dyaw / dt
        accel = (speed[t] - speed[t - 1]) / dt
    v = float(speed[t])
    steer = math.atan(d.wheelbase * yaw_rate / v) if v > 0.1 else 0.0
    return dict(state=np.array([poses[t, 0], poses[t, 1], poses[t, 3], v]), yaw_rate=yaw_rate, accel=accel, steer=steer)


def expert_demonstrations(
    source, config: dict | None = None, cache: bool = True, progress: bool = True
) -> Demonstrations:
    """Observations along the experts' paths and their IL labels (:class:`Demonstrations`).

    source: scenarios as ``DrivingEnv`` takes them (a built-in suite name, a folder, files, Scenarios).
    config: env config overrides (the same as training's, so the observations match).
    A scenario that fails (its PLY is corrupt...) is charged in the pool, logged and left out
    (``skipped``); only a suite where every scenario fails raises.
    """
    env = DrivingEnv(config, scenarios=source)
    pool = env.pool
    key = _fingerprint(pool.scenarios, env.config.to_dict(), repr(env.observation_space))
    path = _cache_root() / f"demos-{key}.npz"
    if cache and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:  # object arrays (pickles) are refused, not loaded
                files: dict[str, Any] = {k: z[k] for k in z.files}
            return Demonstrations(
                obs={k[4:]: v for k, v in files.items() if k.startswith("obs.")},
                labels=files["labels"],
                scenario_index=files["scenario_index"],
                step=files["step"],
                scenario_ids=[str(s) for s in files["scenario_ids"]],
            )
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            log.warning("demonstrations: ignoring the unreadable cache file %s (%s); building them again", path, e)

    t0 = time.perf_counter()
    spec = env.action_spec
    rows: list[dict[str, np.ndarray]] = []
    labels: list[np.ndarray] = []
    sidx: list[int] = []  # scenario index of each row
    steps: list[int] = []
    pending: list[tuple[int, Any]] = []  # (row index, camera request)

    def flush():
        if not pending:
            return
        imgs = render_requests([r for _, r in pending], env.rig, env.rig.Ks(), env.config.render_backend)
        for (i, _), img in zip(pending, imgs):
            rows[i]["cameras"] = img
        pending.clear()

    n_sc = len(pool)
    skipped: dict[str, str] = {}  # scenarios that failed (a corrupt PLY...): left out, not fatal
    for k in range(n_sc):
        first = len(rows)
        try:
            d = pool.data(k)
            for t in range(d.horizon):
                m = expert_motion(d, t)
                if t > 0:
                    prev = d.expert_action[t - 1]
                    last = (float(spec.lateral[prev[0]]), float(spec.longitudinal[prev[1]]))
                else:
                    last = None  # the anchor that holds the speed
                obs = env.observe_state(
                    k, t, m["state"], yaw_rate=m["yaw_rate"], accel=m["accel"], steer=m["steer"], last_anchor=last,
                    cameras=False,
                )  # fmt: skip
                rows.append(dict(obs))
                labels.append(np.asarray(d.expert_action[t], dtype=np.int64))
                sidx.append(k)
                steps.append(t)
                if env.config.cameras:
                    pending.append((len(rows) - 1, env.camera_request()))
                    if len(pending) >= RENDER_BATCH:
                        flush()
            flush()
            if env.config.cameras and env.config.camera_history:  # now, then k steps earlier, as the env stacks
                k_h, own = env.config.camera_history, [r["cameras"] for r in rows[first:]]
                for t, r in enumerate(rows[first:]):
                    r["cameras"] = np.concatenate([own[t], own[max(t - k_h, 0)]])
        except Exception as e:  # one broken scenario must not stop the run: charge it, leave it out
            skipped[pool.ids[k]] = msg = pool.record_failure(k, e)
            log.error("demonstrations: leaving out scenario %s: %s", pool.ids[k], msg)
            del rows[first:], labels[first:], sidx[first:], steps[first:]
            pending.clear()  # (flushed at each scenario's end: only this scenario's frames wait)
            continue
        if progress and ((k + 1) % max(1, n_sc // 10) == 0 or k + 1 == n_sc):  # about ten lines a build
            log.info("demonstrations: scenario %d/%d (%s), %d frames", k + 1, n_sc, d.id, len(rows))
    env.close()
    if not rows:
        raise RuntimeError(f"demonstrations: every scenario failed: {'; '.join(list(skipped.values())[:3])}")
    out = Demonstrations(
        obs={p: np.stack([r[p] for r in rows]) for p in rows[0]},
        labels=np.stack(labels),
        scenario_index=np.asarray(sidx, np.int64),
        step=np.asarray(steps, np.int64),
        scenario_ids=[str(s.id) for s in pool.scenarios],
        skipped=skipped,
    )
    if cache and not skipped:  # a broken suite is not cached: its failures are reported on every run
        arrays: dict[str, Any] = {f"obs.{k}": v for k, v in out.obs.items()}
        arrays.update(labels=out.labels, scenario_index=out.scenario_index, step=out.step)
        arrays["scenario_ids"] = np.asarray(out.scenario_ids)
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
    log.info("demonstrations: %d frames from %d scenarios in %.1f s", len(rows), n_sc, time.perf_counter() - t0)
    return out
