"""``python -m envs.bench`` runs and reports what it says (a smoke run; no timing is asserted)."""

from __future__ import annotations

import pytest

from envs.bench import EnvBenchConfig, run
from sim.configs import parse_cli

FLAGS = [("--suite", "env.suite", "scenarios"), ("--json", "json", "JSON only")]  # as envs.bench.main


def test_bench_reports_every_figure(plain, lead):
    out = run([plain, lead], steps=3, vector_steps=2, num_envs=2, config={"resolution": (32, 16)})
    for key in ("single_cameras_on", "single_cameras_off", "vector2_cameras_on", "vector2_cameras_off"):
        fig = out[key]
        assert fig["env_steps_per_s"] > 0 and 0.0 <= fig["non_render_fraction"] <= 1.0
    assert out["single_cameras_on"]["render_calls"] == 3
    assert out["vector2_cameras_on"]["render_calls"] >= 2  # one per vector step (+1 when an episode ends)
    assert out["single_cameras_off"]["render_calls"] == 0 and out["vector2_cameras_off"]["render_calls"] == 0
    assert out["scenarios"] == 2 and len(out["background_gaussians"]) == 2


def test_bench_settings_come_from_the_one_config_loader():
    """``python -m envs.bench`` reads its settings as every entry point does: key=value, env.* included."""
    cfg = parse_cli(EnvBenchConfig, ["--suite", "val", "--json", "steps=5", "env.render_backend=cpu"], "b", "", FLAGS)
    assert (cfg.steps, cfg.json, cfg.env.suite, cfg.env.render_backend) == (5, True, "val", "cpu")
    assert cfg.env.rig == "front3" and cfg.env.resolution == (128, 64)  # the bench's own env defaults
    with pytest.raises(SystemExit):
        parse_cli(EnvBenchConfig, ["env.rezolution=[1,2]"], "b", "", FLAGS)
