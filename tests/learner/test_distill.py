"""Stage distill: the soft-target imitation loss against a hand computation, soft and hard labels side by side
in the data and through a checkpoint, the privileged teacher's labels equal to what that policy does in a
privileged env at the same state, and a whole distill run (a privileged teacher, a camera student)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.config import DISTILL_ROUNDS, TrainConfig
from learner.dagger import Labelled, from_bytes, to_bytes
from learner.learner import Demos
from learner.losses import il_loss
from learner.train import train
from scenarios import save
from sim.configs import from_dict
from store import CheckpointStore
from tests.envs.handmade import straight_scenario
from tests.learner.test_train import tiny


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("distill_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=0.0), d / "lead.json")
    return d


def test_soft_targets_are_the_cross_entropy_to_the_teachers_distribution():
    logits_long = torch.tensor([[0.0, math.log(3.0)]])  # p = (1/4, 3/4)
    logits_lat = torch.tensor([[math.log(2.0), 0.0, -1e9]])  # p = (2/3, 1/3, 0): the last bin masked
    q_long, q_lat = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75, 0.0]])
    out = il_loss(logits_long, logits_lat, torch.tensor([1]), torch.tensor([1]), focal_gamma=0.0, soft=(q_long, q_lat))
    want_long = -(0.5 * math.log(0.25) + 0.5 * math.log(0.75))
    want_lat = -(0.25 * math.log(2 / 3) + 0.75 * math.log(1 / 3))
    assert out["losses/il_loss_long"].item() == pytest.approx(want_long, rel=1e-5)
    assert out["losses/il_loss_lat"].item() == pytest.approx(want_lat, rel=1e-5)
    assert torch.isfinite(out["loss"])
    # one-hot targets are the plain cross-entropy of the bins
    hard = il_loss(logits_long, logits_lat, torch.tensor([0]), torch.tensor([1]), focal_gamma=0.0)
    onehot = (torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    soft = il_loss(logits_long, logits_lat, torch.tensor([0]), torch.tensor([1]), focal_gamma=0.0, soft=onehot)
    assert soft["loss"].item() == pytest.approx(hard["loss"].item(), rel=1e-6)


def test_soft_and_hard_labels_side_by_side_and_through_a_checkpoint():
    hard = Demos({"ego": torch.zeros(2, 4)}, torch.tensor([[2, 1], [0, 0]]))
    soft = Demos(
        {"ego": torch.ones(1, 4)}, torch.tensor([[1, 1]]), (torch.tensor([[0.3, 0.7]]), torch.tensor([[0.1, 0.8, 0.1]]))
    )
    both = hard.concat(soft)
    assert both.soft is not None and len(both) == 3
    assert torch.allclose(both.soft[0], torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.3, 0.7]]))
    assert both.soft[1][:2].tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    back = from_bytes(to_bytes(both.take(torch.tensor([2, 0]))))
    assert back.soft is not None and torch.allclose(back.soft[0], torch.tensor([[0.3, 0.7], [0.0, 1.0]]))
    assert back.labels.tolist() == [[1, 1], [2, 1]]
    assert from_bytes(to_bytes(hard)).soft is None


def test_stage_distill_config():
    cfg = from_dict(TrainConfig, {"stage": "perception+distill+rl"})
    assert cfg.stages == ("perception", "il", "rl") and cfg.il.dagger_rounds == DISTILL_ROUNDS
    assert from_dict(TrainConfig, {"stage": "distill", "il": {"dagger_rounds": 2}}).il.dagger_rounds == 2
    with pytest.raises(ValueError, match="camera student"):
        from_dict(TrainConfig, {"stage": "distill", "env": {"observation": "privileged"}})


@pytest.mark.slow
def test_a_camera_student_distilled_from_a_privileged_teacher(tmp_path, suite):
    """A privileged teacher (stage il, no cameras), then stage distill: the camera policy drives, the teacher's
    action distribution labels every state; the labels are what the teacher's network gives on the privileged
    observation of the same state in a privileged env."""
    from envs.driving import DrivingEnv
    from envs.vector import VectorDrivingEnv
    from policy.network import ExportPolicy
    from rollout.teachers import PolicyTeacher

    priv = {"cameras": False, "observation": "privileged", "resolution": [32, 16], "render_backend": "cpu"}
    train(tiny(tmp_path, suite, run="teacher", stage="il", env=priv))
    source = f"{tmp_path / 'store'}/teacher"
    teacher = PolicyTeacher(source)

    # the teacher's labels at a camera env's state == its network on a privileged env at that state
    cam = {"resolution": [32, 16], "render_backend": "cpu"}
    venv = VectorDrivingEnv([str(suite / "lead.json")], 1, cam)
    venv.reset(seed=0)
    for _ in range(3):
        venv.step(np.array([[30, 25]]))
    got = teacher(venv, None, None)
    env = venv.envs[0]
    penv = DrivingEnv(priv, scenarios=[str(suite / "lead.json")])
    pobs = penv.observe_state(0, env._t, env._state, yaw_rate=env._yaw_rate, accel=env._accel, steer=env._steer,
                              last_anchor=env._last, cameras=False)  # fmt: skip
    net = ExportPolicy(teacher.source.build_policy()).eval()
    with torch.no_grad():
        action, logits_long, lat_all, _ = net({k: torch.from_numpy(v)[None] for k, v in pobs.items()})
    n_long = teacher.source.action_spec.n_long
    assert got.shape == (1, 3 + n_long + teacher.source.action_spec.n_lat)
    assert got[0, :2].tolist() == action[0].float().tolist() and got[0, 2] == n_long
    assert np.allclose(got[0, 3 : 3 + n_long], torch.softmax(logits_long[0], -1).numpy(), atol=1e-6)
    assert np.allclose(got[0, 3 + n_long :], torch.softmax(lat_all[0, action[0, 1]], -1).numpy(), atol=1e-6)

    # the student: camera IL, then distillation rounds labelled by the teacher
    il = {"pretrain_iterations": 2, "steps_per_iteration": 2, "batch_size": 16, "dagger_rounds": 2, "dagger_steps": 10,
          "dagger_iterations": 2, "teacher": source}  # fmt: skip
    r = train(tiny(tmp_path, suite, run="student", stage="distill", il=il, env=cam))
    assert r.state.dagger_round == 2 and r.state.stage == "done"
    labelled = Labelled.from_files(CheckpointStore(tmp_path / "store").run("student").load_latest().files)
    assert labelled is not None and len(labelled.rounds) == 2
    data = labelled.data().take(torch.arange(len(labelled)))
    assert data.soft is not None and "cameras" in data.obs and "agents" not in data.obs
    assert torch.allclose(data.soft[0].sum(1), torch.ones(len(data)), atol=1e-5)
    assert torch.equal(data.soft[0].argmax(1), data.labels[:, 1])  # its likeliest longitudinal bin, the label's
    with pytest.raises(ValueError, match="privileged state"):
        PolicyTeacher(f"{tmp_path / 'store'}/student")
