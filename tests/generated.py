"""A small generated suite, one scenario per kind, for the tests that need real generated scenarios.

Generated once into ``.cache/<name>/<hash of the generator's sources>`` so reruns reuse it (a folder
of older sources is removed); the environment variable ``env_var=/path`` tests another folder instead
(e.g. a built-in suite's).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_GENERATOR = ("generate.py",)  # scenarios/ modules that do not shape a scenario (the CLI)


def generator_hash() -> str:
    h = hashlib.sha256()
    sources = [*ROOT.glob("scenarios/*.py"), *ROOT.glob("sim/procedural/*.py"), ROOT / "sim" / "ply.py"]
    for p in sorted([*sources, ROOT / "sim" / "geometry.py"]):
        if p.is_file() and p.name not in NOT_GENERATOR:
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def generated_suite(name: str, suite: str, env_var: str) -> Path:
    """The folder of the suite ``suite`` (one scenario per kind, 4000-Gaussian backgrounds) cached as ``name``."""
    given = os.environ.get(env_var)
    if given:
        return Path(given)
    from scenarios.format import KINDS
    from scenarios.generation import generate_suite

    out = ROOT / ".cache" / name / generator_hash()
    if not (out / "suite.yaml").is_file():  # written last: a folder without it is incomplete
        for old in out.parent.glob("*"):  # suites of older generator sources
            shutil.rmtree(old, ignore_errors=True)
        generate_suite(out, suite=suite, count=len(KINDS), seed=0, gaussians=4000, progress=False)
    return out
