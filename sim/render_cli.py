"""``python -m sim.render``: a PNG of a rig view and an MP4 along a path, from a digital twin.

    python -m sim.render                                  # the procedural demo street, front3 rig
    python -m sim.render scene=/data/clip.ply pose=[5,0,0,0.1] rig=surround6 width=320 height=180
    python -m sim.render kind=intersection gaussians=300000 frames=120 out=out/intersection

Writes ``<out>/rig.png`` (cameras left to right) and, when frames > 0, ``<out>/drive.mp4``: the ego
driving along +x of its starting pose (its heading) at ``speed`` m/s, 10 frames a second.

The program lives here; ``sim/render.py`` only runs it, because the name ``sim.render`` is the render
function (``import sim; sim.render(cloud, viewmats, Ks, W, H)``, see ``sim.rendering``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.camera import RIGS, make_rig
from sim.configs import field, parse_cli
from sim.frames import pose_matrix
from sim.ply import load_ply
from sim.procedural import demo_scene
from sim.rendering import BACKENDS, render
from sim.scene import Scene
from sim.viz import Mp4Writer, tile_cameras, upscale, write_png


@dataclass(frozen=True)
class RenderConfig:
    scene: str = field("demo", help="'demo' for a procedural street, or a path to a 3DGS PLY (background)")
    kind: str = field("straight", help="demo street layout: straight, curve, intersection, merge")
    gaussians: int = field(100_000, help="demo scene size (Gaussians in the background)")
    seed: int = field(0, help="demo scene seed")
    rig: str = field("front3", help=f"camera rig: {', '.join(RIGS)}")
    width: int = field(256, help="pixels per camera, horizontally")
    height: int = field(128, help="pixels per camera, vertically")
    backend: str = field("auto", help=f"renderer: {', '.join(BACKENDS)}")
    pose: tuple[float, float, float, float] = field(
        (0.0, -1.75, 0.0, 0.0), help="ego pose x, y, z, yaw (m, rad) for the picture and the start of the video"
    )
    frames: int = field(80, help="video length in frames at 10 Hz (0: no video)")
    speed: float = field(8.0, help="ego speed along its heading in the video, m/s")
    far_plane: float = field(250.0, help="render distance, m")
    zoom: int = field(2, help="nearest-neighbour enlargement of the written pictures")
    out: str = field("out/render", help="output folder")

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.frames < 0 or self.width <= 0 or self.height <= 0 or self.zoom < 1:
            raise ValueError("frames >= 0, width > 0, height > 0 and zoom >= 1 are required")


def load_scene(cfg: RenderConfig):
    """A Scene for the config: the procedural demo, or a PLY as a static background."""
    if cfg.scene == "demo":
        return demo_scene(seed=cfg.seed, target_gaussians=cfg.gaussians, kind=cfg.kind)
    return Scene(load_ply(cfg.scene))


def main(argv=None) -> int:
    cfg = parse_cli(RenderConfig, argv, "python -m sim.render", __doc__.split("\n\n")[0])
    out = Path(cfg.out)
    t0 = time.perf_counter()
    scene = load_scene(cfg)
    n = len(scene.background) + sum(len(a) for a in scene.assets.values())
    print(f"[sim.render] scene: {n:,} Gaussians ({time.perf_counter() - t0:.1f} s to build/load)", flush=True)
    rig = make_rig(cfg.rig, cfg.width, cfg.height)
    Ks = rig.Ks()
    x, y, z, yaw = cfg.pose

    def frame(step: int) -> np.ndarray:
        d = cfg.speed * 0.1 * step
        pose = pose_matrix(x + d * np.cos(yaw), y + d * np.sin(yaw), z, yaw)
        comp = scene.compose(min(step, max(scene.num_steps - 1, 0)))
        img = render(comp, rig.viewmats(pose), Ks, cfg.width, cfg.height, backend=cfg.backend, far_plane=cfg.far_plane)
        return upscale(tile_cameras(img.rgb, rig), cfg.zoom)

    png = write_png(out / "rig.png", frame(0))
    print(f"[sim.render] wrote {png}", flush=True)
    if cfg.frames:
        t1 = time.perf_counter()
        with Mp4Writer(out / "drive.mp4", fps=10) as video:
            for k in range(cfg.frames):
                video.add(frame(k))
                if (k + 1) % 20 == 0 or k + 1 == cfg.frames:
                    rate = (k + 1) / (time.perf_counter() - t1)
                    print(f"[sim.render] frame {k + 1}/{cfg.frames} ({rate:.1f} frames/s)", flush=True)
        print(f"[sim.render] wrote {video.path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
