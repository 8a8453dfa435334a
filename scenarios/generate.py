"""Generate digital-twin scenarios: ``python -m scenarios.generate --suite NAME --count N --seed S --out DIR``.

Writes ``DIR/<id>.json``, ``DIR/backgrounds/<id>.ply``, ``DIR/assets/<name>.ply`` and ``DIR/suite.yaml``
(``scenarios.generation`` does the work; this module is only its command line, so that running it
with ``-m`` never finds it already imported by the ``scenarios`` package).

Seeds: scenario i of a run gets seed ``base(suite) + S + i`` and kind ``kinds[i % K]``; suites draw from
disjoint ranges of 1,000,000 seeds (train from 0, val from 1,000,000, test from 2,000,000; any other name
from a range picked by a hash of the name), so the same (suite, seed) always gives the same scenario,
and no two suites share one.

Options may also be given as ``key=value`` overrides (``count=8 gaussians=20000``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from scenarios.format import DEFAULT_HORIZON, KINDS
from scenarios.generation import DEFAULT_GAUSSIANS, SEEDS_PER_SUITE, generate_suite, serve_jobs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scenarios.generate",
        description=__doc__.split("\n\n")[0],
        epilog="Kinds: " + ", ".join(KINDS) + ". Seeds: " + __doc__.split("Seeds: ")[1].split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--suite", default="train", help="suite name: train, val, test (disjoint seed ranges) or any name")
    p.add_argument("--count", type=int, default=len(KINDS), help="number of scenarios (default: one per kind)")
    p.add_argument("--seed", type=int, default=0, help="first seed within the suite's range (default 0)")
    p.add_argument("--out", help="output folder (scenario JSONs, backgrounds/, assets/, suite.yaml)")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds, used round-robin")
    p.add_argument("--gaussians", type=int, default=DEFAULT_GAUSSIANS, help="Gaussians per background (~)")
    p.add_argument("--horizon", type=int, default=DEFAULT_HORIZON, help="steps of dt = 0.1 s per scenario")
    p.add_argument("--workers", type=int, default=0, help="processes generating in parallel (0: one per CPU, <= 4)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    # a parallel generate_suite's worker: jobs as JSON on stdin, one JSON line per scenario on stdout
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the options above, e.g. count=8")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.worker:
        return args
    types = {a.dest: a.type for a in p._actions if a.dest not in ("help", "overrides", "worker")}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in types or key == "quiet":
            p.error(f"bad override {item!r}: expected key=value with key one of {', '.join(sorted(types))}")
        try:
            setattr(args, key, (types[key] or str)(value))
        except ValueError:
            p.error(f"bad override {item!r}: {key} must be {types[key].__name__}")
    if not args.out:
        p.error("--out DIR is required (where the scenarios are written)")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        p.error(f"--kinds: unknown kind(s) {', '.join(bad) or '(none given)'}; kinds are {', '.join(KINDS)}")
    args.kinds = kinds
    for name, lo in (("count", 1), ("seed", 0), ("gaussians", 1000), ("horizon", 10), ("workers", 0)):
        if getattr(args, name) < lo:
            p.error(f"--{name} must be >= {lo}, got {getattr(args, name)}")
    if args.seed + args.count > SEEDS_PER_SUITE:
        p.error(f"--seed + --count must be <= {SEEDS_PER_SUITE} (a suite's seed range)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        return serve_jobs()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = generate_suite(
        args.out, args.suite, args.count, args.seed, args.kinds, args.gaussians, args.horizon, args.workers,
        progress=not args.quiet,
    )  # fmt: skip
    print(json.dumps({"out": str(Path(args.out).resolve()), "scenarios": len(files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
