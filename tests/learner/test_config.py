"""The training config as one typed tree: the CLI spellings the README and the tests use, the generated
--help (env.* and policy.* with their help), to_dict -> from_dict round trips, what a resume compares,
and the learner's settings built from the one set of PPO / IL defaults."""

from __future__ import annotations

import dataclasses

import pytest

from envs.config import EnvConfig
from learner.config import ILConfig, PPOConfig, StoreConfig, TrackingConfig, TrainConfig
from learner.learner import LearnerSettings
from learner.train import config_changes, learner_settings, main
from policy.network import PolicyConfig
from sim.configs import ConfigError, from_dict, parse_cli, resolve, to_dict

FLAGS = [("--run", "run", "run name"), ("--store", "store", "store"), ("--out", "tracking.out", "out")]


def cli(*args: str) -> TrainConfig:
    return parse_cli(TrainConfig, list(args), "python -m learner.train", "", flags=FLAGS)


def test_the_spellings_in_use():
    cfg = cli("--run", "r1", "--store", "s3://bucket/runs", "--out", "/tmp/o", "stage=il+rl", "env.cameras=false",
              "policy.cnn_channels=[8,16]", "policy.cnn_kernels=[3,3]", "store.keep_last=5",
              "tracking.tensorboard=false", "store.checkpoint_every=2", "rollout.num_actors=4", "iterations=200",
              "ppo.lr=1e-4")  # fmt: skip
    assert cfg.run == "r1" and cfg.store == StoreConfig("s3://bucket/runs", checkpoint_every=2, keep_last=5)
    assert cfg.tracking == TrackingConfig(out="/tmp/o", tensorboard=False)
    assert isinstance(cfg.env, EnvConfig) and cfg.env.cameras is False and cfg.env.render_backend == "auto"
    assert isinstance(cfg.policy, PolicyConfig) and cfg.policy.cnn_channels == (8, 16)
    assert cfg.policy.cnn_strides == (4, 2)  # PolicyConfig's own rule for the default strides
    assert (cfg.rollout.num_actors, cfg.iterations, cfg.ppo.lr) == (4, 200, 1e-4)
    assert resolve(TrainConfig, None, ["store=/data/runs"]).store.uri == "/data/runs"  # store=URI is store.uri


def test_a_yaml_file_then_flags_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("store: {keep_last: 9}\nenv: {resolution: [32, 16]}\npolicy: {embed_dim: 32}\nseed: 4\n")
    cfg = cli("--config", str(path), "--store", "/s", "stage=il+rl", "env.cameras=false", "seed=5")
    assert cfg.store == StoreConfig("/s", keep_last=9) and cfg.env.resolution == (32, 16) and not cfg.env.cameras
    assert cfg.policy.embed_dim == 32 and cfg.seed == 5


def test_bad_keys_are_refused_naming_them():
    with pytest.raises(ConfigError, match=r"unknown config key env.camras \(did you mean env.cameras\?\)"):
        resolve(TrainConfig, None, ["env.camras=false"])
    with pytest.raises(ConfigError, match=r"unknown config key policy.embed \(did you mean policy.embed_dim\?\)"):
        resolve(TrainConfig, None, ["policy.embed=3"])
    # keys that moved into a section are found there
    with pytest.raises(ConfigError, match=r"unknown config key tensorboard \(did you mean tracking.tensorboard\?\)"):
        resolve(TrainConfig, None, ["tensorboard=false"])
    with pytest.raises(ConfigError, match=r"unknown config key keep_last \(did you mean store.keep_last\?\)"):
        resolve(TrainConfig, None, ["keep_last=5"])
    with pytest.raises(ConfigError, match=r"env: EnvConfig.horizon: expected None or an int >= 1"):
        resolve(TrainConfig, None, ["env.horizon=0"])
    with pytest.raises(ConfigError, match="keep_last >= 1"):
        resolve(TrainConfig, None, ["store.keep_last=0"])
    with pytest.raises(ConfigError, match=r"policy: PolicyConfig.cnn_kernels: expected one kernel size per conv"):
        resolve(TrainConfig, None, ["policy.cnn_channels=[8]"])


def test_help_lists_every_key_with_its_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(EnvConfig):
        assert f"  env.{f.name} (" in out, f.name
    for f in dataclasses.fields(PolicyConfig):
        assert f"  policy.{f.name} (" in out, f.name
    assert "  env.cameras (bool, default True): observe the rig's images" in out
    assert "  policy.embed_dim (int, default 128): width of every per-part embedding" in out
    assert "  store.*: the checkpoint store (store=VALUE sets store.uri)" in out
    assert "  store.keep_last (int, default 3): checkpoints kept" in out
    assert "  tracking.tensorboard (bool, default True)" in out
    assert "--store STORE" in out and "--run RUN" in out and "--out OUT" in out


def test_round_trip_to_dict_from_dict_gives_an_equal_config():
    cfg = cli("--run", "r", "--store", "/s", "env.resolution=[32,16]", "env.rig=front3", "policy.token_pool=mean",
              "rollout.resources.rollout_node=1", "learner_resources.learner_node=0.5",
              "ppo.value_clip=0.2")  # fmt: skip
    plain = to_dict(cfg)
    assert plain["env"]["resolution"] == [32, 16] and plain["policy"]["cnn_strides"] == [4, 2, 2, 2]
    assert len(plain["env"]) == len(dataclasses.fields(EnvConfig))  # the whole env, not only what was given
    assert from_dict(TrainConfig, plain) == cfg
    assert from_dict(TrainConfig, to_dict(TrainConfig())) == TrainConfig()
    # built directly, sections may be given as mappings: the same typed tree
    assert TrainConfig(env={"resolution": [32, 16]}, store={"uri": "/s"}) == TrainConfig(
        env=EnvConfig(resolution=(32, 16)), store=StoreConfig("/s")
    )


def test_config_changes_names_each_dotted_key():
    before = to_dict(TrainConfig(iterations=2))
    policy = dataclasses.replace(TrainConfig().policy, embed_dim=16)
    after = to_dict(TrainConfig(iterations=4, policy=policy, store=StoreConfig(keep_last=5)))
    assert config_changes(before, after) == [
        "iterations: 2 -> 4",
        "policy.embed_dim: 128 -> 16",
        "store.keep_last: 3 -> 5",
    ]
    assert config_changes(before, before) == []


def test_learner_settings_come_from_the_ppo_and_il_sections():
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(LearnerSettings))  # no defaults of its own
    ppo = PPOConfig(gamma=0.8, lam=0.9, clip_lateral=0.05, ent_coef=0.02, epochs=3, minibatches=5, aux_front=0.3,
                    aux_progress=0.0, adam_eps=1e-6, max_consecutive_skips=7)  # fmt: skip
    il = ILConfig(batch_size=16, focal_gamma=2.0, mode="weighted", weight=0.25)
    s = learner_settings(TrainConfig(seed=9, ppo=ppo, il=il, gpus_per_learner=0.0), total_updates=0, lr=1e-3)
    assert (s.lr, s.total_updates, s.seed, s.device) == (1e-3, 1, 9, "cpu")  # the schedule spans >= 1 update
    assert s.ppo is ppo and s.il is il  # the sections as they are: no field copied by hand
    assert s.aux_weights == (0.3, 0.1, 0.1, 0.1, 0.0)  # front, rear, left, right, progress
    assert s.il_weight == 0.25
    alternate = learner_settings(TrainConfig(il=ILConfig(weight=0.25)), total_updates=10, lr=3e-4)
    assert alternate.il_weight == 0.0  # the weight only counts in the weighted mode


def test_camera_demonstrations_follow_the_first_demo_clips(tmp_path):
    """il.demo_clips: with cameras the demonstrations follow the first N training clips (a built-in suite as its
    prefix spec, a folder's scenarios in its order); privileged observations and demo_clips=0 take them all."""
    from types import SimpleNamespace

    from learner.stages import Stages
    from scenarios import save
    from tests.envs.handmade import straight_scenario

    def source(suite, cameras=True, n=64):
        env = EnvConfig(cameras=cameras)
        cfg = TrainConfig(stage="il+rl", suite=str(suite), env=env, il=ILConfig(demo_clips=n))
        return Stages.demo_source(SimpleNamespace(cfg=cfg))

    assert source("train") == "train:64"
    assert source("train:256") == "train:64" and source("train:10") == "train:10"
    assert source("train", n=0) == "train" and source("train", cameras=False) == "train"
    for sid in ("c", "a", "b"):
        save(straight_scenario(tmp_path, sid=sid, n_ground=20), tmp_path / f"{sid}.json")
    assert [s.id for s in source(tmp_path, n=2)] == ["a", "b"]  # the folder's order: by file name
    with pytest.raises(ValueError, match="demo_clips"):
        ILConfig(demo_clips=-1)


def test_the_dagger_labeller_settings_are_the_reactive_experts_and_checked_up_front():
    cfg = cli("stage=il", "il.labeller.sensing_range=36", "il.labeller.nudge_ramp_time=1.5")
    assert cfg.il.labeller == {"sensing_range": 36, "nudge_ramp_time": 1.5}
    with pytest.raises(ConfigError, match=r"il.labeller: unknown setting\(s\) \['sensing'\]; the reactive expert's"):
        resolve(TrainConfig, None, ["il.labeller.sensing=36"])
    with pytest.raises(ConfigError, match=r"il.labeller: ReactiveSettings: every setting must be > 0, got max_nudge=0"):
        resolve(TrainConfig, None, ["il.labeller.max_nudge=0"])
    with pytest.raises(ConfigError, match=r"il.labeller sets the reactive expert's settings, but il.teacher='runs/t'"):
        resolve(TrainConfig, None, ["il.teacher=runs/t", "il.labeller.sensing_range=36"])
