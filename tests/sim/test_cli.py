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


SIM_RENDER_AFTER_ITS_MODULES = """
import sim.render, sim.render_cli  # the entry module and the program first, in a fresh process
import json
import numpy as np
import sim
from sim.gaussians import GaussianCloud
from sim.render import main

assert main is sim.render_cli.main and sim.render is sim.rendering.render
red = GaussianCloud.from_rgb([[0.0, 0.0, 5.0]], [[1.0, 0.0, 0.0, 0.0]], [[0.5, 0.5, 0.5]], [0.9], [[1.0, 0.0, 0.0]])
K = np.array([[[8.0, 0.0, 4.0], [0.0, 8.0, 3.0], [0.0, 0.0, 1.0]]])
out = sim.render(red, np.eye(4)[None], K, 8, 6, backend="cpu")  # a camera at the origin looking along +z
print(json.dumps({"shape": list(out.rgb.shape), "middle": out.rgb[0, 3, 4].tolist()}))
"""


def test_sim_render_is_the_render_function_after_importing_the_cli_modules():
    p = run("-c", SIM_RENDER_AFTER_ITS_MODULES)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    r, g, b = out["middle"]
    assert out["shape"] == [1, 6, 8, 3]
    assert r > 0.5 and g < 0.05 and b < 0.05  # the red Gaussian, straight ahead, covers the middle pixel


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
