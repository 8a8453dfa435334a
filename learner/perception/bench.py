"""Stage perception's throughput figures: the frame cache's render frames/s, the stage's training frames/s
and the camera-mode rollout's env-steps/s (``python -m learner.perception --bench``)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.driving import DrivingEnv
from envs.vector import VectorDrivingEnv
from learner.config import PerceptionConfig
from learner.perception.cache import FrameCache
from learner.perception.labels import LABEL_KEYS
from learner.perception.loss import perception_loss, positive_weights
from learner.perception.stage import build_net
from policy.network import ActorCritic, PolicyConfig


def _load() -> dict:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return {}
    return dict(load_1m=round(one, 2), load_5m=round(five, 2), load_15m=round(fifteen, 2), cpus=os.cpu_count())


def bench(suite: str = "train", frames: int = 32, steps: int = 64, threads: int = 1) -> dict:
    """Throughput figures (JSON-able) on this machine, now: the frame cache's rendering + labelling
    (frames/s, scenes loaded beforehand: 4 clips, ``frames`` frames), the stage's training (frames/s,
    forward + backward at batch 32) and the camera-mode rollout (a vector env of 4 with the policy acting,
    frozen encoder) in env-steps/s. The load average before and after goes with them: figures from a
    loaded machine are not final."""
    torch.set_num_threads(threads)
    cfg = PerceptionConfig(shard_frames=frames, cache_mb=1e6)
    out: dict[str, Any] = dict(load_before=_load(), threads=threads, suite=suite)
    env = DrivingEnv({"render_backend": "auto"}, scenarios=suite)
    clips = [env.pool.scenarios[k] for k in range(min(4, len(env.pool)))]
    for k in range(len(clips)):  # PLYs read before the clock starts (a cache build reads each once)
        env.pool.data(k).load_scene()
    every = max(1, (len(clips) * env.pool.data(0).horizon) // frames)
    env.close()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cache = FrameCache.build(clips, {"render_backend": "auto"}, cfg, every, name="bench", root=Path(tmp))
        dt = time.perf_counter() - t0
        out["cache_render"] = dict(frames=len(cache), seconds=round(dt, 2), frames_per_s=round(len(cache) / dt, 2))
        net = build_net(cache, PolicyConfig(), cfg)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        tensors = {k: torch.from_numpy(cache.arrays[k]) for k in ("cameras", "ego", *LABEL_KEYS)}
        vis, pw = torch.from_numpy(cache.visible), positive_weights(cache, cfg.pos_weight_cap)
        bs = min(32, len(cache))
        times = []
        for i in range(4):
            t0 = time.perf_counter()
            batch = {k: v[:bs] for k, v in tensors.items()}
            loss, _ = perception_loss(net(batch["cameras"], batch["ego"]), batch, vis, pw, 0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i:  # the first step allocates
                times.append(time.perf_counter() - t0)
        out["perception_train"] = dict(batch=bs, frames_per_s=round(bs / float(np.mean(times)), 2))
    out["camera_rollout"] = _bench_rollout(suite, steps)
    out["load_after"] = _load()
    return out


def _bench_rollout(suite: str, steps: int) -> dict:
    """env-steps/s of a 4-env camera-mode vector env with the policy choosing the actions (what a
    rollout actor does), and the policy's share of it."""
    venv = VectorDrivingEnv(suite, 4, {"render_backend": "auto"})
    space = venv.envs[0].observation_space
    assert isinstance(space, gym.spaces.Dict)
    net = ActorCritic(space, venv.action_spec)
    net.freeze_cameras()
    obs, _ = venv.reset(seed=0)

    def act(o):
        with torch.no_grad():
            return net.act({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in o.items()}).action.numpy()

    for _ in range(4):
        obs, *_ = venv.step(act(obs))
    policy_s = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        t1 = time.perf_counter()
        a = act(obs)
        policy_s += time.perf_counter() - t1
        obs, *_ = venv.step(a)
    dt = time.perf_counter() - t0
    venv.close()
    return dict(num_envs=4, steps=4 * steps, seconds=round(dt, 2), env_steps_per_s=round(4 * steps / dt, 2),
                policy_share=round(policy_s / dt, 3))  # fmt: skip
