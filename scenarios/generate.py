"""Generate digital-twin scenarios: ``python -m scenarios.generate --suite NAME --count N --seed S --out DIR``.

Writes ``DIR/<id>.json``, ``DIR/backgrounds/<place id>.ply``, ``DIR/assets/<name>.ply`` and ``DIR/suite.yaml``
(``scenarios.generation`` does the work; this module is only its command line, so that running it
with ``-m`` never finds it already imported by the ``scenarios`` package).

Places and traffic: ``--variants V`` draws V traffic variants on each place (its roads, obstacles and
background), so COUNT scenarios need ceil(COUNT / V) backgrounds. Seeds: place j of a run gets seed
``base(suite) + S + j`` and kind ``kinds[j % K]``; suites draw from disjoint ranges of 1,000,000 seeds
(train from 0, val from 1,000,000, test from 2,000,000; any other name from a range picked by a hash of
the name), so the same (suite, seed, variant) always gives the same scenario, and no two suites share a
place.

Options may also be given as ``key=value`` settings (``count=8 gaussians=20000``) or in a YAML file
(``--config FILE``), read by the one config loader of every entry point (``sim.configs``).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scenarios.format import DEFAULT_HORIZON, KINDS
from scenarios.generation import DEFAULT_GAUSSIANS, SEEDS_PER_SUITE, WORKER_COMMAND, generate_suite, serve_jobs
from sim.configs import field, parse_cli


@dataclass(frozen=True)
class GenerateConfig:
    """What to generate (``python -m scenarios.generate --help``)."""

    out: str = field(help="output folder (scenario JSONs, backgrounds/, assets/, suite.yaml)")
    suite: str = field("train", help="suite name: train, val, test (disjoint seed ranges) or any name")
    count: int = field(len(KINDS), help="number of scenarios (default: one per kind)")
    seed: int = field(0, help="first place seed within the suite's range")
    variants: int = field(1, help="traffic variants per place (background)")
    kinds: tuple[str, ...] = field(KINDS, help="kinds, used round-robin (comma-separated: --kinds cut_in,merge)")
    gaussians: int = field(DEFAULT_GAUSSIANS, help="Gaussians per background (~)")
    horizon: int = field(DEFAULT_HORIZON, help="steps of dt = 0.1 s per scenario")
    workers: int = field(0, help="processes generating in parallel (0: one per CPU, <= 4)")
    quiet: bool = field(False, help="no progress bar (-q)")

    def __post_init__(self):
        if not self.out:
            raise ValueError("out: expected the output folder (--out DIR), got ''")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds: unknown kind(s) {', '.join(bad) or '(none given)'}; kinds are {', '.join(KINDS)}")
        for name, lo in (
            ("count", 1), ("seed", 0), ("variants", 1), ("gaussians", 1000), ("horizon", 10), ("workers", 0)
        ):  # fmt: skip
            if getattr(self, name) < lo:
                raise ValueError(f"{name}: expected >= {lo}, got {getattr(self, name)}")
        places = math.ceil(self.count / self.variants)
        if self.seed + places > SEEDS_PER_SUITE:
            raise ValueError(
                f"seed + places: expected <= {SEEDS_PER_SUITE} (a suite's seed range), got {self.seed + places}"
            )


FLAGS = [
    ("--out", "out", "output folder (out)"),
    ("--suite", "suite", "suite name (suite)"),
    ("--count", "count", "number of scenarios (count)"),
    ("--seed", "seed", "first place seed within the suite's range (seed)"),
    ("--variants", "variants", "traffic variants per place (variants)"),
    ("--kinds", "kinds", "comma-separated kinds, used round-robin (kinds)"),
    ("--gaussians", "gaussians", "Gaussians per background (gaussians)"),
    ("--horizon", "horizon", "steps per scenario (horizon)"),
    ("--workers", "workers", "parallel processes (workers)"),
    (("-q", "--quiet"), "quiet", "no progress bar"),
]


def parse_args(argv: Sequence[str] | None = None) -> GenerateConfig:
    """``--out DIR [--suite S] [--count N] ... key=value...`` -> GenerateConfig (exit 2 naming the key on errors)."""
    head, rest = __doc__.split("\n\n", 1)
    description = head + "\n\nKinds: " + ", ".join(KINDS) + ".\n\n" + rest.strip()
    return parse_cli(GenerateConfig, argv, "python -m scenarios.generate", description, flags=FLAGS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == list(WORKER_COMMAND[2:]):  # a parallel generate_suite's worker: jobs on stdin, results on stdout
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        return serve_jobs()
    cfg = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = generate_suite(
        cfg.out, cfg.suite, cfg.count, cfg.seed, cfg.kinds, cfg.gaussians, cfg.horizon, cfg.workers,
        progress=not cfg.quiet, variants=cfg.variants,
    )  # fmt: skip
    print(json.dumps({"out": str(Path(cfg.out).resolve()), "scenarios": len(files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
