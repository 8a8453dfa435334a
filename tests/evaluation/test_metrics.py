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
    assert m["long_jerk"] == pytest.approx(200.0) and m["progress"] == 1.0


def test_empty_and_unknown_event():
    assert rad_metrics([])["n"] == 0 and math.isnan(rad_metrics([])["CR"])
    with pytest.raises(ValueError, match="unknown event"):
        rad_metrics([clip("fell_asleep")])


def test_by_kind_splits():
    recs = [clip("dynamic_collision", kind="cut_in"), clip("", kind="cut_in"), clip("", kind="merge")]
    per = by_kind(recs)
    assert per["cut_in"]["DCR"] == 0.5 and per["merge"]["CR"] == 0.0
