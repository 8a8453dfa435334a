"""``python -m envs.bench`` runs and reports what it says (a smoke run; no timing is asserted)."""

from __future__ import annotations

from envs.bench import run


def test_bench_reports_every_figure(plain, lead):
    out = run([plain, lead], steps=3, vector_steps=2, num_envs=2, config={"resolution": (32, 16)})
    for key in ("single_cameras_on", "single_cameras_off", "vector2_cameras_on", "vector2_cameras_off"):
        fig = out[key]
        assert fig["env_steps_per_s"] > 0 and 0.0 <= fig["non_render_fraction"] <= 1.0
    assert out["single_cameras_on"]["render_calls"] == 3
    assert out["vector2_cameras_on"]["render_calls"] >= 2  # one per vector step (+1 when an episode ends)
    assert out["single_cameras_off"]["render_calls"] == 0 and out["vector2_cameras_off"]["render_calls"] == 0
    assert out["scenarios"] == 2 and len(out["background_gaussians"]) == 2
