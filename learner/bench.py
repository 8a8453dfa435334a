"""``python -m learner.bench --json``: throughput of the training loop, all measured in one run.

- ``vector_env``: the vector env alone (random feasible actions, cameras on), envs x steps / s, in
  this process with every core;
- ``rollout_1`` / ``rollout_2``: one and two Ray rollout actors (one CPU each, policy inference
  included) sampling fragments, env-steps/s, and the scaling ``rollout_2 / rollout_1``;
- ``learner``: PPO epochs on a gathered batch, samples/s (samples x epochs / s);
- ``loop``: whole training iterations (weights out, fragments back, GAE, PPO update) with two
  actors, env-steps/s, and ``loop_over_vector_env``: how much of the env's own rate the loop keeps
  (against the mean of the vector env measured first and again last, which brackets the loop).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from envs.vector import VectorDrivingEnv
from learner.config import TrainConfig
from learner.train import Trainer
from rollout.fragment import stack_time
from rollout.group import ActorResources, RolloutGroup
from rollout.worker import WorkerSpec
from sim.bench import machine
from sim.configs import field, from_dict, parse_cli


@dataclass(frozen=True)
class LearnerBenchConfig:
    suite: str = field("train", help="scenarios (built-in suite name or folder)")
    envs_per_actor: int = field(4, help="environments per rollout actor")
    fragment_length: int = field(32, help="steps per fragment")
    rounds: int = field(3, help="sampling rounds / iterations measured per case (after one warm-up)")
    epochs: int = field(4, help="PPO epochs in the learner case")
    json: bool = field(False, help="print JSON only")


def _say(cfg, msg):
    if not cfg.json:
        print(msg, flush=True)


def bench_vector_env(cfg: LearnerBenchConfig, num_envs: int) -> dict:
    venv = VectorDrivingEnv(cfg.suite, num_envs, {"render_backend": "auto"})
    rng = np.random.default_rng(0)
    mask = venv.action_mask

    def act():
        long_i = rng.integers(10, 40, num_envs)
        lat = np.array([rng.choice(np.flatnonzero(mask[j])) for j in long_i])
        return np.stack([lat, long_i], 1)

    venv.reset(seed=0)
    for _ in range(5):
        venv.step(act())
    n = cfg.rounds * cfg.fragment_length
    t0 = time.perf_counter()
    for _ in range(n):
        venv.step(act())
    dt = time.perf_counter() - t0
    venv.close()
    return dict(num_envs=num_envs, steps=n * num_envs, seconds=dt, sps=n * num_envs / dt)


def bench_rollout(cfg: LearnerBenchConfig, num_actors: int) -> dict:
    spec = WorkerSpec(scenarios=(cfg.suite,), env_config={"render_backend": "auto"}, num_envs=cfg.envs_per_actor)
    g = RolloutGroup(spec, num_actors, ActorResources(num_cpus=1))
    try:
        g.set_weights(0, g.weights())
        g.sample(4)  # warm-up: JIT, scene caches
        t0 = time.perf_counter()
        steps = 0
        for _ in range(cfg.rounds):
            steps += sum(f.env_steps for f in g.sample(cfg.fragment_length))
        dt = time.perf_counter() - t0
    finally:
        g.shutdown()
    return dict(actors=num_actors, steps=steps, seconds=dt, sps=steps / dt)


def bench_learner_and_loop(cfg: LearnerBenchConfig) -> tuple[dict, dict]:
    tc = from_dict(
        TrainConfig,
        {
            "run": "bench",
            "store": "/tmp/splatdrive-bench-store",
            "tracking": {"out": "/tmp/splatdrive-bench-out", "tensorboard": False},
            "suite": cfg.suite,
            "stage": "rl",
            "rollout": {"num_actors": 2, "envs_per_actor": cfg.envs_per_actor, "fragment_length": cfg.fragment_length},
            "ppo": {"epochs": cfg.epochs},
        },
    )
    tr = Trainer(tc)
    tr.build()
    try:
        learners, group = tr.learner_group, tr.rollout_group
        group.set_weights(0, learners.weights())
        batch = stack_time(group.sample(cfg.fragment_length))
        n = batch.env_steps
        learners.update_rl(batch)  # warm-up
        t0 = time.perf_counter()
        for _ in range(cfg.rounds):
            learners.update_rl(batch)
        dt = time.perf_counter() - t0
        learner = dict(samples=n, epochs=cfg.epochs, seconds=dt, samples_per_s=n * cfg.epochs * cfg.rounds / dt)
        # the loop: weights out, fragments back, update
        t0 = time.perf_counter()
        steps = 0
        roll = learn = 0.0
        for _ in range(cfg.rounds):
            t1 = time.perf_counter()
            group.set_weights(1, learners.weights())
            frags = group.sample(cfg.fragment_length)
            t2 = time.perf_counter()
            learners.update_rl(stack_time(frags))
            t3 = time.perf_counter()
            roll += t2 - t1
            learn += t3 - t2
            steps += sum(f.env_steps for f in frags)
        dt = time.perf_counter() - t0
        loop = dict(steps=steps, seconds=dt, sps=steps / dt, rollout_seconds=roll, learn_seconds=learn)
    finally:
        tr.close()
    return learner, loop


def run(cfg: LearnerBenchConfig) -> dict:
    import ray  # the optional extra splatdrive[ray]: imported where it is used, as everywhere

    out: dict = dict(machine=machine(), config=dict(cfg.__dict__), load_average_before=_load())
    # The baseline before Ray starts: its worker processes warm up for seconds and would slow it.
    _say(cfg, "vector env ...")
    out["vector_env"] = bench_vector_env(cfg, 2 * cfg.envs_per_actor)
    _say(cfg, f"  {out['vector_env']['sps']:.1f} env-steps/s")
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        for n in (1, 2):
            _say(cfg, f"{n} rollout actor(s) ...")
            out[f"rollout_{n}"] = bench_rollout(cfg, n)
            _say(cfg, f"  {out[f'rollout_{n}']['sps']:.1f} env-steps/s")
        out["rollout_scaling"] = out["rollout_2"]["sps"] / out["rollout_1"]["sps"]
        _say(cfg, "learner and the whole loop ...")
        out["learner"], out["loop"] = bench_learner_and_loop(cfg)
        _say(cfg, f"  learner {out['learner']['samples_per_s']:.0f} samples/s; loop {out['loop']['sps']:.1f} steps/s")
    finally:
        ray.shutdown()
    # The vector env once more, Ray gone: the loop is set against the mean of the two, which brackets
    # whatever else the machine did meanwhile (a shared 2-core machine's load moves within minutes).
    _say(cfg, "vector env again ...")
    out["vector_env_after"] = bench_vector_env(cfg, 2 * cfg.envs_per_actor)
    baseline = 0.5 * (out["vector_env"]["sps"] + out["vector_env_after"]["sps"])
    out["loop_over_vector_env"] = out["loop"]["sps"] / baseline
    out["load_average_after"] = _load()
    return out


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"] + (["json=true"] if as_json else [])
    cfg = parse_cli(LearnerBenchConfig, argv, "python -m learner.bench", __doc__.split("\n\n")[0])
    torch.set_num_threads(1)
    report = run(cfg)
    print(json.dumps(report, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
