"""``python -m learner.perception --bench``: stage perception's throughput figures as JSON. The stage itself
runs in ``python -m learner.train stage=perception``."""

from __future__ import annotations

import argparse
import json
import logging

from learner.perception.bench import bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m learner.perception",
        description="Stage perception's figures. The stage itself runs in python -m learner.train stage=perception.",
    )
    parser.add_argument("--bench", action="store_true", help="print throughput figures as JSON")
    parser.add_argument("--suite", default="train", help="scenarios for the benchmark")
    parser.add_argument("--frames", type=int, default=32, help="frames rendered for the cache figure")
    parser.add_argument("--steps", type=int, default=64, help="vector-env steps for the rollout figure")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(bench(args.suite, args.frames, args.steps, args.threads), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
