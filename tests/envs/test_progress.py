"""Progress against the logged expert on the built-in ``val`` suite: a car that stops or crawls fails
(``progress_deviation``), the expert and the reactive driver (the rule behind the log, from the states it
reaches) do not, and ``route_completion`` tells them apart.

Slow: the built-in suite is generated on first use (about a minute); the rollouts themselves take
seconds (cameras off).
"""

from __future__ import annotations

import numpy as np
import pytest

from envs import DrivingEnv
from scenarios.reactive import ReactiveScene

pytestmark = pytest.mark.slow

CONFIG = {"cameras": False, "suite": "val"}
CENTRE = 30  # the lateral bin of no lateral offset


def drive(env: DrivingEnv, sid: str, policy) -> dict:
    """One clip with policy(info) -> action: the last info, and the largest lag seen."""
    _, info = env.reset(options={"scenario": sid})
    worst = info["progress_lag"]
    while True:
        _, _, te, tr, info = env.step(policy(info))
        worst = max(worst, info["progress_lag"])
        if te or tr:
            return dict(info, worst_lag=worst, terminated=te)


@pytest.fixture(scope="module")
def val_env():
    return DrivingEnv(CONFIG)


def test_stopped_and_crawling_egos_fail_the_val_suite_and_the_expert_does_not(val_env):
    env = val_env
    ids = env.pool.ids
    assert len(ids) >= 14
    threshold = env.config.progress_threshold
    expert = [drive(env, sid, lambda info: info["expert_action"]) for sid in ids]
    assert [e["event"] for e in expert] == [""] * len(ids)  # the expert fails no clip
    assert all(e["route_completion"] > 0.99 for e in expert)
    assert max(e["worst_lag"] for e in expert) < 0.1 * threshold  # far from the threshold, not just under it
    scenes = {}

    def reactive(info):
        if info["scenario"] not in scenes:
            scenes[info["scenario"]] = ReactiveScene.of(env.scenario)
        return scenes[info["scenario"]].action(info["ego_state"], info["step"]).bins

    runs = [drive(env, sid, reactive) for sid in ids]
    assert [r["event"] for r in runs] == [""] * len(ids)  # nor does the reactive driver
    assert max(r["worst_lag"] for r in runs) < 0.6 * threshold
    for long_bin in (0, 1, 2):  # stopped, and crawling at 0.25 and 0.5 m per 0.5 s
        runs = [drive(env, sid, lambda info, b=long_bin: [CENTRE, b]) for sid in ids]
        failed = [r["event"] == "progress_deviation" for r in runs]
        assert np.mean(failed) >= 0.9, (long_bin, [r["event"] for r in runs])
        assert all(r["route_completion"] < 0.5 for r in runs)


def test_rad_exact_runs_let_the_stopped_ego_pass():
    """With ``progress_event=False`` (RAD's four events) the stopped car is again a success: why the
    fifth event exists."""
    env = DrivingEnv({**CONFIG, "progress_event": False})
    runs = [drive(env, sid, lambda info: [CENTRE, 0]) for sid in env.pool.ids]
    assert [r["event"] for r in runs] == [""] * len(runs)
    assert min(r["worst_lag"] for r in runs) > env.config.progress_threshold
