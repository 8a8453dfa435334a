"""The asymmetric critic (``env.critic``): a camera env emits privileged parts for the value function alone;
the policy's actions never depend on them; exports, demonstrations and evaluation leave them out; a whole
camera run trains with them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs.config import EnvConfig
from envs.driving import DrivingEnv
from envs.observation import observation_mode, policy_space
from policy.network import ActorCritic, ExportPolicy, PolicyConfig
from scenarios import save
from sim.configs import from_dict
from tests.envs.handmade import straight_scenario

CAM = {"resolution": [32, 16], "render_backend": "cpu"}
CRITIC = ("ego", "route", "agents", "map")
POLICY = {"cnn_channels": [8, 16], "cnn_kernels": [3, 3], "embed_dim": 32, "hidden_dim": 64}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("critic_suite")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=0.0), d / "lead.json")
    return d


@pytest.fixture(scope="module")
def recorded(suite):
    """A camera env with the critic's parts: its space, action spec and 4 observations stacked."""
    env = DrivingEnv({**CAM, "critic": list(CRITIC)}, scenarios=str(suite))
    obs, _ = env.reset(seed=0)
    frames = [obs]
    for _ in range(3):
        obs, *_ = env.step(np.array([30, 25]))
        frames.append(obs)
    space, spec = env.observation_space, env.action_spec
    env.close()
    return space, spec, {k: np.stack([f[k] for f in frames]) for k in space.spaces}


def test_config_checks_and_orders_the_parts():
    assert EnvConfig.from_dict(critic=["map", "agents"]).critic == ("agents", "map")
    for bad in (["cameras"], ["navigation"], ["agents", "agents"]):
        with pytest.raises(ValueError, match=r"EnvConfig\.critic"):
            EnvConfig.from_dict(critic=bad)


def test_camera_env_emits_the_privileged_state_under_the_prefix(suite):
    env = DrivingEnv({**CAM, "critic": list(CRITIC)}, scenarios=str(suite))
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, *_ = env.step(np.array([30, 25]))
    space = env.observation_space
    assert space.contains(obs)
    want = {"critic_ego", "critic_route", "critic_agents", "critic_agents_mask", "critic_map", "critic_map_mask"}
    assert {k for k in obs if k.startswith("critic_")} == want
    # the same numbers a privileged env's observation of this state has (observe_as: the teacher's view)
    priv = env.observe_as("privileged", CRITIC)
    for k, v in priv.items():
        assert np.array_equal(obs["critic_" + k], v), k
    assert obs["critic_agents_mask"].sum() >= 1  # the stopped car ahead
    assert obs["critic_ego"].shape == (6,) and obs["ego"].shape == (4,)
    # still a camera observation; the policy's own parts are camera mode's
    assert observation_mode(space) == "camera"
    assert set(policy_space(space).spaces) == {"cameras", "ego", "navigation", "command", "limits"}
    plain = DrivingEnv(dict(CAM), scenarios=str(suite)).observation_space
    assert policy_space(space) == plain
    env.close()


def test_the_policy_never_reads_the_critic_parts(recorded):
    space, spec, batch = recorded
    torch.manual_seed(0)
    net = ActorCritic(space, spec, from_dict(PolicyConfig, dict(POLICY))).eval()
    assert net.critic_parts == ("critic_ego", "critic_route", "critic_agents", "critic_map")
    obs = {k: torch.from_numpy(v) for k, v in batch.items()}
    net.update_obs_stats(obs)
    assert float(net.norms["critic_agents"].count) > 0
    other = dict(obs)
    g = torch.Generator().manual_seed(1)
    for k in net.critic_parts:
        other[k] = obs[k] + 3.0 * torch.randn(obs[k].shape, generator=g)
    a, b = net(obs, action=torch.zeros(4, 2, dtype=torch.long)), net(other, action=torch.zeros(4, 2, dtype=torch.long))
    assert torch.equal(a.logits_long, b.logits_long) and torch.equal(a.logits_lat, b.logits_lat)
    assert not torch.allclose(a.values, b.values)  # the value function does read them
    # without them: the policy's logits as before; the values need them
    actor_only = {k: v for k, v in obs.items() if not k.startswith("critic_")}
    assert torch.equal(net.logits(actor_only)[0], a.logits_long)
    with pytest.raises(KeyError, match="critic_ego"):
        net.values(actor_only)
    _, logits_long, _, values = ExportPolicy(net)(actor_only)
    assert torch.equal(logits_long, a.logits_long) and torch.isnan(values).all()
    # the value loss trains the critic's own encoders and none of the policy's parameters
    net.train()
    net.values(obs).sum().backward()
    assert net.critic_encoders["critic_agents"].token_mlp[0].weight.grad.abs().sum() > 0
    policy_params = [p for n, p in net.named_parameters() if n.startswith(("encoders.", "trunk.", "long_head"))]
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in policy_params)
    # demonstrations hold the policy's parts only: the critic's norms keep their statistics
    count = float(net.norms["critic_agents"].count)
    net.update_obs_stats(actor_only)
    assert float(net.norms["critic_agents"].count) == count


def test_critic_parts_need_a_critic_of_its_own(recorded):
    space, spec, _ = recorded
    for critic in ("shared", "detached"):
        with pytest.raises(ValueError, match=r"policy\.critic=separate"):
            ActorCritic(space, spec, from_dict(PolicyConfig, {**POLICY, "critic": critic}))


def test_export_leaves_the_critic_parts_out(tmp_path, suite, recorded):
    """A checkpoint with an asymmetric critic exports with the policy's inputs alone (the critic's in
    critic_inputs), NaN values, no env.critic; the package resolves to the same network and drives alike."""
    from learner import checkpoint as ckpt_io
    from learner.config import TrainConfig
    from learner.learner import Learner
    from learner.train import learner_settings
    from policy.export import main
    from policy.exported import load_exported
    from policy.sources import resolve_policy_source
    from store import CheckpointStore

    space, spec, batch = recorded
    torch.manual_seed(0)
    net = ActorCritic(space, spec, from_dict(PolicyConfig, dict(POLICY)))
    net.update_obs_stats({k: torch.from_numpy(v) for k, v in batch.items()})
    env = {**CAM, "critic": list(CRITIC)}
    config = {"run": "asym", "store": str(tmp_path / "store"), "suite": str(suite), "env": env, "policy": POLICY}
    learner = Learner(net, learner_settings(TrainConfig(), total_updates=10, lr=3e-4))
    files = ckpt_io.encode(
        learner.state(), ckpt_io.TrainState(stage="rl", iteration=1), config,
        observation_space=space, action_spec=spec, rig=("front3", 32, 16),
    )  # fmt: skip
    CheckpointStore(tmp_path / "store").run("asym").commit(files, {"iteration": 1, "env_steps": 10})
    src = resolve_policy_source(f"{tmp_path / 'store'}/asym")
    assert src.observation_mode == "camera" and "critic_agents" in src.obs_space.spaces
    assert not any(e["name"].startswith("critic_") for e in src.inputs)

    out = tmp_path / "pkg"
    assert main(["--policy", f"{tmp_path / 'store'}/asym", "--out", str(out), "check_samples=4"]) == 0
    pkg = resolve_policy_source(out)
    spec_json = pkg.policy_json
    assert spec_json is not None
    names = [e["name"] for e in spec_json["inputs"]]
    assert names == list(policy_space(space).spaces)  # camera mode's parts
    assert set(names) == {"cameras", "ego", "navigation", "command", "limits"}
    critic_names = {"critic_" + k for k in ("ego", "route", "agents", "agents_mask", "map", "map_mask")}
    assert {e["name"] for e in spec_json["critic_inputs"]} == critic_names
    assert "critic" not in spec_json["env_config"] and spec_json["env_config_resolved"]["critic"] == []
    assert not any(k.startswith("critic_") for k in spec_json["normalisation"]["vectors"])
    assert "NaN" in spec_json["outputs"][-1]["meaning"]
    assert spec_json["parity"]["onnxruntime"]["actions_equal"] == spec_json["parity"]["onnxruntime"]["samples"]

    obs = {k: v for k, v in batch.items() if k in names}
    ort = load_exported(out, backend="onnxruntime").run(obs)
    with torch.no_grad():
        want = ExportPolicy(src.build_policy())({k: torch.from_numpy(v) for k, v in obs.items()})
    assert np.array_equal(ort["action"], want[0].numpy())
    assert np.abs(ort["logits_long"] - want[1].numpy()).max() < 1e-4 and np.isnan(ort["values"]).all()
    assert np.array_equal(pkg.make_actor("eager")(obs), ort["action"])  # the package's weights, rebuilt whole


def test_a_camera_run_trains_its_critic_on_privileged_state(tmp_path, suite):
    """Stage il then rl from cameras with env.critic: the rollouts carry the critic's parts, the demonstrations
    do not, the critic's encoders learn, the policy evaluates, and the checkpoint resolves to the policy's
    camera inputs."""
    from learner.train import train
    from policy.sources import resolve_policy_source
    from store import CheckpointStore
    from tests.learner.test_train import tiny

    env = {**CAM, "critic": ["agents", "map"]}
    r = train(tiny(tmp_path, suite, run="asym", env=env, iterations=2))
    assert r.state.stage == "done" and r.state.last_eval is not None
    rs = CheckpointStore(tmp_path / "store").run("asym")
    src = resolve_policy_source(f"{tmp_path / 'store'}/asym")
    il = resolve_policy_source(f"{tmp_path / 'store'}/asym-il")
    key = "critic_encoders.critic_agents.token_mlp.0.weight"
    assert not torch.equal(src.weights[key], il.weights[key])  # stage rl trained the critic's agent encoder
    assert float(src.weights["norms.critic_agents.count"]) > 0  # from the rollouts
    assert {e["name"] for e in src.inputs} == {"cameras", "ego", "navigation", "command", "limits"}
    assert rs.latest() is not None
