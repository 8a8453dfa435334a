"""The learner group: one learner in the driver; N learners rendezvous at rank 0's own store (the
driver relays the address and binds no port); config checks of the custom resources."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from learner.config import RolloutConfig, TrainConfig
from learner.group import LearnerGroup
from tests.learner.test_learner import SETTINGS, make_policy


def test_one_learner_trains_in_the_driver():
    g = LearnerGroup(make_policy, SETTINGS, num_learners=1)
    d = g.describe()
    assert d["in_driver"] and d["num_learners"] == 1 and d["backend"] == "none" and d["rendezvous"] is None
    assert d["device"] == "cpu"
    assert d["ranks"][0]["pid"] == os.getpid()
    assert g.weights().keys() == make_policy().state_dict().keys()


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(num_learners=0), "num_learners must be >= 1"), (dict(gpus_per_learner=-1.0), "gpus_per_learner")],
)
def test_bad_group_sizes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LearnerGroup(make_policy, SETTINGS, **kwargs)


def test_a_gpu_learner_in_a_driver_without_cuda_says_what_to_do():
    if torch.cuda.is_available():
        pytest.skip("CUDA here: the driver can hold the GPU learner")
    with pytest.raises(ValueError, match=r"trains in the driver process, which sees no CUDA device.*learner_resources"):
        LearnerGroup(make_policy, SETTINGS, num_learners=1, gpus_per_learner=1.0)


def _listening_pids(port: int) -> set[int]:
    """Processes with a TCP socket listening on ``port`` (Linux /proc: no psutil needed)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":  # 0A: LISTEN
                inodes.add(f[9])
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                pids.add(int(pid))
    return pids


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads listening sockets from Linux /proc")
def test_two_learners_rendezvous_at_rank0s_store_and_the_driver_binds_no_port(monkeypatch, request):
    request.getfixturevalue("ray_session")
    bound = []
    real_bind = socket.socket.bind

    def spy(self, address):
        bound.append(address)
        return real_bind(self, address)

    monkeypatch.setattr(socket.socket, "bind", spy)
    g = LearnerGroup(make_policy, SETTINGS, num_learners=2)
    monkeypatch.undo()
    try:
        assert bound == []  # the driver probed nothing: rank 0 chose the port on its own node
        d = g.describe()
        assert d["backend"] == "gloo" and not d["in_driver"]
        host, port = d["rendezvous"].rsplit(":", 1)
        rank0 = d["ranks"][0]
        assert host == rank0["ip"]
        listeners = _listening_pids(int(port))
        assert rank0["pid"] in listeners and os.getpid() not in listeners  # rank 0's store, not the driver's
        w = g.weights()
        assert w.keys() == make_policy().state_dict().keys()
    finally:
        g.shutdown()


def test_custom_resources_are_checked_naming_the_key():
    with pytest.raises(ValueError, match=r"rollout\.resources\.rollout_node: expected an amount >= 0"):
        RolloutConfig(resources={"rollout_node": -1})
    with pytest.raises(ValueError, match="learner_resources: expected"):
        TrainConfig(learner_resources={"learner_node": "two"})
    cfg = TrainConfig(learner_resources={"learner_node": 1}, rollout=RolloutConfig(resources={"rollout_node": 0.5}))
    assert cfg.learner_resources == {"learner_node": 1} and cfg.rollout.resources == {"rollout_node": 0.5}
