"""Env throughput: ``python -m envs.bench --json``.

Steps one env and a vector env (default 8) with cameras on and off, driving the expert's labels
(so episodes run their full length, with resets), and reports env-steps/s and the share of step
time spent outside rendering (``sim.render`` is timed from the inside). Scenes, numba kernels and
renderer caches are warmed first: every scenario is reset once before the clock starts.

Figures are wall-clock on whatever else the machine is doing, so the report carries the load
average and, beside each wall-clock rate, the rate from this process's CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import contextmanager

import numba
import numpy as np

from envs.config import EnvConfig
from envs.driving import DrivingEnv
from envs.suite import resolve_scenarios
from envs.vector import VectorDrivingEnv
from scenarios.scene import load_cloud
from sim import rendering


@contextmanager
def _timed_render():
    """Count the seconds spent inside ``sim.rendering.render`` (the envs call it through the module)."""
    real = rendering.render
    spent = {"s": 0.0, "calls": 0}

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spent["s"] += time.perf_counter() - t0
            spent["calls"] += 1

    rendering.render = timed
    try:
        yield spent
    finally:
        rendering.render = real


def _warm(env_like, pool) -> None:
    for sid in pool.ids:
        env_like.reset(seed=0, options={"scenario": sid})


def bench_single(scenarios, config: dict, steps: int) -> dict:
    env = DrivingEnv(config, scenarios=scenarios)
    _warm(env, env.pool)
    _, info = env.reset(seed=0)
    for _ in range(3):
        *_, te, tr, info = env.step(info["expert_action"])
        if te or tr:
            _, info = env.reset()
    with _timed_render() as spent:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            _, _, te, tr, info = env.step(info["expert_action"])
            if te or tr:
                _, info = env.reset()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return _figures(steps, wall, cpu, spent)


def bench_vector(scenarios, config: dict, steps: int, num_envs: int) -> dict:
    venv = VectorDrivingEnv(scenarios, num_envs, config)
    for sid in venv.pool.ids:  # load every scene once
        venv.reset(seed=0, options={"scenario": sid})
    _, infos = venv.reset(seed=0)
    for _ in range(3):
        _, _, _, _, infos = venv.step(infos["expert_action"])
    with _timed_render() as spent:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            _, _, _, _, infos = venv.step(infos["expert_action"])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return _figures(steps * num_envs, wall, cpu, spent) | {"vector_steps": steps, "num_envs": num_envs}


def _figures(env_steps: int, wall: float, cpu: float, spent: dict) -> dict:
    return {
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / wall, 1),
        "env_steps_per_cpu_s": round(env_steps / cpu, 1) if cpu > 0 else None,
        "ms_per_env_step": round(1e3 * wall / env_steps, 3),
        "render_calls": spent["calls"],
        "render_s": round(spent["s"], 3),
        "non_render_fraction": round(1.0 - spent["s"] / wall, 4),
        "non_render_ms_per_env_step": round(1e3 * (wall - spent["s"]) / env_steps, 3),
    }


def run(suite, steps: int, vector_steps: int, num_envs: int, config: dict) -> dict:
    cfg = EnvConfig.from_dict(config)
    scenarios = resolve_scenarios(suite if suite is not None else cfg.suite, cfg.skip_broken)
    sizes = []
    for sc in scenarios[:4]:
        sizes.append(len(load_cloud(sc.scene.background, "background")))
    out: dict = {
        "suite": str(suite if suite is not None else cfg.suite) if not isinstance(suite, list) else "(list)",
        "scenarios": len(scenarios),
        "background_gaussians": sizes,
        "config": {k: v for k, v in config.items()},
        "cpu_count": os.cpu_count(),
        "numba_threads": _numba_threads(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    on = dict(config)
    off = {**config, "cameras": False}
    out["single_cameras_on"] = bench_single(scenarios, on, steps)
    out["single_cameras_off"] = bench_single(scenarios, off, steps * 10)
    out[f"vector{num_envs}_cameras_on"] = bench_vector(scenarios, on, vector_steps, num_envs)
    out[f"vector{num_envs}_cameras_off"] = bench_vector(scenarios, off, vector_steps * 10, num_envs)
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _numba_threads() -> int:
    return int(numba.get_num_threads())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m envs.bench", description=__doc__.splitlines()[0])
    p.add_argument("--suite", default=None, help="built-in suite name, folder or scenario file (default: config suite)")
    p.add_argument("--steps", type=int, default=60, help="single-env steps with cameras (x10 without)")
    p.add_argument("--vector-steps", type=int, default=15, help="vector steps with cameras (x10 without)")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rig", default="front3")
    p.add_argument("--resolution", default="128x64", help="WIDTHxHEIGHT per camera")
    p.add_argument("--backend", default="auto", help="render backend: auto, cpu, gsplat, reference")
    p.add_argument("--json", action="store_true", help="print JSON only")
    args = p.parse_args(argv)
    w, h = (int(v) for v in args.resolution.lower().split("x"))
    config = {"rig": args.rig, "resolution": (w, h), "render_backend": args.backend}
    out = run(args.suite, args.steps, args.vector_steps, args.num_envs, config)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
