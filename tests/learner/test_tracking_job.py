"""What a Ray job writes outlives the job: a real head (scripts/ray-head.sh, its own temp dir and
ports), a real ``ray job submit --working-dir <repo>`` of a short run to a store on a directory and to
S3 on loopback (moto); after the job ends and its unpacked package is removed, the run's metrics and
TensorBoard events are in the store, ``python -m learner.tracking pull`` brings them back and
TensorBoard's EventAccumulator reads the scalars, and the driver's closing lines name commands that
work from the submitting machine, not paths in the package. The head is stopped by its PID
(``scripts/ray-head.sh stop``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from learner.tracking import pull_command
from policy.sources import redact_uri
from scenarios import save
from store import CheckpointStore, StoreFolder, join_uri
from tests.envs.handmade import straight_scenario
from tests.s3_servers import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
JOB_TIMEOUT_S = 600


@dataclass
class Head:
    address: str
    env: dict[str, str]  # for the ray CLI: RAY_AUTH_MODE=token, the head's settings
    temp: Path  # Ray's session folder root (--temp-dir)


@pytest.fixture
def head(tmp_path):
    """A head of this test's own: a job's package is unpacked once per head and kept in its cache, so a
    package removed by hand must not meet a second job on the same head."""
    state = tmp_path / "ray-head"
    temp = Path(tempfile.mkdtemp(prefix="sdtj-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR")}
    ports = dict(
        RAY_HEAD_PORT=free_port(), RAY_DASHBOARD_PORT=free_port(), RAY_CLIENT_PORT=free_port(),
        RAY_DASHBOARD_AGENT_PORT=free_port(), RAY_METRICS_EXPORT_PORT=free_port(),
    )  # fmt: skip
    env.update({k: str(v) for k, v in ports.items()})
    env.update(
        SPLATDRIVE_RAY_DIR=str(state), RAY_HEAD_TEMP=str(temp), RAY_HEAD_NUM_CPUS="2", RAY_AUTH_MODE="token",
        RAY_DISABLE_USAGE_STATS="1", RAY_BIN=str(RAY),
    )  # fmt: skip
    script = str(REPO / "scripts" / "ray-head.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield Head(f"http://127.0.0.1:{ports['RAY_DASHBOARD_PORT']}", env, temp)
    finally:
        stopped = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("job_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=0.0), d / "lead.json")
    return d


def submit(head: Head, store: str, suite: Path, expect_success: bool = True) -> str:
    """``ray job submit --working-dir <repo>`` of a short il+rl run to ``store``; the job's output."""
    runtime_env = {"env_vars": {"NUMBA_CACHE_DIR": str(REPO / ".cache" / "numba"), "OMP_NUM_THREADS": "1"}}
    cmd = [
        str(RAY), "job", "submit", "--address", head.address, "--working-dir", str(REPO),
        "--runtime-env-json", json.dumps(runtime_env), "--",
        sys.executable, "-m", "learner.train", "--run", "jobtest", "--store", store, "stage=il+rl",
        "env.observation=privileged", "env.cameras=false", "il.pretrain_iterations=2", "iterations=2",
        "eval.every=0", "rollout.num_actors=0", f"suite={suite}", f"eval.suite={suite}", "eval.num_envs=1",
        "rollout.envs_per_actor=2", "rollout.fragment_length=6", "il.steps_per_iteration=1", "il.batch_size=8",
        "ppo.epochs=1", "ppo.minibatches=1", "policy.embed_dim=32", "policy.hidden_dim=64", "tracking.sync_s=1",
    ]  # fmt: skip
    job = subprocess.run(cmd, env=head.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    out = job.stdout + job.stderr
    if expect_success:
        assert job.returncode == 0 and re.search(r"Job '\S+' succeeded", out), out[-6000:]
    return out


def test_a_relative_store_in_a_job_is_refused_at_start(head, suite):
    """Ray's job supervisor gives the entrypoint what rollout.job recognises: the relative default store
    would land in the package, and the run is refused before it trains, saying what to give."""
    out = submit(head, "runs", suite, expect_success=False)
    assert re.search(r"Job '\S+' failed", out), out[-4000:]
    assert "store.uri='runs': this process runs inside Ray job raysubmit_" in out, out[-4000:]
    assert "Give --store an absolute path" in out and "IL 1/2" not in out


@pytest.mark.parametrize("kind", ["local", "moto"])
def test_a_jobs_tracking_files_outlive_its_package(head, suite, kind, tmp_path, request):
    if kind == "local":
        store = str(tmp_path / "store")
    else:
        store = request.getfixturevalue("moto_s3").uri(f"job-{uuid.uuid4().hex[:12]}")
    out = submit(head, store, suite)

    # the package Ray unpacked and ran the job in: small (.venv, .cache and the rest of .gitignore stay
    # home), and holding nothing the run wrote; then removed, as Ray removes it with the session
    found = head.temp.glob("session_*/runtime_resources/working_dir_files/_ray_pkg_*")
    packages = {p.resolve() for p in found if p.is_dir()}  # (session_latest links the session; .lock files)
    assert packages, f"no unpacked package under {head.temp}"
    for pkg in packages:
        size = sum(p.stat().st_size for p in pkg.rglob("*") if p.is_file())  # the job's own caches included
        assert size < 8 * 2**20, f"{pkg}: {size / 2**20:.1f} MiB"
        for kept_home in (".venv", ".git", "runs"):
            assert not (pkg / kept_home).exists(), sorted(p.name for p in pkg.iterdir())
        shutil.rmtree(pkg)

    # checkpoints and tracking files in the store, beside each other
    rs = CheckpointStore(store).run("jobtest")
    assert rs.load(rs.latest()).meta["stage"] == "done"
    files = StoreFolder.of_run(store, "jobtest").list()
    assert {"config.yaml", "run.json", "metrics.jsonl", "summary.json"} <= set(files), files
    assert [f for f in files if f.startswith("events.out.tfevents.")], files

    # the closing lines: commands for the submitting machine, no path inside the package
    tail = out[out.index("done. checkpoints:") :].splitlines()
    closing = "\n".join([tail[0], *(line for line in tail[1:] if line.startswith("[train"))])
    assert pull_command(redact_uri(join_uri(store, "jobtest")), "tb/jobtest") in closing  # credentials: ***
    assert "tensorboard --logdir tb/jobtest" in closing and "_ray_pkg_" not in closing
    assert "python -m evaluation --compare" in closing

    # the pull command the closing line gives (with the credentials it hides), from here
    dest = tmp_path / "pulled"
    pulled = subprocess.run(
        [sys.executable, "-m", "learner.tracking", "pull", join_uri(store, "jobtest"), str(dest)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    assert f"tensorboard --logdir {dest}" in pulled.stdout
    rows = [json.loads(x) for x in (dest / "metrics.jsonl").read_text().splitlines()]
    il_rows = [r for r in rows if "losses/il_loss" in r]
    rl_rows = [r for r in rows if "charts/SPS" in r]
    assert len(il_rows) == 2 and len(rl_rows) == 2  # il.pretrain_iterations=2, iterations=2
    assert json.loads((dest / "summary.json").read_text())["run"] == "jobtest"
    assert json.loads((dest / "run.json").read_text())["learners"]["num_learners"] == 1
    ea = EventAccumulator(str(dest))
    ea.Reload()
    events = ea.Scalars("losses/il_loss")  # float32 in the events, float64 in metrics.jsonl
    assert [e.step for e in events] == [r["step"] for r in il_rows]
    assert [e.value for e in events] == pytest.approx([r["losses/il_loss"] for r in il_rows], rel=1e-6)
    assert len(ea.Scalars("charts/SPS")) == 2
