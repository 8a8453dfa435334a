"""DAgger's data (aggregation with a cap, the checkpoint round trip) and the choice of a run's final policy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.dagger import BestOfLast, Labelled, from_bytes, is_dagger_file, memory_plan, state_bytes, to_bytes
from learner.learner import DemoParts, Demos


def demos(first: int, n: int) -> Demos:
    """n states whose ego part and labels count up from ``first`` (so which ones were kept can be read off)."""
    idx = torch.arange(first, first + n)
    return Demos({"ego": idx[:, None].float().repeat(1, 6)}, torch.stack([idx, idx + 1], 1))


def test_labelled_keeps_the_newest_up_to_the_cap_one_part_a_round():
    a = Labelled()
    a.add(demos(0, 5), cap=8)
    assert len(a) == 5
    a.add(demos(5, 5), cap=8)  # 10 states, 8 kept: 2..9, the first round cut, the second whole
    assert [len(r) for r in a.rounds] == [3, 5]
    everything = a.data().take(torch.arange(len(a)))
    assert everything.labels[:, 0].tolist() == list(range(2, 10)) and everything.obs["ego"][:, 0].tolist() == list(
        range(2, 10)
    )
    a.add(demos(10, 7), cap=8)  # 15 states: the first round goes whole, the second loses 4
    assert [r.labels[0, 0].item() for r in a.rounds] == [9, 10] and len(a) == 8
    with pytest.raises(ValueError, match="observation parts differ"):
        a.add(Demos({"route": torch.zeros(1, 2)}, torch.zeros(1, 2, dtype=torch.long)), cap=8)


def test_a_checkpoint_serialises_each_round_once_and_a_resume_reads_the_rounds_back(tmp_path):
    """Labelled.files: a round is bytes the first time, then a store.Reuse the store links from the version that
    holds it; from_files reads the rounds back (and the one file of older checkpoints)."""
    from store import CheckpointStore, Reuse

    rs = CheckpointStore(tmp_path / "store").run("r")
    lab = Labelled()
    lab.add(demos(0, 4), cap=100)
    first = lab.files()
    assert list(first) == ["dagger-00000.safetensors"] and isinstance(first["dagger-00000.safetensors"], bytes)
    rs.commit(first, {})
    lab.add(demos(4, 3), cap=100)
    second = lab.files()
    assert isinstance(second["dagger-00000.safetensors"], Reuse) and isinstance(
        second["dagger-00001.safetensors"], bytes
    )
    assert second["dagger-00000.safetensors"].bytes() == first["dagger-00000.safetensors"]
    rs.commit(second, {})
    on_disk = [tmp_path / f"store/r/ckpt-0000000{v}/dagger-00000.safetensors" for v in (1, 2)]
    assert on_disk[0].stat().st_ino == on_disk[1].stat().st_ino  # linked, not written again

    back = Labelled.from_files(rs.load_latest().files)
    assert back is not None and [len(r) for r in back.rounds] == [4, 3]
    assert torch.equal(back.data().take(torch.arange(7)).labels, lab.data().take(torch.arange(7)).labels)
    assert all(isinstance(f, Reuse) for f in back.files().values())  # known by content: the next one links
    back.add(demos(7, 5), cap=10)  # the cap cuts the first round: that one is new bytes again
    again = back.files()
    assert [type(f).__name__ for f in again.values()] == ["bytes", "Reuse", "bytes"]

    legacy = Labelled.from_files({"dagger.safetensors": to_bytes(demos(0, 6)), "policy.safetensors": b""})
    assert legacy is not None and len(legacy.rounds) == 1 and legacy.rounds[0].labels[:, 0].tolist() == list(range(6))
    assert Labelled.from_files({"policy.safetensors": b""}) is None
    with pytest.raises(ValueError, match="not numbered"):
        Labelled.from_files({"dagger-00001.safetensors": to_bytes(demos(0, 2))})
    assert is_dagger_file("dagger.safetensors") and is_dagger_file("dagger-00012.safetensors")
    assert not is_dagger_file("policy.safetensors")


def soft_demos(first: int, n: int) -> Demos:
    """demos(first, n) with a teacher's distributions over 3 longitudinal and 4 lateral bins."""
    d = demos(first, n)
    g = torch.Generator().manual_seed(first)
    return Demos(d.obs, d.labels % 3, (torch.rand(n, 3, generator=g), torch.rand(n, 4, generator=g)))


@pytest.mark.parametrize("second_soft", [False, True])
def test_parts_sample_as_their_concatenation_without_building_it(second_soft):
    expert = Demos(demos(0, 5).obs, demos(0, 5).labels % 3)
    labelled = soft_demos(100, 7) if second_soft else demos(100, 7)
    parts, whole = DemoParts((expert, labelled)), expert.concat(labelled)
    assert len(parts) == len(whole) == 12
    g = torch.Generator().manual_seed(0)
    for idx in (torch.randint(0, 12, (64,), generator=g), torch.tensor([11, 0, 5, 4, -1, 7]), torch.tensor([3, 1])):
        got, want = parts.take(idx), whole.take(idx)
        assert torch.equal(got.labels, want.labels) and torch.equal(got.obs["ego"], want.obs["ego"])
        assert (got.soft is None) == (want.soft is None)  # [3, 1]: only expert rows, one-hot beside the soft part
        if want.soft is not None:
            assert torch.equal(got.soft[0], want.soft[0]) and torch.equal(got.soft[1], want.soft[1])
    # by hand: rows 4 and 5 straddle the parts' boundary, -1 is the last labelled state
    assert parts.take(torch.tensor([4, 5, -1])).obs["ego"][:, 0].tolist() == [4.0, 100.0, 106.0]
    with pytest.raises(IndexError, match=r"outside 0\.\.11"):
        parts.take(torch.tensor([12]))
    with pytest.raises(ValueError, match="observation parts differ"):
        DemoParts((expert, Demos({"route": torch.zeros(1, 2)}, torch.zeros(1, 2, dtype=torch.long))))


def test_dagger_data_survive_a_checkpoint_round_trip():
    d = demos(3, 7)
    back = from_bytes(to_bytes(d))
    assert torch.equal(back.labels, d.labels) and back.labels.dtype == torch.int64
    assert torch.equal(back.obs["ego"], d.obs["ego"])


def test_best_of_last_k_by_the_metric_and_its_direction():
    w = {"x": torch.zeros(1)}
    ds = BestOfLast(3, "DS", +1.0)
    for label, score in (("a", 0.9), ("b", 0.5), ("c", 0.7), ("d", 0.6)):  # "a" falls out of the last 3
        ds.offer(label, {"DS": score}, w)
    assert [lab for lab, _, _ in ds.kept] == ["b", "c", "d"] and ds.best()[0] == "c"
    cr = BestOfLast(3, "CR", -1.0)
    for label, score in (("a", 0.2), ("b", 0.1), ("c", 0.1)):  # lower is better; a tie goes to the later one
        cr.offer(label, {"CR": score}, w)
    assert cr.best()[0] == "c"
    nan = BestOfLast(2, "DS", +1.0)
    nan.offer("a", {"DS": 0.3}, w)
    nan.offer("b", {"DS": math.nan}, w)  # an evaluation without the metric never wins
    assert nan.best()[0] == "a"
    with pytest.raises(ValueError, match="no evaluation"):
        BestOfLast(1, "DS", 1.0).best()


def test_the_starting_point_stays_a_candidate_and_loses_ties():
    w = {"x": torch.zeros(1)}
    sel = BestOfLast(2, "DS", +1.0)
    sel.offer_start("il", {"DS": 0.8}, w)
    for label, score in (("rl@1", 0.9), ("rl@2", 0.5), ("rl+il", 0.7)):  # rl@1 ages out; the start does not
        sel.offer(label, {"DS": score}, w)
    assert [lab for lab, _, _ in sel.candidates] == ["il", "rl@2", "rl+il"] and sel.best()[0] == "il"
    sel.offer("rl@4", {"DS": 0.8}, w)  # as good as the start: the trained policy
    assert sel.best()[0] == "rl@4"


def test_dagger_memory_is_planned_and_a_plan_past_the_machine_refused_before_training():
    """A camera state of the study (two frames of three 128x64 cameras, ego 4, command 3, limits 3, navigation
    5x2) is 6*64*128*3 + 4*(4+3+3+10) + 16 bytes (its two int64 labels) = 147,552 bytes; a privileged critic part
    is not the policy's and takes none. 12 rounds of 2,048: 3.63 GB, 7.25 GB with a checkpoint's bytes."""
    from gymnasium import spaces

    from sim.configs import ConfigError

    space = spaces.Dict(
        {
            "cameras": spaces.Box(0, 255, (6, 64, 128, 3), np.uint8),
            "ego": spaces.Box(-1, 1, (4,), np.float32),
            "command": spaces.Box(0, 1, (3,), np.float32),
            "limits": spaces.Box(0, 1, (3,), np.float32),
            "navigation": spaces.Box(-1, 1, (5, 2), np.float32),
            "critic_agents": spaces.Box(-1, 1, (32, 8), np.float32),
        }
    )
    assert state_bytes(space) == 147_456 + 80 + 16 == 147_552
    assert state_bytes(space, soft_bins=122) == 147_552 + 4 * 122
    line = memory_plan(space, 12, 2048, 200_000, total=16 * 2**30)  # 2 x 3.63 GB < 0.6 x 17.2 GB
    assert "24,576 labelled states of 148 KB: 3.6 GB" in line and "16 GiB" in line
    with pytest.raises(ConfigError, match=r"il\.dagger_rounds=24 x il\.dagger_steps=2048"):
        memory_plan(space, 24, 2048, 200_000, total=16 * 2**30)  # 2 x 7.25 GB > 0.6 x 17.2 GB
    assert "30,000 labelled states" in memory_plan(space, 24, 2048, 30_000, total=16 * 2**30)  # the cap holds it
    # a frozen lift's grid in place of the images (learner.dagger.as_grids): 16 x 32 x 32 half floats, 32 KB
    assert state_bytes(space, grid=(16, 32, 32)) == 16 * 32 * 32 * 2 + 80 + 16 == 32_864
    with pytest.raises(ConfigError):
        memory_plan(space, 48, 2048, 200_000, total=24 * 2**30)  # images: 2 x 14.5 GB > 0.6 x 25.8 GB
    line = memory_plan(space, 48, 2048, 200_000, total=24 * 2**30, grid=(16, 32, 32))  # 2 x 3.2 GB: fits
    assert "98,304 labelled states of 33 KB: 3.2 GB" in line
