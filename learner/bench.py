"""``python -m learner.bench --json``: throughput of the training loop, all measured in one run.

- ``vector_env``: the vector env alone (random feasible actions, cameras on), envs x steps / s, in
  this process with every core;
- ``rollout_1`` / ``rollout_2``: one and two Ray rollout actors (one CPU each, policy inference
  included) sampling fragments, env-steps/s, and the scaling ``rollout_2 / rollout_1``;
- ``learner``: PPO epochs on a gathered batch, samples/s (samples x epochs / s);
- ``loop``: whole training iterations (weights out, fragments back, GAE, PPO update) with two
  actors, env-steps/s, and ``loop_over_vector_env``: how much of the env's own rate the loop keeps
  (against the mean of the vector env measured first and again last, which brackets the loop).
- ``privileged_in_process`` / ``privileged_ray``: the privileged teacher's training loop (ground truth,
  cameras off; ``privileged_*`` settings: batches of ``privileged_envs x privileged_fragment`` env-steps, the
  default PPO epochs and network), in this process (``rollout.num_actors=0``) and with two Ray actors:
  env-steps/s end to end, and the fraction of the loop spent in the PPO update (``update_fraction``).
  ``privileged=false`` skips them; ``privileged_only=true`` runs only them.
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
    frozen: bool = field(
        True,
        help="the learner and loop cases as RAD's stage 3 runs them: the camera encoder stage perception trained "
        "frozen (false: the whole encoder trains, as stage rl from scratch)",
    )
    privileged: bool = field(True, help="also measure the privileged teacher's loop (in process and on Ray)")
    privileged_only: bool = field(False, help="measure only the privileged teacher's loop")
    privileged_envs: int = field(16, help="privileged loop: envs stepped together (split over the Ray actors)")
    privileged_fragment: int = field(128, help="privileged loop: steps per fragment (a batch: envs x this)")
    privileged_iterations: int = field(5, help="privileged loop: iterations measured (after one warm-up)")
    resolution: tuple[int, int] | None = field(
        None, help="(width, height) per camera (env.resolution) in the camera cases; None: the scenarios' own"
    )
    json: bool = field(False, help="print JSON only")


def _say(cfg, msg):
    if not cfg.json:
        print(msg, flush=True)


def _env(cfg: LearnerBenchConfig) -> dict:
    """The camera cases' env settings."""
    return {"render_backend": "auto", **({"resolution": tuple(cfg.resolution)} if cfg.resolution else {})}


def bench_vector_env(cfg: LearnerBenchConfig, num_envs: int) -> dict:
    venv = VectorDrivingEnv(cfg.suite, num_envs, _env(cfg))
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
    spec = WorkerSpec(scenarios=(cfg.suite,), env_config=_env(cfg), num_envs=cfg.envs_per_actor)
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
            "stage": "perception+il+rl" if cfg.frozen else "rl",  # built only: stage rl's loop, encoder frozen or not
            "env": _env(cfg),
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


def bench_privileged(cfg: LearnerBenchConfig, num_actors: int) -> dict:
    """The privileged teacher's training loop, as ``learner.train`` runs it (stage rl, cameras off)."""
    per_actor = max(1, cfg.privileged_envs // max(num_actors, 1))
    tc = from_dict(
        TrainConfig,
        {
            "run": f"bench-privileged-{num_actors}",
            "store": "/tmp/splatdrive-bench-store",
            "tracking": {"out": "/tmp/splatdrive-bench-out", "tensorboard": False},
            "suite": cfg.suite,
            "stage": "rl",
            "env": {"observation": "privileged", "cameras": False},
            "rollout": {
                "num_actors": num_actors,
                "envs_per_actor": per_actor,
                "fragment_length": cfg.privileged_fragment,
            },
        },
    )
    tr = Trainer(tc)
    tr.build()
    try:
        learners, group = tr.learner_group, tr.rollout_group
        steps, roll, learn = 0, 0.0, 0.0
        for it in range(cfg.privileged_iterations + 1):  # the first is a warm-up (JIT, caches)
            t1 = time.perf_counter()
            group.set_weights(it, learners.weights())
            frags = group.sample(cfg.privileged_fragment)
            t2 = time.perf_counter()
            learners.update_rl(stack_time(frags))
            t3 = time.perf_counter()
            if it:
                roll, learn, steps = roll + t2 - t1, learn + t3 - t2, steps + sum(f.env_steps for f in frags)
    finally:
        tr.close()
    total = roll + learn
    return dict(
        actors=num_actors, batch=steps // max(cfg.privileged_iterations, 1), steps=steps, seconds=total,
        sps=steps / total, rollout_sps=steps / roll, update_fraction=learn / total, epochs=tc.ppo.epochs,
    )  # fmt: skip


def run_privileged(cfg: LearnerBenchConfig, out: dict) -> None:
    _say(cfg, "privileged loop in process ...")
    out["privileged_in_process"] = bench_privileged(cfg, 0)
    _say(cfg, f"  {out['privileged_in_process']['sps']:.0f} env-steps/s")
    import ray  # the optional extra splatdrive[ray]: imported where it is used, as everywhere

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        _say(cfg, "privileged loop with 2 Ray actors ...")
        out["privileged_ray"] = bench_privileged(cfg, 2)
        _say(cfg, f"  {out['privileged_ray']['sps']:.0f} env-steps/s")
    finally:
        ray.shutdown()


def run(cfg: LearnerBenchConfig) -> dict:
    import ray  # the optional extra splatdrive[ray]: imported where it is used, as everywhere

    out: dict = dict(machine=machine(), config=dict(cfg.__dict__), load_average_before=_load())
    if cfg.privileged_only:
        run_privileged(cfg, out)
        out["load_average_after"] = _load()
        return out
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
    if cfg.privileged:
        run_privileged(cfg, out)
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
