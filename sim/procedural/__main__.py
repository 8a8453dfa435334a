"""``python -m sim.procedural --out DIR --seed 0 --kind straight --gaussians 100000``: a procedural
street background as a standard 3DGS PLY (and, with ``--vehicles``, one PLY per vehicle kind)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.ply import save_ply
from sim.procedural.background import build_background
from sim.procedural.layout import LAYOUT_KINDS, demo_layout
from sim.procedural.vehicles import VEHICLE_KINDS, build_vehicle


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.procedural", description="Write a procedural street background as a 3DGS PLY."
    )
    ap.add_argument("--out", required=True, help="output folder (background.ply goes there)")
    ap.add_argument("--seed", type=int, default=0, help="scene seed")
    ap.add_argument("--kind", default="straight", choices=LAYOUT_KINDS, help="demo layout")
    ap.add_argument("--gaussians", type=int, default=100_000, help="target number of Gaussians")
    ap.add_argument("--length", type=float, default=200.0, help="main road length, metres")
    ap.add_argument("--vehicles", action="store_true", help="also write one PLY per vehicle kind")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cloud = build_background(demo_layout(args.kind, args.length), args.seed, args.gaussians)
    path = out / "background.ply"
    save_ply(cloud, path)
    written = {"background": str(path), "gaussians": len(cloud)}
    if args.vehicles:
        for k in VEHICLE_KINDS:
            v, size = build_vehicle(k, None, args.seed)
            p = out / f"vehicle_{k}.ply"
            save_ply(v, p)
            written[f"vehicle_{k}"] = {"path": str(p), "size": [float(x) for x in size], "gaussians": len(v)}
    print(json.dumps(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
