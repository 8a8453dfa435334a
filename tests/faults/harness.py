"""What the fault tests share: a tiny training config (the same for a driver subprocess and for the
trainer in this process), a driver subprocess to kill, a TCP proxy that makes a loopback store slow
or unreachable, a restore-only resume, and a look at a store's objects from outside.

Every process a test starts is stopped by its PID (SIGKILL for the faults, then reaped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from learner import checkpoint as ckpt_io
from learner.config import TrainConfig
from learner.tracking import Tracker
from learner.train import Trainer
from sim.configs import parse_cli
from store import MANIFEST, CheckpointStore
from tests.s3_servers import REPO, S3Server

T = 6  # fragment length of the tiny runs
ENVS = 2  # environments per rollout worker


def tiny_args(out: Path, suite: Path, store: str | Path, run: str = "r", **over) -> list[str]:
    """``python -m learner.train`` arguments of a tiny run (32x16 cameras, a small network, IL 1
    iteration then PPO+IL, serial rollouts, a checkpoint every iteration, nothing deleted). Stages il+rl:
    the faults are those of the training loop (stage perception has its own resume test)."""
    settings = {
        "stage": "il+rl",
        "tracking.out": str(out),
        "suite": str(suite),
        "eval.suite": str(suite),
        "eval.every": 0,
        "eval.num_envs": 1,
        "env.resolution": "[32,16]",
        "env.render_backend": "cpu",
        "policy.embed_dim": 32,
        "policy.hidden_dim": 64,
        "rollout.num_actors": 0,
        "rollout.envs_per_actor": ENVS,
        "rollout.fragment_length": T,
        "ppo.epochs": 2,
        "ppo.minibatches": 2,
        "ppo.critic_warmup": 0,  # the faults are those of the RL iterations (counted by sample calls)
        "il.pretrain_iterations": 1,
        "il.steps_per_iteration": 1,
        "il.batch_size": 8,
        "il.mode": "alternate",  # RAD's 4 RL rounds : 1 IL round
        "il.rl_rounds": 4,
        "il.il_rounds": 1,
        "ppo.max_consecutive_skips": 20,
        "iterations": 4,
        "store.checkpoint_every": 1,
        "store.keep_last": 50,
        "tracking.tensorboard": "false",
    }
    settings.update({k.replace("__", "."): v for k, v in over.items()})
    return ["--run", run, "--store", str(store), *(f"{k}={v}" for k, v in settings.items())]


def config(args: list[str]) -> TrainConfig:
    """The TrainConfig the driver builds from ``args`` (the same parser as ``python -m learner.train``)."""
    flags = [("--run", "run", "run name"), ("--store", "store", "checkpoint store URI")]  # as learner.train.main
    return parse_cli(TrainConfig, args, "python -m learner.train", "", flags=flags)


def driver_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba"))
    return env


class Driver:
    """``python -m learner.train ARGS`` as a subprocess; stdout and stderr go to ``log``."""

    def __init__(self, args: list[str], log: Path):
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "learner.train", *args],
                cwd=REPO,
                env=driver_env(),
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, cond: Callable[[], object] | str, timeout: float = 300.0, what: str = "") -> object:
        """Poll until ``cond()`` is truthy (or the text ``cond`` is in the output); the driver must live."""
        check = (lambda: cond in self.output()) if isinstance(cond, str) else cond
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"driver exited ({self.proc.returncode}) before {what or cond!r}:\n{self.output()[-4000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or cond!r}:\n{self.output()[-4000:]}")
            time.sleep(0.02)

    def sigkill(self) -> None:
        """SIGKILL by PID, then reap it (a zombie would still look alive to the run lease)."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert self.proc.returncode == -signal.SIGKILL

    def finish(self, timeout: float = 600.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"driver did not finish in {timeout} s:\n{self.output()[-4000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@contextlib.contextmanager
def drivers():
    """Collects the drivers a test starts and kills (by PID) any still running at the end."""
    started: list[Driver] = []
    try:
        yield started
    finally:
        for d in started:
            d.stop()


# --------------------------------------------------------------------------------------------------
# Resuming without training: what the driver restores, byte for byte


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def restore_only(cfg: TrainConfig, folder: Path) -> tuple[int | None, ckpt_io.TrainState, dict[str, bytes], list[str]]:
    """The driver's own resume path (open the store: lease, cleanup of half-written versions; build;
    restore) and nothing else; returns (version resumed from, state, the checkpoint files the restored
    state encodes to, log messages). Right after a resume those files must equal the checkpoint's."""
    records = _Records()
    loggers = [logging.getLogger(n) for n in ("learner.train", "store")]
    for lg in loggers:
        lg.addHandler(records)
        lg.setLevel(logging.INFO)
    tr = Trainer(cfg)
    try:
        tr.open_store()
        tr.folder = Path(folder)  # keep the run's own folder (logs, metrics) as the driver left it
        tr.tracker = Tracker(tr.folder, tr.config_dict, cfg.seed, tensorboard=False)
        tr.build()
        state = tr.restore()
        files = ckpt_io.encode(
            tr.learners.state(),
            state,
            tr.config_dict,
            observation_space=tr.obs_space,
            action_spec=tr.action_spec,
            rig=tr.rig,
        )
    finally:
        tr.close()
        for lg in loggers:
            lg.removeHandler(records)
    version = None
    for msg in records.messages:
        m = re.search(r"from checkpoint (\d+)", msg)
        if m:
            version = int(m.group(1))
    return version, state, files, records.messages


def assert_same_files(restored: dict[str, bytes], committed: dict[str, bytes]) -> None:
    """Weights, optimizer, RNG streams, counters, config: every file identical, byte for byte."""
    assert sorted(restored) == sorted(committed)
    differ = [name for name in committed if restored[name] != committed[name]]
    assert not differ, f"the resumed state differs from the committed checkpoint in {differ}"


def metrics_rows(folder: Path) -> list[dict]:
    path = Path(folder) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def check_every_version(rs, *, last_iteration: int, env_steps: int) -> list[int]:
    """Every committed version loads (sizes and sha256 against its manifest) and the newest carries the
    expected counters; returns the versions."""
    versions = rs.versions()
    assert versions
    for v in versions:
        ck = rs.load(v)
        _, state, _, _ = ckpt_io.decode(ck.files)
        assert state.iteration == ck.meta["iteration"] and state.env_steps == ck.meta["env_steps"]
        assert state.env_steps == state.iteration * T * ENVS  # never a sample counted twice or lost
    meta = rs.load(versions[-1]).meta
    assert meta["stage"] == "done" and meta["iteration"] == last_iteration and meta["env_steps"] == env_steps
    return versions


# --------------------------------------------------------------------------------------------------
# An S3 store on loopback, behind a proxy that can slow it down or cut it off


class TcpProxy:
    """127.0.0.1:``port`` -> 127.0.0.1:``upstream``. ``delay`` s is slept before forwarding each chunk a
    client sends (a slow link: a 1 MB checkpoint takes seconds); ``block()`` drops every connection
    and refuses new ones until ``unblock()`` (the store unreachable from the trainer's side)."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.delay = 0.0
        self._blocked = False
        self._closed = False
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(128)
        self._srv.settimeout(0.2)
        self.port = self._srv.getsockname()[1]
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._blocked:
                client.close()
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                client.close()  # the store is down: the client sees its connection dropped
                continue
            server.settimeout(None)
            with self._lock:
                self._conns.update((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self.delay:
                    time.sleep(self.delay)
                if self._blocked:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._conns.difference_update((src, dst))

    def block(self) -> None:
        self._blocked = True
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def unblock(self) -> None:
        self._blocked = False

    def close(self) -> None:
        self._closed = True
        self.block()
        self._srv.close()


def proxied_uri(server: S3Server, proxy: TcpProxy, prefix: str) -> str:
    """The store URI of ``server``'s bucket under ``prefix``, reached through ``proxy``."""
    return (
        f"s3://{server.bucket}/{prefix}?endpoint_override=127.0.0.1:{proxy.port}&scheme=http&region={server.region}"
        f"&access_key={server.access_key}&secret_key={server.secret_key}"
    )


def s3_versions(server: S3Server, prefix: str, run: str) -> dict[int, set[str]]:
    """{version: file names} of a run, read straight from the server (around the store and the proxy)."""
    client = server.client()
    out: dict[int, set[str]] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=f"{prefix}/{run}/"):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) + len(run) + 2 :]
            m = re.fullmatch(r"ckpt-(\d+)/([^/]+)", rel)
            if m:
                out.setdefault(int(m.group(1)), set()).add(m.group(2))
    return out


def partial_versions(listing: dict[int, set[str]]) -> list[int]:
    """Versions without a manifest: half-written (or just begun)."""
    return sorted(v for v, names in listing.items() if MANIFEST not in names)


def local_versions(root: Path, run: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    base = Path(root) / run
    if base.is_dir():
        for d in base.iterdir():
            m = re.fullmatch(r"ckpt-(\d+)", d.name)
            if m and d.is_dir():
                out[int(m.group(1))] = {p.name for p in d.iterdir() if not p.name.startswith(".")}
    return out


def store(uri: str | Path) -> CheckpointStore:
    return CheckpointStore(uri)
