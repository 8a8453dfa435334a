"""Env throughput: ``python -m envs.bench --json`` (``--help``: every setting, ``env.*`` included).

Steps one env and a vector env (default 8) with cameras on and off, driving the expert's labels
(so episodes run their full length, with resets), and reports env-steps/s and the share of step
time spent outside rendering (``sim.render`` is timed from the inside). Scenes, numba kernels and
renderer caches are warmed first: every scenario is reset once before the clock starts.

Cameras on and off are measured in turns (one step with cameras, then ten without, repeated), so
their ratio in ``ratios`` (what the cameras cost) holds on a busy machine; ``ratios`` also has the
vector env over the single env (what one render call for every env gains). Figures are wall-clock
on whatever else the machine is doing, so the report carries the load average and, beside each
wall-clock rate, the rate from this process's CPU time.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numba
import numpy as np

from envs.config import EnvConfig
from envs.driving import DrivingEnv
from envs.suite import resolve_scenarios
from envs.vector import VectorDrivingEnv
from scenarios.scene import load_cloud
from sim import rendering
from sim.configs import field, parse_cli, to_dict


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


def single_stepper(scenarios, config: dict):
    """(step, env-steps per step) for one env driving the expert's labels, warmed (every scenario
    reset once, a few steps taken); an episode that ends resets inside the step."""
    env = DrivingEnv(config, scenarios=scenarios)
    _warm(env, env.pool)
    state = {"info": env.reset(seed=0)[1]}

    def step():
        _, _, te, tr, info = env.step(state["info"]["expert_action"])
        state["info"] = env.reset()[1] if te or tr else info

    for _ in range(3):
        step()
    return step, 1


def vector_stepper(scenarios, config: dict, num_envs: int):
    """(step, env-steps per step) for a vector env of num_envs driving the expert's labels, warmed."""
    venv = VectorDrivingEnv(scenarios, num_envs, config)
    for sid in venv.pool.ids:  # load every scene once
        venv.reset(seed=0, options={"scenario": sid})
    state = {"infos": venv.reset(seed=0)[1]}

    def step():
        state["infos"] = venv.step(state["infos"]["expert_action"])[4]

    for _ in range(3):
        step()
    return step, num_envs


def side_by_side(on, off, steps: int, off_per_on: int = 10) -> tuple[dict, dict]:
    """Figures of two steppers measured in turns: one step of ``on`` (cameras), then ``off_per_on``
    steps of ``off``, ``steps`` times; each side is timed on its own, so what else the machine does
    meanwhile weighs on both alike. Renders are counted for ``on`` (``off`` has no cameras)."""
    (step_on, n_on), (step_off, n_off) = on, off
    wall = [0.0, 0.0]
    cpu = [0.0, 0.0]
    with _timed_render() as spent:
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            step_on()
            t1, c1 = time.perf_counter(), time.process_time()
            for _ in range(off_per_on):
                step_off()
            t2, c2 = time.perf_counter(), time.process_time()
            wall[0] += t1 - t0
            cpu[0] += c1 - c0
            wall[1] += t2 - t1
            cpu[1] += c2 - c1
    fig_on = _figures(steps * n_on, wall[0], cpu[0], spent)
    fig_off = _figures(steps * off_per_on * n_off, wall[1], cpu[1], {"s": 0.0, "calls": 0})
    return fig_on, fig_off


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
    out["single_cameras_on"], out["single_cameras_off"] = side_by_side(
        single_stepper(scenarios, on), single_stepper(scenarios, off), steps
    )
    vec_on, vec_off = f"vector{num_envs}_cameras_on", f"vector{num_envs}_cameras_off"
    out[vec_on], out[vec_off] = side_by_side(
        vector_stepper(scenarios, on, num_envs), vector_stepper(scenarios, off, num_envs), vector_steps
    )
    out[vec_on] |= {"vector_steps": vector_steps, "num_envs": num_envs}
    out[vec_off] |= {"vector_steps": vector_steps * 10, "num_envs": num_envs}
    rate = {k: out[k]["env_steps_per_s"] for k in ("single_cameras_on", "single_cameras_off", vec_on, vec_off)}
    out["ratios"] = {
        # what the cameras cost: env-steps/s with them over without (measured in turns)
        "single_cameras_on_over_off": round(rate["single_cameras_on"] / rate["single_cameras_off"], 4),
        f"{vec_on}_over_off": round(rate[vec_on] / rate[vec_off], 4),
        # what batching the envs into one render call gains
        f"vector{num_envs}_over_single_cameras_on": round(rate[vec_on] / rate["single_cameras_on"], 4),
        f"vector{num_envs}_over_single_cameras_off": round(rate[vec_off] / rate["single_cameras_off"], 4),
    }
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _numba_threads() -> int:
    return int(numba.get_num_threads())


@dataclass(frozen=True)
class EnvBenchConfig:
    steps: int = field(60, help="single-env steps with cameras (x10 without)")
    vector_steps: int = field(15, help="vector steps with cameras (x10 without)")
    num_envs: int = field(8, help="environments of the vector env")
    env: EnvConfig = field(
        EnvConfig(rig="front3", resolution=(128, 64)),
        help="the env (envs.EnvConfig; env.suite: the scenarios), cameras switched off for the *_off figures",
    )
    json: bool = field(False, help="print JSON only (also --json)")

    def __post_init__(self):
        if self.steps < 1 or self.vector_steps < 1 or self.num_envs < 1:
            raise ValueError("steps, vector_steps and num_envs must be >= 1")


def main(argv=None) -> None:
    cfg = parse_cli(
        EnvBenchConfig,
        argv,
        "python -m envs.bench",
        __doc__.split("\n\n")[0],
        flags=[("--suite", "env.suite", "scenarios (env.suite)"), ("--json", "json", "print JSON only")],
    )
    out = run(None, cfg.steps, cfg.vector_steps, cfg.num_envs, to_dict(cfg.env))
    if cfg.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
