"""``python -m evaluation.progress``: the margins behind ``progress_threshold`` (scenarios/README.md, "Progress").

Drives every clip of a suite four ways with cameras off -- the logged expert (its IL labels), the
``reactive`` baseline (the reactive expert in closed loop from the states it reaches), a stopped car
(longitudinal bin 0) and a crawling one (``crawl`` m/s) -- with the progress event off, so that each
drive runs the whole clip, and prints JSON: per driver the largest ``progress_lag`` on each clip and
how many clips it would fail at the given threshold (and when: the first step past it), with the
expert's distance over the clip. RAD's four events are reported too (they stay on).

    python -m evaluation.progress --suite val [threshold=10 crawl=1.0]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs import DrivingEnv
from scenarios.reactive import ReactiveScene
from sim.configs import field, parse_cli


@dataclass(frozen=True)
class ProgressConfig:
    """What to measure (``python -m evaluation.progress --help``)."""

    suite: str = field("val", help="scenarios: a built-in suite spec (val, test, train:256), a folder or a file")
    threshold: float = field(10.0, help="progress_threshold to count failures at (m)")
    crawl: float = field(1.0, help="the crawling car's speed (m/s)")


def _drive(env: DrivingEnv, sid: str, policy) -> dict:
    """One clip with policy(info) -> action: lags per step, RAD's event, the expert's distance."""
    _, info = env.reset(options={"scenario": sid})
    lags = [info["progress_lag"]]
    while True:
        _, _, te, tr, info = env.step(policy(info))
        lags.append(info["progress_lag"])
        if te or tr:
            return dict(lags=np.array(lags), event=info["event"] if te else "")


def measure(suite: str, threshold: float = 10.0, crawl: float = 1.0) -> dict:
    """The figures :mod:`evaluation.progress` prints (its docstring)."""
    env = DrivingEnv({"cameras": False, "suite": suite, "progress_event": False})
    spec = env.action_spec
    crawl_bin = int(np.argmin(np.abs(spec.longitudinal - crawl * 0.5)))
    scenes: dict[str, ReactiveScene] = {}

    def reactive(info):
        sid = info["scenario"]
        if sid not in scenes:
            scenes[sid] = ReactiveScene.of(env.scenario)
        return scenes[sid].action(info["ego_state"], info["step"]).bins

    drivers = {
        "expert": lambda info: info["expert_action"],
        "reactive": reactive,
        "stop": lambda info: [spec.center, 0],
        f"crawl {crawl:g} m/s": lambda info: [spec.center, crawl_bin],
    }
    out: dict = {"suite": suite, "clips": len(env.pool), "threshold": threshold}
    distance = []
    for sid in env.pool.ids:
        env.reset(options={"scenario": sid})
        p = np.asarray(env.scenario.expert.poses)[: env.scenario.horizon + 1, :2]
        distance.append(float(np.hypot(*np.diff(p, axis=0).T).sum()))
    out["expert_distance_m"] = [round(min(distance), 1), round(max(distance), 1)]
    for name, policy in drivers.items():
        runs = [_drive(env, sid, policy) for sid in env.pool.ids]
        worst = np.array([r["lags"].max() for r in runs])
        past = [np.flatnonzero(r["lags"] > threshold) for r in runs]
        first = [int(p[0]) for p in past if len(p)]
        out[name] = {
            "largest_lag_m": [round(float(worst.min()), 3), round(float(worst.max()), 3)],
            "failed": int(sum(len(p) > 0 for p in past)),
            "first_step_past_median_max": [int(np.median(first)), max(first)] if first else None,
            "rad_events": dict(sorted(Counter(r["event"] or "none" for r in runs).items())),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    flags = [("--suite", "suite", "scenarios (suite)")]
    cfg = parse_cli(ProgressConfig, argv, "python -m evaluation.progress", __doc__.split("\n\n")[0], flags=flags)
    print(json.dumps(measure(cfg.suite, cfg.threshold, cfg.crawl), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
