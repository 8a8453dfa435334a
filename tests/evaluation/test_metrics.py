"""RAD's metrics on hand-made clip records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.metrics import by_kind, clip_jerks, rad_metrics


def clip(event="", steps=4, dist=None, speed=None, yaw=None, kind="k", horizon=4):
    n = steps + 1
    return dict(
        scenario=f"s{np.random.default_rng().integers(1 << 30)}",
        kind=kind,
        event=event,
        steps=steps,
        horizon=horizon,
        path_distance=dist if dist is not None else [0.0] * n,
        speed=speed if speed is not None else [10.0] * n,
        yaw=yaw if yaw is not None else [0.0] * n,
    )


def test_rates_count_first_failure_per_clip():
    recs = [
        clip("dynamic_collision", 2),
        clip("dynamic_collision", 3),
        clip("static_collision", 1),
        clip("position_deviation", 2),
        clip("heading_deviation", 2),
        clip(""),
        clip(""),
        clip(""),
    ]
    m = rad_metrics(recs)
    assert m["DCR"] == pytest.approx(2 / 8) and m["SCR"] == pytest.approx(1 / 8)
    assert m["CR"] == pytest.approx(3 / 8)
    assert m["PDR"] == pytest.approx(1 / 8) and m["HDR"] == pytest.approx(1 / 8) and m["DR"] == pytest.approx(2 / 8)
    assert m["success_rate"] == pytest.approx(3 / 8) and m["n"] == 8
    assert m["count_dynamic_collision"] == 2


def test_add_pools_steps_before_failure():
    # clean clip: distances 0, 1, 2 (all count); failed clip: 3, 5 then the failing step's 9 (excluded)
    recs = [clip("", 2, dist=[0.0, 1.0, 2.0]), clip("position_deviation", 2, dist=[3.0, 5.0, 9.0])]
    assert rad_metrics(recs)["ADD"] == pytest.approx((0 + 1 + 2 + 3 + 5) / 5)


def test_jerks_by_hand():
    dt = 0.1
    # speed 0, 1, 4, 9 (v = 100 t^2): second differences 2, 2 -> jerk 2 / 0.01 = 200
    lj, yj = clip_jerks(np.array([0.0, 1.0, 4.0, 9.0]), np.zeros(4), dt)
    assert lj.tolist() == pytest.approx([200.0, 200.0]) and yj.tolist() == [0.0]
    # yaw cubic: yaw = t^3 at t = 0, .1, .2, .3, .4 -> third difference 6 dt^3 -> jerk 6
    t = np.arange(5) * dt
    _, yj = clip_jerks(np.zeros(5), t**3, dt)
    assert yj.tolist() == pytest.approx([6.0, 6.0])
    # wrapping across +-pi is not a jump
    _, yj = clip_jerks(np.zeros(4), np.array([math.pi - 0.01, -math.pi + 0.01, -math.pi + 0.03, -math.pi + 0.05]), dt)
    assert yj.tolist() == pytest.approx([0.0], abs=1e-6)
    m = rad_metrics([clip("", 3, speed=[0.0, 1.0, 4.0, 9.0], yaw=[0.0] * 4, horizon=3)], dt)
    assert m["long_jerk"] == pytest.approx(200.0) and m["survival"] == 1.0


def test_empty_and_unknown_event():
    assert rad_metrics([])["n"] == 0 and math.isnan(rad_metrics([])["CR"])
    with pytest.raises(ValueError, match="unknown event"):
        rad_metrics([clip("fell_asleep")])


def test_by_kind_splits():
    recs = [clip("dynamic_collision", kind="cut_in"), clip("", kind="cut_in"), clip("", kind="merge")]
    per = by_kind(recs)
    assert per["cut_in"]["DCR"] == 0.5 and per["merge"]["CR"] == 0.0


def progress_clip(event, rc, gap, speed, expert_speed, steps=None, horizon=4):
    steps = len(speed) - 1 if steps is None else steps
    c = clip(event, steps, speed=speed, horizon=horizon)
    c.update(route_completion=rc, progress_lag=[0.0] * len(rc), expert_gap=gap, expert_speed=expert_speed)
    return c


def test_route_completion_driving_score_ade_and_speed_ratio_by_hand():
    from evaluation.metrics import clip_values

    # a clean clip: RC 0.9 at the end, penalty 1 -> DS 0.9; ADE = mean(0, 1, 2, 3, 4) = 2; speeds 5 vs 10 -> 0.5
    ok = progress_clip("", [0.0, 0.2, 0.5, 0.7, 0.9], [0, 1, 2, 3, 4], [5.0] * 5, [10.0] * 5)
    # a dynamic collision at step 2: RC frozen at 0.4, DS 0.4 x 0.60; ADE over the states before it: mean(1, 3) = 2
    hit = progress_clip("dynamic_collision", [0.0, 0.1, 0.4], [1, 3, 50], [8.0, 8.0, 0.0], [8.0, 8.0, 8.0])
    # stopped: progress deviation at step 3, RC 0.05, DS 0.05 x 0.70; speed ratio 0 / (10 + 10 + 10) = 0
    stopped = progress_clip("progress_deviation", [0.0, 0.05, 0.05, 0.05], [0, 1, 2, 3], [0.0] * 4, [10.0] * 4)
    v = clip_values(ok)
    assert (v["RC"], v["DS"], v["ADE"], v["speed_ratio"], v["success"]) == pytest.approx((0.9, 0.9, 2.0, 0.5, 1.0))
    v = clip_values(hit)
    assert (v["RC"], v["DS"], v["ADE"], v["speed_ratio"], v["collision"]) == pytest.approx((0.4, 0.24, 2.0, 1.0, 1.0))
    v = clip_values(stopped)
    assert (v["RC"], v["DS"], v["speed_ratio"], v["progress_failure"]) == pytest.approx((0.05, 0.035, 0.0, 1.0))
    m = rad_metrics([ok, hit, stopped])
    assert m["RC"] == pytest.approx((0.9 + 0.4 + 0.05) / 3)
    assert m["DS"] == pytest.approx((0.9 + 0.24 + 0.035) / 3)
    assert m["PGR"] == pytest.approx(1 / 3) and m["CR"] == pytest.approx(1 / 3) and m["DR"] == 0.0
    assert m["success_rate"] == pytest.approx(1 / 3)
    assert m["survival"] == pytest.approx((4 / 4 + 2 / 4 + 3 / 4) / 3)
    # every rate has its Wilson interval: 1 of 3 -> (0.0615, 0.7923)
    assert m["CR_ci"] == pytest.approx([0.0615, 0.7923], abs=1e-4)
    lo, hi = m["RC_ci"]
    assert lo <= m["RC"] <= hi


def test_a_clip_with_no_expert_motion_has_no_speed_ratio():
    from evaluation.metrics import clip_values

    still = progress_clip("", [1.0] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3)
    assert math.isnan(clip_values(still)["speed_ratio"]) and clip_values(still)["RC"] == 1.0


def test_unknown_event_is_refused_naming_the_clip():
    from evaluation.metrics import clip_values

    with pytest.raises(ValueError, match="unknown event 'teleport'"):
        clip_values(dict(scenario="x", event="teleport"))
