"""The camera rig of a checkpoint that leaves it to the scenarios, read from its training suite: any suite spec
(a built-in suite's prefix such as ``train:300`` too), generating only the shard that holds the first scenario,
and nothing at all when the rig is only described."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from envs.config import EnvConfig
from policy.errors import PolicySourceError
from policy.rebuild import guess_rig, rebuild_obs_space
from scenarios import builtin, generation
from scenarios.format import RigSpec
from scenarios.io import save
from tests.envs.handmade import straight_scenario


@pytest.fixture
def fake_builtin(tmp_path, monkeypatch) -> list:
    """An empty cache where a built-in shard is one hand-made scenario on a surround6 rig at 48 x 24 (not the
    default front3 at 128 x 64, so the rig can only come from the scenario); returns the shards generated."""
    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path / "cache"))
    for var in (builtin.PER_KIND_VAR, builtin.GAUSSIANS_VAR, builtin.LOCK_TIMEOUT_VAR):
        monkeypatch.delenv(var, raising=False)
    calls: list = []

    def generate(out, suite, count, seed, kinds, gaussians, **kw):
        calls.append((suite, count, seed))
        out = Path(out)
        sc = straight_scenario(out, sid=f"{suite}-s{seed}", horizon=5, n_ground=200)
        sc = dataclasses.replace(sc, rig=RigSpec("surround6", 48, 24))
        save(sc, out / f"{sc.id}.json")
        (out / "suite.yaml").write_text(yaml.safe_dump({"scenarios": [{"id": sc.id}]}))
        return []

    monkeypatch.setattr(generation, "generate_suite", generate)
    return calls


def test_the_rig_of_a_builtin_suite_prefix(fake_builtin):
    env_cfg = EnvConfig.from_dict({"observation": "camera"})  # rig and resolution left to the scenarios
    config = {"suite": "train:300"}  # a prefix: 3 shards of 112 hold it, the first scenario is in shard 0
    space, rig = rebuild_obs_space(env_cfg, config, "checkpoint x")
    assert rig == {"name": "surround6", "width": 48, "height": 24}
    assert space["cameras"].shape == (6, 24, 48, 3)
    assert fake_builtin == [("train", 112, 0)]  # only the shard that holds the first scenario
    # described only (obs_space.json without a rig): the name from the suite, the size from the space
    assert guess_rig(space, env_cfg, config) == {"name": "surround6", "width": 48, "height": 24}
    assert guess_rig(space, env_cfg, {"suite": "val:3"}) is None and len(fake_builtin) == 1  # val not built
    # the env config's suite when the run's config has none
    env_val = EnvConfig.from_dict({"observation": "camera", "suite": "val:3"})
    assert rebuild_obs_space(env_val, {}, "checkpoint y")[1] == {"name": "surround6", "width": 48, "height": 24}
    assert fake_builtin[-1] == ("val", 70, 0)
    for bad in ("train:0", "nowhere:5"):
        with pytest.raises(PolicySourceError, match=rf"checkpoint z: .* {bad}: no such folder or file, nor a built-in"):
            rebuild_obs_space(env_cfg, {"suite": bad}, "checkpoint z")
