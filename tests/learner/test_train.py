"""The training driver end to end: train, checkpoint, resume, evaluate; a second driver is refused;
and the same entrypoint as a Ray job on a real head node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from learner import checkpoint as ckpt_io
from learner.config import TrainConfig
from learner.train import saved_config, train
from policy.network import PolicyConfig, policy_changes
from scenarios import save
from sim.configs import ConfigError, from_dict
from store import CheckpointStore, RunLocked
from tests.envs.handmade import straight_scenario

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("train_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=0.0), d / "lead.json")
    return d


def tiny(tmp: Path, suite: Path, **over) -> TrainConfig:
    data = {
        "run": "tiny",
        "store": {"uri": str(tmp / "store"), "checkpoint_every": 1},
        "tracking": {"out": str(tmp / "out"), "tensorboard": True},
        "suite": str(suite),
        "env": {"resolution": [32, 16], "render_backend": "cpu"},
        "policy": {"embed_dim": 32, "hidden_dim": 64},
        "rollout": {"num_actors": 0, "envs_per_actor": 2, "fragment_length": 6},
        "ppo": {"epochs": 2, "minibatches": 2, "critic_warmup": 1},
        "il": {"pretrain_iterations": 2, "steps_per_iteration": 2, "batch_size": 16, "rl_rounds": 2, "il_rounds": 1},
        "eval": {"suite": str(suite), "every": 0, "num_envs": 2},
        "iterations": 2,
    }
    for k, v in over.items():
        data[k] = v
    return from_dict(TrainConfig, data)


@pytest.mark.slow
def test_train_checkpoint_resume_evaluate(tmp_path, suite, capsys):
    r1 = train(tiny(tmp_path, suite))
    s1 = r1.state
    assert s1.stage == "done" and s1.il_iteration == 2 and s1.iteration == 2
    assert s1.warmup == 1 and s1.env_steps == 2 * 6 * 2  # iterations x fragment_length x envs (warm-up apart)
    assert s1.il_eval is not None and s1.last_eval is not None and s1.last_eval["n"] == 2
    assert s1.selected == "rl+il"  # eval.every=0: the end of stage rl is the only candidate
    rs = CheckpointStore(tmp_path / "store").run("tiny")
    versions = rs.versions()
    assert versions and r1.last_version == versions[-1]
    meta = rs.load(versions[-1]).meta
    assert meta["stage"] == "done" and meta["iteration"] == 2 and "val/CR" in meta["metrics"]
    # the IL policy is kept beside the run, for evaluating IL against RL+IL
    il = CheckpointStore(tmp_path / "store").run("tiny-il")
    assert il.load(il.latest()).meta["reason"] == "end of stage il"
    # the run folder: resolved config, provenance, metrics, TensorBoard, summary
    folder = tmp_path / "out" / "tiny"
    for name in ("config.yaml", "run.json", "metrics.jsonl", "summary.json"):
        assert (folder / name).is_file(), name
    assert any(p.name.startswith("events.out.tfevents") for p in folder.iterdir())
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert any("losses/policy_loss" in r for r in rows) and any("losses/il_loss" in r for r in rows)
    assert any("charts/SPS" in r for r in rows) and any("val/CR" in r for r in rows)
    # the resolved config is the whole tree (env and policy sections with every key), in the checkpoint
    # and the run folder, and it reads back into the same config
    saved = json.loads(rs.load(versions[-1]).files["config.json"])
    assert saved["env"]["resolution"] == [32, 16] and saved["env"]["cameras"] is True
    assert saved["policy"]["embed_dim"] == 32 and saved["policy"]["token_pool"] == "max"
    assert saved["store"]["checkpoint_every"] == 1 and saved["tracking"]["out"] == str(tmp_path / "out")
    assert from_dict(TrainConfig, saved) == tiny(tmp_path, suite)
    assert from_dict(TrainConfig, yaml.safe_load((folder / "config.yaml").read_text())) == tiny(tmp_path, suite)
    capsys.readouterr()

    # rerunning the same run with more iterations continues where it stopped: IL is not redone,
    # the counters carry on, the optimizer and RNG come back from the checkpoint
    r2 = train(tiny(tmp_path, suite, iterations=4))
    s2 = r2.state
    assert s2.il_iteration == 2 and s2.iteration == 4 and s2.env_steps == 4 * 6 * 2
    assert len([h for h in s2.history if h["label"] == "il"]) == 1
    assert rs.latest() > versions[-1]
    assert "resuming with changed settings: iterations: 2 -> 4" in capsys.readouterr().out
    # the checkpoint's weights are its own network's: a resume with another is refused, naming the key
    latest = rs.latest()
    with pytest.raises(ConfigError, match=r"another network \(policy.embed_dim: 32 -> 16\)"):
        train(tiny(tmp_path, suite, iterations=5, policy={"embed_dim": 16, "hidden_dim": 64}))
    assert rs.latest() == latest
    # and so is stage rl started from it with another network
    with pytest.raises(ConfigError, match=r"init_from='tiny'.*another network \(policy.embed_dim: 32 -> 16\)"):
        train(
            tiny(
                tmp_path, suite, run="tiny-rl", stage="rl", init_from="tiny", policy={"embed_dim": 16, "hidden_dim": 64}
            )
        )


def test_a_checkpoint_from_before_a_network_setting_reads_as_it_was_built():
    """A config.json written before policy.lift_backbone existed holds the small CNN's weights: read back
    it means 'small' whatever training's default is now, so a resume or init_from with the deep backbone
    is refused naming the key, and one with 'small' is not."""
    old = {"stage": "il+rl", "policy": {"camera_encoder": "lift", "embed_dim": 32}}
    assert saved_config(old)["policy"]["lift_backbone"] == "small" and "lift_backbone" not in old["policy"]
    deep = PolicyConfig(camera_encoder="lift", embed_dim=32, lift_backbone="deep")
    assert policy_changes(old["policy"], deep) == ["policy.lift_backbone: 'small' -> 'deep'"]
    assert policy_changes(old["policy"], PolicyConfig(camera_encoder="lift", embed_dim=32)) == []
    new = {"policy": {"camera_encoder": "lift", "embed_dim": 32, "lift_backbone": "deep"}}
    assert policy_changes(new["policy"], deep) == []
    assert policy_changes(new["policy"], PolicyConfig(camera_encoder="lift", embed_dim=16, lift_backbone="deep")) == [
        "policy.embed_dim: 32 -> 16"
    ]
    assert from_dict(TrainConfig, saved_config({"policy": old["policy"]})).policy.lift_backbone == "small"


@pytest.mark.slow
def test_second_driver_on_a_run_is_refused(tmp_path, suite):
    rs = CheckpointStore(tmp_path / "store").run("tiny")
    with rs.acquire("someone-else"), pytest.raises(RunLocked, match="someone-else"):
        train(tiny(tmp_path, suite))
    assert rs.versions() == []


def _free_ports(n):
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.slow
def test_ray_job_submit_runs_the_entrypoint(tmp_path, suite):
    """A Ray head on loopback (own temp dir and ports, dashboard on 127.0.0.1, token auth as Ray sets it
    up), the tiny run submitted as a job with the repository as working dir, its checkpoint committed
    in the store; the head stopped by its PID."""
    ray_bin = Path(sys.executable).parent / "ray"
    temp = Path("/tmp") / f"sd-ray-{os.getpid()}"  # short: Ray's socket paths have a length limit
    gcs, dash, client, nm, om, agent, metrics = _free_ports(7)
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            str(gcs),
            "--temp-dir",
            str(temp),
            "--include-dashboard",
            "true",
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(dash),
            "--ray-client-server-port",
            str(client),
            "--node-manager-port",
            str(nm),
            "--object-manager-port",
            str(om),
            "--dashboard-agent-listen-port",
            str(agent),
            "--metrics-export-port",
            str(metrics),
            "--num-cpus",
            "2",
            "--disable-usage-stats",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dash}"
    # the head turns on Ray's token auth (the token in ~/.ray/auth_token); clients must say so too
    client_env = dict(os.environ, RAY_AUTH_MODE="token", PYTHONPATH=str(REPO))
    store = tmp_path / "store"
    try:
        deadline = time.monotonic() + 300
        while True:
            probe = subprocess.run(
                [str(ray_bin), "job", "list", "--address", address], capture_output=True, text=True, env=client_env
            )
            if probe.returncode == 0:
                break
            assert head.poll() is None, head.stdout.read()
            assert time.monotonic() < deadline, "the Ray head did not come up"
            time.sleep(2)
        cmd = [
            str(ray_bin), "job", "submit", "--address", address, "--working-dir", str(REPO), "--",
            sys.executable, "-m", "learner.train", "--run", "job", "--store", str(store),
            "--out", str(tmp_path / "out"), f"suite={suite}", f"eval.suite={suite}", "env.resolution=[32,16]",
            "env.render_backend=cpu",
            "policy.embed_dim=32", "policy.hidden_dim=64", "rollout.num_actors=1", "rollout.envs_per_actor=2",
            "rollout.fragment_length=4", "rollout.cpus_per_actor=0.5", "il.pretrain_iterations=1",
            "il.steps_per_iteration=1", "il.batch_size=8", "iterations=1", "eval.every=0", "tracking.tensorboard=false",
        ]  # fmt: skip
        job = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=client_env)
        out = job.stdout + job.stderr
        assert job.returncode == 0, out[-4000:]
        assert "SUCCEEDED" in out or "succeeded" in out, out[-4000:]
        rs = CheckpointStore(store).run("job")
        assert rs.latest() is not None
        assert rs.load(rs.latest()).meta["stage"] == "done"
    finally:
        head.send_signal(signal.SIGTERM)  # --block: the ray start process stops what it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)


@pytest.mark.slow
def test_dagger_labels_the_states_the_policy_visits_and_a_resume_keeps_them(tmp_path, suite, capsys):
    """Stage il with two DAgger rounds: every state the policy drove to is labelled by the reactive expert (the
    same bins DrivingEnv.reactive_label gives at that state), the data is aggregated and checkpointed, and a
    resumed run with a third round reads the first two back."""
    import torch

    from learner import dagger

    il = {"pretrain_iterations": 2, "steps_per_iteration": 2, "batch_size": 16, "dagger_rounds": 2, "dagger_steps": 20,
          "dagger_iterations": 2}  # fmt: skip
    cfg = tiny(tmp_path, suite, stage="il", il=il, env={"cameras": False, "observation": "privileged"})
    r1 = train(cfg)
    assert r1.state.dagger_round == 2 and r1.state.stage == "done"
    assert "DAgger will hold up to 40 labelled states" in capsys.readouterr().out  # planned before training
    ck = CheckpointStore(tmp_path / "store").run("tiny").load_latest()
    labelled = dagger.Labelled.from_files(ck.files)
    assert labelled is not None and [len(r) for r in labelled.rounds] == [24, 24]  # two fragments [6, 2] a round
    data = labelled.data().take(torch.arange(len(labelled)))
    assert data.labels.dtype == torch.int64 and set(data.obs) >= {"ego", "route", "agents", "map", "limits"}
    # a resume with one round more: the first two rounds' states are kept, a third joins them
    r2 = train(tiny(tmp_path, suite, stage="il", il={**il, "dagger_rounds": 3}, env=cfg.env))
    assert r2.state.dagger_round == 3
    last = CheckpointStore(tmp_path / "store").run("tiny").load_latest()
    again = dagger.Labelled.from_files(last.files)
    assert again is not None and [len(r) for r in again.rounds] == [24, 24, 24]
    assert torch.equal(again.data().take(torch.arange(48)).labels, data.labels)
    # the rounds the first run wrote were linked into the resumed run's checkpoints, not written again
    copies = list((tmp_path / "store" / "tiny").glob("ckpt-*/dagger-00000.safetensors"))
    assert len(copies) >= 2 and len({p.stat().st_ino for p in copies}) == 1
    # the IL policy kept beside the run (<run>-il) holds the policy, not DAgger's data (only a resume reads it)
    snap = CheckpointStore(tmp_path / "store").run("tiny-il").load_latest()
    assert not any(map(dagger.is_dagger_file, snap.files)) and snap.meta["snapshot_of"] == "tiny"
    assert (
        snap.files["policy.safetensors"]
        == CheckpointStore(tmp_path / "store").run("tiny").load_latest().files["policy.safetensors"]
    )


def test_select_start_counts_the_policy_stage_rl_started_from(tmp_path, suite):
    """eval.select_start: the end of stage il is a candidate for the run's final policy beside stage rl's
    evaluations; the run reports whichever scored the better DS on the eval suite (a tie: the RL-trained one),
    and the checkpoint holds that policy's weights."""
    r = train(tiny(tmp_path, suite, eval={"suite": str(suite), "every": 0, "num_envs": 2, "select_start": True}))
    s = r.state
    by_label = {h["label"]: h for h in s.history}
    assert set(by_label) >= {"il", "rl+il"}
    want = "il" if by_label["il"]["DS"] > by_label["rl+il"]["DS"] else "rl+il"
    assert s.selected == want and s.last_eval["DS"] == by_label[want]["DS"]
    store = CheckpointStore(tmp_path / "store")
    final = ckpt_io.policy_weights(store.run("tiny").load_latest().files)
    il = ckpt_io.policy_weights(store.run("tiny-il").load_latest().files)
    same = all(torch.equal(final[k], il[k]) for k in il)
    assert same == (want == "il")
