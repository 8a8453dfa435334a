"""The sim entry points as a user runs them: pictures, benchmark JSON, help, bad settings."""

from __future__ import annotations

import json
import subprocess
import sys

import imageio.v2 as imageio
import numpy as np
import pytest
from PIL import Image


def run(*args, timeout=600):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


def test_render_writes_a_png_and_a_video(tmp_path):
    out = tmp_path / "r"
    p = run("-m", "sim.render", "gaussians=50000", "width=64", "height=32", "frames=3", "zoom=1", f"out={out}")
    assert p.returncode == 0, p.stderr[-2000:]
    img = np.asarray(Image.open(out / "rig.png"))
    assert img.shape == (32, 3 * 64 + 2 * 2, 3)  # three cameras side by side, 2 px gaps
    assert img.std() > 10  # a picture, not a blank
    frames = imageio.mimread(out / "drive.mp4")
    assert len(frames) == 3


def test_render_refuses_bad_settings():
    p = run("-m", "sim.render", "backend=vulkan")
    assert p.returncode == 2 and "backend" in p.stderr
    p = run("-m", "sim.render", "colour=red")
    assert p.returncode == 2 and "unknown config key colour" in p.stderr
    p = run("-m", "sim.render", "--help")
    assert p.returncode == 0 and "gaussians" in p.stdout


@pytest.mark.slow
def test_bench_prints_json_with_speedups():
    p = run(
        "-m", "sim.bench", "--json", "sizes=[50000]", "seconds=0.5", "reference_frames=1",
        "memory_probe=false", "backends=[cpu,reference]",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads(p.stdout)
    rows = report["results"]
    assert {(r["case"], r["backend"]) for r in rows} == {
        ("front3_128x64", "cpu"), ("front3_128x64", "reference"),
        ("single_256x144", "cpu"), ("single_256x144", "reference"),
    }  # fmt: skip
    for r in rows:
        assert r["fps"] > 0 and r["frames"] >= 1
        if r["backend"] == "reference":
            assert r["speedup_vs_reference"] == 1.0
    assert report["machine"]["cores"] >= 1


def test_console_script_lists_commands():
    from learner.cli import COMMANDS, main

    assert main(["--help"]) == 0
    assert main(["no-such-command"]) == 2
    assert set(COMMANDS) >= {"train", "generate", "evaluate", "export", "render", "bench"}
