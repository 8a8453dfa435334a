"""Experiment tracking: the run folder, TensorBoard, MLflow when configured, and a live progress line.

The run folder (``<out>/<run>/``) holds ``config.yaml`` (the resolved config), ``run.json`` (the
provenance: git commit, seeds, versions, host, and what the driver adds with ``provenance()``: the
render backend each process actually uses, where the learners run), ``metrics.jsonl`` (every
logged row), ``events.*`` (TensorBoard) and the evaluation reports. Metric names follow CleanRL
(``charts/episodic_return``, ``losses/...``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sim.files import atomic_write

log = logging.getLogger(__name__)


def git_commit(path: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, timeout=5, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=path,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("torch", "numpy", "numba", "ray", "gymnasium", "gsplat"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            pass
    return out


class Tracker:
    """Writes metrics to the run folder, TensorBoard and (optionally) MLflow; prints progress lines."""

    def __init__(
        self, folder: Path, config: Mapping[str, Any], seed: int, tensorboard: bool = True, mlflow: bool = False
    ):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "config.yaml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
        repo = Path(__file__).resolve().parent.parent
        self.info = dict(
            git_commit=git_commit(repo),
            seed=seed,
            versions=versions(),
            host=socket.gethostname(),
            argv=sys.argv,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        (self.folder / "run.json").write_text(json.dumps(self.info, indent=2))
        self._jsonl = open(self.folder / "metrics.jsonl", "a", buffering=1)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.folder))
            except Exception as e:  # tensorboard missing: keep going with the other sinks
                log.warning("TensorBoard logging off: %s", e)
        self.mlflow = None
        if mlflow or os.environ.get("MLFLOW_TRACKING_URI"):
            try:
                import mlflow as mlf

                mlf.set_experiment("splatdrive")
                mlf.start_run(run_name=self.folder.name)
                mlf.log_params({k: str(v)[:250] for k, v in _flat(config).items()})
                self.mlflow = mlf
            except Exception as e:
                log.warning("MLflow logging off: %s", e)
        self.t0 = time.perf_counter()

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        row = {"step": int(step), "time": round(time.perf_counter() - self.t0, 3)}
        for k, v in metrics.items():
            if isinstance(v, int | float) and math.isfinite(float(v)):
                row[k] = float(v)
        self._jsonl.write(json.dumps(row) + "\n")
        if self.tb is not None:
            for k, v in row.items():
                if k not in ("step", "time"):
                    self.tb.add_scalar(k, v, step)
        if self.mlflow is not None:
            try:
                self.mlflow.log_metrics({k.replace("/", "_"): v for k, v in row.items() if k != "step"}, step=step)
            except Exception as e:
                log.warning("MLflow: %s", e)

    def provenance(self, key: str, value: Any) -> None:
        """Add ``key`` to the run's provenance: ``run.json`` (rewritten whole), TensorBoard text
        (``provenance/<key>``) and an MLflow artifact."""
        self.info[key] = value
        text = json.dumps(value, indent=2, default=str)
        atomic_write(self.folder / "run.json", json.dumps(self.info, indent=2, default=str))  # never half-written
        if self.tb is not None:
            self.tb.add_text(f"provenance/{key}", "\n".join("    " + line for line in text.splitlines()), 0)
        if self.mlflow is not None:
            try:
                self.mlflow.log_dict(value, f"provenance/{key}.json")
            except Exception as e:
                log.warning("MLflow: %s", e)

    def progress(self, text: str) -> None:
        elapsed = time.perf_counter() - self.t0
        print(f"[train {elapsed:7.1f}s] {text}", flush=True)

    def close(self) -> None:
        self._jsonl.close()
        if self.tb is not None:
            self.tb.flush()
            self.tb.close()
        if self.mlflow is not None:
            try:
                self.mlflow.end_run()
            except Exception:
                pass


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out
