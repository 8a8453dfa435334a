"""Experiment tracking: the run folder, TensorBoard, MLflow when configured, a live progress line,
and ``python -m learner.tracking pull``.

The run folder holds ``config.yaml`` (the resolved config), ``run.json`` (the provenance: git commit,
seeds, versions, host, and what the driver adds with ``provenance()``: the render backend each process
actually uses, where the learners run), ``metrics.jsonl`` (every logged row), ``events.*``
(TensorBoard), ``summary.json`` and the driver's reports (``perception.md``). Metric names follow
CleanRL (``charts/episodic_return``, ``losses/...``).

Where it lives: with the run in the checkpoint store, ``<store>/<run>/tracking/`` (``tracking.out``
left empty, the default), so that what a Ray job writes outlives the job. The tracker then writes into
a local working copy (:func:`store.folders.scratch_folder`) and a background thread uploads the files
that changed every ``sync_s`` seconds through the store's own back ends (whole files: S3 has no
append), TensorBoard's writer flushed first; :meth:`Tracker.close` uploads the rest, so a crash loses at
most the last interval. A resumed run first copies its tracking files back from the store and appends.
With ``tracking.out`` given, the run folder is ``<out>/<run>/``, written in place as before.

    python -m learner.tracking pull <store>/<run> DIR    # a run's tracking files into DIR
    tensorboard --logdir DIR

``pull`` also copies a report folder written to a store URI (``python -m evaluation --out
s3://bucket/runs/evaluations/x``, ``python -m learner.study out=s3://...``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from policy.sources import redact_tree, redact_uri
from rollout.job import check_job_path
from sim.files import atomic_write
from store import FolderMirror, RetryPolicy, StoreFolder, join_uri, scratch_folder, split_uri

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


def run_folder(out: str, store_uri: str, run: str) -> tuple[Path, StoreFolder | None]:
    """(the run's local folder, the store folder it is uploaded to or None) for ``tracking.out`` =
    ``out``: '' keeps the tracking files with the run in the store (``<store>/<run>/tracking/``, a local
    working copy in :func:`store.folders.scratch_folder`), else ``<out>/<run>/`` alone. Inside a Ray job,
    a relative store or ``out`` (which would land in the job's temporary package) is refused
    (ConfigError, :func:`rollout.job.check_job_path`)."""
    check_job_path(
        store_uri,
        "store.uri",
        "Give --store an absolute path on a file system the cluster and the submitting machine share, or "
        "s3://bucket/prefix.",
    )
    if out:
        check_job_path(
            out, "tracking.out", "Leave tracking.out empty (the tracking files then go with the run in the store)."
        )
        return Path(out) / run, None
    store = StoreFolder.of_run(store_uri, run)
    return scratch_folder(store.uri, run), store


SYNC_S = 30.0  # seconds between uploads of a store-backed run folder (tracking.sync_s)
# An upload between two intervals gives up after this (the next interval tries again); close() uses the
# store's full policy.
INTERVAL_RETRY = RetryPolicy(max_attempts=3, total_timeout=10.0)


class Tracker:
    """Writes metrics to the run folder, TensorBoard and (optionally) MLflow; prints progress lines.

    ``folder``: the local run folder. ``store``: the run's tracking folder in the checkpoint store
    (:meth:`store.folders.StoreFolder.of_run`); the local folder is then a working copy (a scratch folder
    when ``folder`` is None), emptied, refilled from the store (a resumed run appends) and uploaded every
    ``sync_s`` seconds and at :meth:`close`. ``name``: the run's name (MLflow's run name).
    """

    def __init__(
        self,
        folder: Path | None,
        config: Mapping[str, Any],
        seed: int,
        tensorboard: bool = True,
        mlflow: bool = False,
        *,
        store: StoreFolder | None = None,
        sync_s: float = SYNC_S,
        name: str | None = None,
    ):
        if folder is None and store is None:
            raise ValueError("Tracker: give a local folder, a store folder, or both")
        self.store = store
        self.name = name or (Path(folder).name if folder is not None else str(config.get("run") or "run"))
        self.folder = Path(folder) if folder is not None else scratch_folder(store.uri, self.name)  # type: ignore[union-attr]
        self._lock = threading.Lock()  # one writer at a time: the driver's logging, the uploads' reading
        self.mirror: FolderMirror | None = None
        if store is not None:
            shutil.rmtree(self.folder, ignore_errors=True)  # an older copy: the store holds the run's files
            self.folder.mkdir(parents=True, exist_ok=True)
            self.mirror = FolderMirror(self.folder, store)
            pulled = self.mirror.pull()
            if pulled:
                log.info("tracking: %d file(s) of the run's earlier sessions copied from %s", len(pulled), store.uri)
        self.folder.mkdir(parents=True, exist_ok=True)
        # credentials in a store URI's query stay out of the files (they travel, they get shared)
        (self.folder / "config.yaml").write_text(yaml.safe_dump(redact_tree(dict(config)), sort_keys=False))
        repo = Path(__file__).resolve().parent.parent
        self.info = dict(
            git_commit=git_commit(repo),
            seed=seed,
            versions=versions(),
            host=socket.gethostname(),
            argv=redact_tree(list(sys.argv)),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        atomic_write(self.folder / "run.json", json.dumps(self.info, indent=2))
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
                mlf.start_run(run_name=self.name)
                mlf.log_params({k: str(v)[:250] for k, v in _flat(redact_tree(dict(config))).items()})
                self.mlflow = mlf
            except Exception as e:
                log.warning("MLflow logging off: %s", e)
        self.t0 = time.perf_counter()
        self.sync_failures = 0  # uploads between intervals that gave up (retried at the next one)
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None
        if self.mirror is not None:
            self.sync(INTERVAL_RETRY)  # config.yaml and run.json are in the store from the start
            self._syncer = threading.Thread(
                target=self._sync_loop, args=(float(sync_s),), name="tracking-sync", daemon=True
            )
            self._syncer.start()

    @property
    def where(self) -> str:
        """Where the run's tracking files are kept: the store folder's URI, else the local folder."""
        return self.store.uri if self.store is not None else str(self.folder)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        row = {"step": int(step), "time": round(time.perf_counter() - self.t0, 3)}
        for k, v in metrics.items():
            if isinstance(v, int | float) and math.isfinite(float(v)):
                row[k] = float(v)
        with self._lock:
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
        with self._lock:
            atomic_write(self.folder / "run.json", json.dumps(self.info, indent=2, default=str))  # never half-written
            if self.tb is not None:
                self.tb.add_text(f"provenance/{key}", "\n".join("    " + line for line in text.splitlines()), 0)
        if self.mlflow is not None:
            try:
                self.mlflow.log_dict(value, f"provenance/{key}.json")
            except Exception as e:
                log.warning("MLflow: %s", e)

    def write(self, name: str, text: str) -> Path:
        """Write a report file (``summary.json``, ``perception.md``) into the run folder, whole; it goes
        to the store with the next upload. Returns its local path."""
        with self._lock:
            return atomic_write(self.folder / name, text)

    def progress(self, text: str) -> None:
        elapsed = time.perf_counter() - self.t0
        print(f"[train {elapsed:7.1f}s] {text}", flush=True)

    def sync(self, policy: RetryPolicy | None = None) -> list[str]:
        """Upload what changed in the run folder to the store (TensorBoard's writer flushed first); the
        paths uploaded. Nothing to do without a store folder."""
        if self.mirror is None:
            return []
        with self._lock:
            self._jsonl.flush()
            if self.tb is not None:
                self.tb.flush()
        return self.mirror.push(self._lock, policy)

    def _sync_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.sync(INTERVAL_RETRY)
            except Exception as e:  # the store is down or refuses: the next interval (or close) tries again
                self.sync_failures += 1
                if self.sync_failures & (self.sync_failures - 1) == 0:  # 1, 2, 4, 8...: a long outage logs a few
                    log.warning("tracking: upload to %s failed (%d so far): %s", self.where, self.sync_failures, e)

    def close(self) -> None:
        """Close every sink; a store-backed run folder is uploaded whole (the store's full retries)."""
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join()
        with self._lock:
            self._jsonl.close()
            if self.tb is not None:
                self.tb.flush()
                self.tb.close()
        if self.mlflow is not None:
            try:
                self.mlflow.end_run()
            except Exception:
                pass
        if self.mirror is not None:
            try:
                self.mirror.push(self._lock)
            except Exception as e:
                raise RuntimeError(
                    f"tracking: the run's files could not be uploaded to {self.where} ({e}); they are kept in "
                    f"{self.folder}"
                ) from e


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def closing_lines(
    tracker: Tracker, store_uri: str, run: str, checkpoints: str, compare: tuple[str, str] | None = None
) -> list[str]:
    """The training driver's last lines: where the checkpoints (``checkpoints``) and tracking files are,
    and commands that work from the machine that submitted the job: for a run kept in the store, the
    pull command and TensorBoard on the pulled folder; with ``compare`` = (IL snapshot run, suite), the
    evaluation of the IL policy against the final one by store URIs. Credentials in a store URI's
    query are shown as ``***``."""
    store = redact_uri(store_uri)
    if tracker.store is not None:
        local = f"tb/{run}"  # (tb/ and eval/ are git-ignored: a later --working-dir . does not upload them)
        lines = [
            f"done. checkpoints: {checkpoints}; tracking files (metrics.jsonl, run.json, summary.json, TensorBoard "
            f"events): {tracker.where}",
            f"on your machine: {pull_command(join_uri(store, run), local)} && tensorboard --logdir {local}",
        ]
        report = f"eval/{run}-compare"
    else:
        local = str(tracker.folder)
        lines = [
            f"done. TensorBoard: tensorboard --logdir {shlex.quote(local)}; metrics: "
            f"{tracker.folder / 'metrics.jsonl'}; checkpoints: {checkpoints}"
        ]
        report = f"{local}/compare"
    if compare is not None:
        il_run, suite = compare
        a, b = (shlex.quote(join_uri(store, r)) for r in (il_run, run))
        lines.append(
            f"compare IL and RL+IL: python -m evaluation --compare {a} {b} --suite {suite} --out {shlex.quote(report)}"
        )
    return lines


# -- python -m learner.tracking pull ---------------------------------------------------------------


def pull_source(src: str) -> StoreFolder:
    """What ``pull`` copies from ``src``: the tracking folder of ``<store>/<run>`` (a path,
    ``file:///abs/path/<run>`` or ``s3://bucket/prefix/<run>?endpoint_override=...``), else ``src`` itself
    when it is a folder of plain files (an evaluation's or a study's ``--out`` given as a store URI).
    FileNotFoundError when neither holds any file."""
    try:
        store, run = split_uri(src)
        tracking: StoreFolder | None = StoreFolder.of_run(store, run)
    except ValueError:  # not <store>/<run>: a plain folder at most
        tracking = None
    if tracking is not None and tracking.list():
        return tracking
    plain = StoreFolder(src)
    if plain.list():
        return plain
    where = tracking.uri if tracking is not None else plain.uri
    raise FileNotFoundError(
        f"{where} holds no tracking files: is the run's name right, and did it run with tracking.out left empty "
        "(its tracking files with it in the store)?"
    )


def pull(src: str, dest: str | os.PathLike) -> dict[str, int]:
    """Copy the tracking files of ``<store>/<run>`` (or the files of a store folder, :func:`pull_source`)
    into ``dest``: {path: size}."""
    return FolderMirror(Path(dest), pull_source(src)).pull()


def pull_command(run_uri: str, dest: str) -> str:
    """The shell command that brings a run's tracking files to ``dest`` (quoted: an S3 query has ``&``)."""
    return f"python -m learner.tracking pull {shlex.quote(run_uri)} {shlex.quote(dest)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m learner.tracking",
        description="A run's tracking files (metrics.jsonl, run.json, config.yaml, summary.json, TensorBoard "
        "events, reports), kept with its checkpoints in the store.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("pull", help="copy a run's tracking files from the store into a local folder")
    pp.add_argument("run", metavar="STORE/RUN", help="<store>/<run>: a path, file:///abs/path/<run> or "
                    "s3://bucket/prefix/<run>[?endpoint_override=...]; or a report folder given as a store URI "
                    "(an evaluation's --out s3://...)")  # fmt: skip
    pp.add_argument("dest", metavar="DIR", help="the local folder to copy them into (made if missing)")
    args = p.parse_args(argv)
    try:
        source = pull_source(args.run)
        got = FolderMirror(Path(args.dest), source).pull()
    except (FileNotFoundError, ValueError) as e:
        print(f"learner.tracking: {e}", file=sys.stderr)
        return 2
    for path, size in got.items():
        print(f"{size:>12,d}  {Path(args.dest) / path}")
    print(f"copied {len(got)} file(s) from {source.uri} to {args.dest}")
    print(f"tensorboard --logdir {shlex.quote(str(args.dest))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
