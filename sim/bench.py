"""``python -m sim.bench --json``: renderer throughput per backend, all measured side by side in one run.

For procedural street scenes of 20k, 100k and 300k Gaussians (background plus vehicles), renders
the ``front3`` rig at 128x64 per camera and one 256x144 camera from an ego driving down the lane,
and reports frames/s (a frame is one render call: all cameras of the rig), and each backend's
speed-up over ``reference``. The backends of a case take turns (a slice of fast-backend frames,
then one reference frame, repeated), so a change in what else the machine is doing hits both sides
of a ratio alike; the load average is recorded beside the figures. Last, the resident memory of a
fresh process that renders the largest scene with the cpu backend. Prints JSON with ``--json``, a
table otherwise.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

import numba
import numpy as np
import torch

from sim.camera import PinholeCamera, make_rig
from sim.configs import field, parse_cli
from sim.frames import pose_matrix
from sim.procedural import demo_scene
from sim.raster_cpu import set_num_threads
from sim.rendering import gsplat_available, render
from sim.scene import Scene


@dataclass(frozen=True)
class BenchConfig:
    sizes: tuple[int, ...] = field((20_000, 100_000, 300_000), help="scene sizes (Gaussians)")
    backends: tuple[str, ...] = field((), help="backends to measure (default: cpu, reference, and gsplat with CUDA)")
    seconds: float = field(3.0, help="time spent measuring each fast-backend case")
    reference_frames: int = field(2, help="frames rendered with the (slow) reference backend per case")
    threads: int = field(0, help="renderer threads (0: all cores)")
    kind: str = field("straight", help="procedural layout")
    seed: int = field(0, help="scene seed")
    memory_probe: bool = field(True, help="measure the resident memory of rendering the largest scene")
    json: bool = field(False, help="print JSON only")


CASES = {
    "front3_128x64": lambda: make_rig("front3", 128, 64),
    "single_256x144": lambda: None,
}


def _cameras(case: str):
    if case == "front3_128x64":
        rig = make_rig("front3", 128, 64)
        return rig.Ks(), lambda pose: rig.viewmats(pose), 128, 64, len(rig)
    cam = PinholeCamera.mounted("front", 256, 144, 70.0, 0.0, 2.0, (1.6, 0.0, 1.55))
    K = torch.as_tensor(cam.K, dtype=torch.float32)[None]
    inv = np.linalg.inv(cam.ego_T_cam)

    def vm(pose):
        return torch.as_tensor(inv @ np.linalg.inv(pose), dtype=torch.float32)[None]

    return K, vm, 256, 144, 1


def _poses(n: int) -> list[np.ndarray]:
    # the ego drives down its lane at 10 m/s (0.1 s a frame), weaving slightly
    return [pose_matrix(1.0 * i % 60.0, -1.75 + 0.3 * np.sin(0.2 * i), 0.0, 0.03 * np.sin(0.1 * i)) for i in range(n)]


def bench_scene(size: int, kind: str, seed: int):
    """The procedural demo street with a ``size``-Gaussian background (plus its vehicles). Below about
    50k the street's fixed furniture overshoots the target, so the background is thinned to ``size`` by
    a seeded random subset: a sparser street, but the count the case names."""
    scene = demo_scene(seed=seed, target_gaussians=size, kind=kind)
    if len(scene.background) > 1.1 * size:
        keep = np.sort(np.random.default_rng(seed).choice(len(scene.background), size, replace=False))
        scene = Scene(scene.background.subset(keep), scene.assets, scene.actors)
    return scene


def measure(scene_at, case: str, backend: str, seconds: float, max_frames: int | None) -> dict:
    """One backend alone: frames/s over ``seconds`` (or ``max_frames`` frames), after a warm-up frame."""
    return measure_side_by_side(scene_at, case, [backend], seconds, max_frames or 1, rounds=1)[backend]


def measure_side_by_side(scene_at, case: str, backends, seconds: float, reference_frames: int, rounds: int = 0):
    """Backends taking turns on the same frames: in each of ``rounds`` rounds (default: one per
    reference frame), every fast backend renders for ``seconds / rounds`` and ``reference`` one frame.
    Returns {backend: figures}."""
    K, vm, w, h, ncam = _cameras(case)
    poses = _poses(10_000)
    rounds = rounds or max(1, reference_frames)
    for b in backends:  # warm-up (JIT, caches)
        render(scene_at(0), vm(poses[0]), K, w, h, backend=b, far_plane=250.0)
        if b == "gsplat":
            torch.cuda.synchronize()
    frames = {b: 0 for b in backends}
    spent = {b: 0.0 for b in backends}
    i = 0
    for _ in range(rounds):
        for b in backends:
            budget = None if b == "reference" else seconds / rounds
            t0 = time.perf_counter()
            while True:
                render(scene_at(i), vm(poses[i % len(poses)]), K, w, h, backend=b, far_plane=250.0)
                if b == "gsplat":
                    torch.cuda.synchronize()
                i += 1
                frames[b] += 1
                elapsed = time.perf_counter() - t0
                if budget is None or elapsed >= budget:
                    break
            spent[b] += elapsed
    out = {}
    for b in backends:
        fps = frames[b] / spent[b]
        out[b] = dict(case=case, backend=b, frames=frames[b], seconds=round(spent[b], 4), fps=fps, cameras=ncam)
    return out


def memory_probe(size: int, kind: str, seed: int, threads: int) -> dict:
    """Peak resident memory of a fresh process that builds the scene and renders it with the cpu backend."""
    code = (
        "import resource, sys, json; from sim.bench import _probe_child; "
        f"print(json.dumps(_probe_child({size}, {kind!r}, {seed}, {threads})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _probe_child(size: int, kind: str, seed: int, threads: int) -> dict:
    if threads:
        set_num_threads(threads)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scene = bench_scene(size, kind, seed)
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = measure(lambda i: scene.compose(i % max(scene.num_steps, 1)), "front3_128x64", "cpu", 1.0, None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return dict(
        gaussians=size,
        peak_rss_mb=round(peak / 1024, 1),
        rss_after_imports_mb=round(base / 1024, 1),
        rss_after_scene_mb=round(built / 1024, 1),
        fps=r["fps"],
    )


def _load() -> list[float]:
    """1, 5 and 15 minute load averages: how busy the machine was (figures on a shared machine vary)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return dict(
        cpu=cpu,
        cores=os.cpu_count(),
        renderer_threads=numba.get_num_threads(),
        gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        torch=torch.__version__,
        numba=numba.__version__,
        python=platform.python_version(),
    )


def run(cfg: BenchConfig) -> dict:
    if cfg.threads:
        set_num_threads(cfg.threads)
    backends = list(cfg.backends) or ["cpu", "reference"] + (["gsplat"] if gsplat_available() else [])
    load_before = _load()
    results = []
    for size in cfg.sizes:
        t0 = time.perf_counter()
        scene = bench_scene(size, cfg.kind, cfg.seed)
        build_s = time.perf_counter() - t0
        n = len(scene.background)
        n_assets = sum(len(a) for a in scene.assets.values())
        steps = max(scene.num_steps, 1)

        def scene_at(i, scene=scene, steps=steps):
            return scene.compose(i % steps)

        for case in ("front3_128x64", "single_256x144"):
            row = measure_side_by_side(scene_at, case, backends, cfg.seconds, cfg.reference_frames)
            if not cfg.json:
                for b, r in row.items():
                    print(f"  {size:>7} {case:<15} {b:<9} {r['fps']:8.2f} frames/s ({r['frames']} frames)", flush=True)
            for r in row.values():
                r.update(gaussians_target=size, gaussians=n, asset_gaussians=n_assets, scene_build_s=round(build_s, 2))
                if "reference" in row:
                    r["speedup_vs_reference"] = r["fps"] / row["reference"]["fps"]
                results.append(r)
    report = dict(machine=machine(), load_average_before=load_before, load_average_after=_load(), results=results)
    if cfg.memory_probe and "cpu" in backends:
        report["memory"] = memory_probe(max(cfg.sizes), cfg.kind, cfg.seed, cfg.threads)
    return report


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"] + (["json=true"] if as_json else [])
    cfg = parse_cli(BenchConfig, argv, "python -m sim.bench", __doc__.split("\n\n")[0])
    report = run(cfg)
    if cfg.json:
        print(json.dumps(report, indent=2))
    else:
        print(json.dumps(report.get("memory", {})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
