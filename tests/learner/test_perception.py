"""Stage perception: BEV labels by hand, the rig's visible cells, the frame cache (rendered once, checksummed,
re-rendered when a shard is corrupt, bounded), the metrics by hand, the encoder hand-over, and training that
checkpoints every epoch and resumes (a finished stage is not trained again)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from envs.scenario_data import ScenarioData
from learner.config import PerceptionConfig
from learner.perception import (
    ENCODER_PREFIX,
    BEVGrid,
    FrameCache,
    PerceptionNet,
    bev_labels,
    frame_plan,
    perception_metrics,
    plot_curve,
    train_perception,
    visible_cells,
    with_encoder,
)
from learner.perception.stage import val_words
from policy.network import ActorCritic, PolicyConfig, example_observation_space, policy_changes
from scenarios import save
from scenarios.actions import ActionSpec
from sim.camera import make_rig
from sim.configs import ConfigError, to_dict
from store import CheckpointStore
from tests.envs.handmade import straight_scenario

SMALL = PolicyConfig(cnn_channels=(8, 16), cnn_kernels=(3, 3), embed_dim=32, hidden_dim=64)
ENV = {"resolution": (32, 16), "render_backend": "cpu"}
CFG = PerceptionConfig(epochs=2, batch_size=8, cells=16, shard_frames=4, jitter_m=0.5, jitter_deg=5.0)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("perception_suite")
    save(straight_scenario(d, sid="plain", horizon=10), d / "plain.json")
    save(straight_scenario(d, sid="lead", horizon=10, lead_gap=8.0, lead_speed=5.0), d / "lead.json")
    return d


def _cell_overlaps_box(cx, cy, h, bx, by, L, W) -> bool:
    """An axis-aligned square cell (centre cx, cy, half side h) against an axis-aligned box: by hand."""
    return abs(cx - bx) <= h + L / 2 and abs(cy - by) <= h + W / 2


def test_labels_by_hand(tmp_path):
    """Ego at the start of the lead scenario: the lead car (4.5 x 1.9 m, 5 m/s) is 16.05 m ahead; lanes
    (3.5 m wide) at y = 0 and y = 3.5. Turned by 90 degrees, the same world is seen rotated."""
    sc = straight_scenario(tmp_path, sid="lead", horizon=10, lead_gap=10.0, lead_speed=5.0)
    d = ScenarioData(sc, None, ActionSpec())
    grid = BEVGrid(cells=20, range_m=40.0, behind_m=4.0)  # 2 m cells
    lab = bev_labels(d, 0, (0.0, 0.0, 0.0), grid)
    xs, ys = grid.centres()
    h = grid.cell_m / 2
    for i, cx in enumerate(xs):
        for j, cy in enumerate(ys):
            occ = _cell_overlaps_box(cx, cy, h, 16.05, 0.0, 4.5, 1.9)
            assert lab["occupancy"][i, j] == occ, (cx, cy)
            assert lab["velocity"][:, i, j].tolist() == ([5.0, 0.0] if occ else [0.0, 0.0])
            assert lab["drivable"][i, j] == (abs(cy) <= 1.75 or abs(cy - 3.5) <= 1.75)
            assert lab["lane"][i, j] == (min(abs(cy), abs(cy - 3.5)) <= 0.75)
    assert lab["occupancy"].sum() > 0 and lab["occupancy"].dtype == np.uint8
    # the ego turned left by 90 degrees at (16, -10): the lead is 10 m ahead, its velocity to the right
    lab = bev_labels(d, 0, (16.05, -10.0, math.pi / 2), grid)
    for i, cx in enumerate(xs):
        for j, cy in enumerate(ys):
            occ = _cell_overlaps_box(cx, cy, h, 10.0, 0.0, 1.9, 4.5)  # the box across the ego's x axis
            assert lab["occupancy"][i, j] == occ
            if occ:
                np.testing.assert_allclose(lab["velocity"][:, i, j], [0.0, -5.0], atol=1e-5)
    # at step 4 the lead has moved 2 m on
    lab4 = bev_labels(d, 4, (0.0, 0.0, 0.0), grid)
    assert lab4["occupancy"][int((18.05 + 4.0) // 2), 10] == 1


def test_visible_cells_of_the_front_rig():
    grid = BEVGrid(cells=32, range_m=40.0, behind_m=4.0)
    vis = visible_cells(grid, make_rig("front3", 128, 64))
    xs, ys = grid.centres()
    i_ahead, j_mid = int(np.argmin(np.abs(xs - 20.0))), int(np.argmin(np.abs(ys)))
    assert vis[i_ahead, j_mid] and vis[i_ahead, 0] and vis[i_ahead, -1]  # ahead, and far to both sides
    assert not vis[xs < 1.0].any()  # at and behind the cameras (mounted 1.5 m ahead of the rear axle)
    full = visible_cells(grid, make_rig("surround6", 128, 64))
    assert full.sum() > vis.sum() and full[0, j_mid]  # the rear cameras see behind


def test_frame_cache_renders_once_checks_and_repairs(tmp_path, suite, caplog):
    cache = FrameCache.build(str(suite), ENV, CFG, 3, name="t", root=tmp_path)
    # 2 clips x steps 0, 3, 6, 9 = 8 frames in 2 shards of 4
    assert len(cache) == 8 and cache.rendered == 8 and len(cache.index["shards"]) == 2
    a = cache.arrays
    assert a["cameras"].shape == (8, 3, 16, 32, 3) and a["cameras"].dtype == np.uint8 and a["cameras"].any()
    assert a["occupancy"].shape == (8, 16, 16) and a["velocity"].shape == (8, 2, 16, 16)
    assert sorted(a["step"].tolist()) == [0, 0, 3, 3, 6, 6, 9, 9] and cache.kinds == ["lane_keep_straight"]
    again = FrameCache.build(str(suite), ENV, CFG, 3, name="t", root=tmp_path)
    assert again.rendered == 0 and again.folder == cache.folder
    for k in a:
        np.testing.assert_array_equal(again.arrays[k], a[k])
    # a corrupt shard (one byte changed) fails its sha256 and is rendered again -- the same frames
    shard = cache.folder / "shard-00001.npz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    repaired = FrameCache.build(str(suite), ENV, CFG, 3, name="t", root=tmp_path)
    assert repaired.rendered == 4 and "fails its checksum" in caplog.text
    for k in a:
        np.testing.assert_array_equal(repaired.arrays[k], a[k])
    # another setting (jitter) is another cache
    other = FrameCache.build(str(suite), ENV, PerceptionConfig(**{**CFG.__dict__, "jitter_m": 0.0}), 3, root=tmp_path)
    assert other.folder != cache.folder and other.rendered == 8


def test_an_interrupted_repair_keeps_the_intact_shards_ahead(tmp_path, suite):
    cache = FrameCache.build(str(suite), ENV, CFG, 1, name="i", root=tmp_path)  # 2 clips x 10 steps: 5 shards
    assert cache.rendered == 20 and len(cache.index["shards"]) == 5
    (cache.folder / "shard-00001.npz").unlink()

    def stop(msg):
        raise KeyboardInterrupt(msg)

    with pytest.raises(KeyboardInterrupt, match="shard 2/5 rendered"):
        FrameCache.build(str(suite), ENV, CFG, 1, name="i", root=tmp_path, progress=stop)
    # shards 0, 2, 3, 4 are intact and still listed: at most the interrupted shard is rendered again
    again = FrameCache.build(str(suite), ENV, CFG, 1, name="i", root=tmp_path)
    assert again.rendered <= 4 and len(again.index["shards"]) == 5
    for k in cache.arrays:
        np.testing.assert_array_equal(again.arrays[k], cache.arrays[k])


def test_frame_cache_is_bounded(tmp_path, suite, caplog):
    per_frame = 3 * 16 * 32 * 3 + 11 * 16 * 16 + 24  # bytes: images and labels
    cfg = PerceptionConfig(**{**CFG.__dict__, "cache_mb": 5.5 * per_frame / 2**20})
    cache = FrameCache.build(str(suite), ENV, cfg, 1, name="capped", root=tmp_path)
    assert len(cache) == 5 and "keeping an evenly spaced 5" in caplog.text  # of 2 x 10 planned
    assert set(cache.arrays["scenario"].tolist()) == {0, 1}  # spread over the clips, not the first one


def test_frame_plan_by_hand():
    """frames over clips: each clip frames // N, the rest to clips spread evenly; clip k's m frames one in each
    m-th of its horizon from phase frac(k * 0.618...); every > 0: every N-th step of each clip."""
    # 6 frames over 4 clips of 10 steps: 1 each, the other 2 to clips 0 and 2 (floor(i * 4 / 2), i < 2)
    # clip 0 phase 0: steps floor(0 * 5), floor(1 * 5); clip 1 phase 0.618: floor(6.18); clip 2 phase 0.236:
    # floor(1.18), floor(6.18); clip 3 phase 0.854: floor(8.54)
    assert frame_plan([10] * 4, frames=6) == [(0, 0), (0, 5), (1, 6), (2, 1), (2, 6), (3, 8)]
    # fewer frames than clips: one each to clips floor(i * 5 / 2) = 0, 2 (phase 0.236: step 2)
    assert frame_plan([10] * 5, frames=2) == [(0, 0), (2, 2)]
    # more frames than steps: every step, once
    assert frame_plan([3, 2], frames=10) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert frame_plan([10, 7], every=3) == [(0, 0), (0, 3), (0, 6), (0, 9), (1, 0), (1, 3), (1, 6)]
    with pytest.raises(ValueError, match="frames >= 1 or every >= 1"):
        frame_plan([10], frames=0)
    # the built-in train's size: 2 frames from every one of 1,008 clips, at two steps 40 apart, and over all
    # clips the steps fill the 80-step horizon evenly (each 8-step tenth of it holds a tenth of the frames)
    plan = frame_plan([80] * 1008, frames=2016)
    per_clip: dict[int, list[int]] = {}
    for k, t in plan:
        per_clip.setdefault(k, []).append(t)
    assert len(plan) == 2016 and sorted(per_clip) == list(range(1008))
    assert all(len(ts) == 2 and ts[1] - ts[0] == 40 for ts in per_clip.values())
    tenths = np.bincount([t // 8 for _, t in plan], minlength=10)
    assert tenths.min() >= 190 and tenths.max() <= 214, tenths  # 201.6 each, within 6 %


def test_frame_cache_draws_frames_over_the_clips(tmp_path, suite):
    """perception.frames: 5 frames over the 2 clips of 10 steps -- 3 from clip 0 (phase 0: steps 0, 3, 6),
    2 from clip 1 (phase 0.618: floor(3.09), floor(8.09)); another count is another cache."""
    cache = FrameCache.build(str(suite), ENV, CFG, frames=5, name="drawn", root=tmp_path)
    got = sorted(zip(cache.arrays["scenario"].tolist(), cache.arrays["step"].tolist(), strict=True))
    assert got == [(0, 0), (0, 3), (0, 6), (1, 3), (1, 8)] and cache.rendered == 5
    assert FrameCache.build(str(suite), ENV, CFG, frames=5, name="drawn", root=tmp_path).rendered == 0
    other = FrameCache.build(str(suite), ENV, CFG, frames=4, name="drawn", root=tmp_path)
    assert other.folder != cache.folder and len(other) == 4
    for every, frames in ((0, 0), (2, 5)):
        with pytest.raises(ValueError, match="give frames > 0 or every > 0"):
            FrameCache.build(str(suite), ENV, CFG, every, frames=frames, root=tmp_path)
    with pytest.raises(ValueError, match=r"perception.frames: expected >= 1, got 0"):
        PerceptionConfig(frames=0)
    with pytest.raises(ValueError, match=r"perception.every: expected >= 0"):
        PerceptionConfig(every=-1)


def test_metrics_by_hand():
    G = 4
    occ = np.zeros((1, G, G), np.uint8)
    occ[0, 1, 1:3] = 1  # two occupied cells
    pred = np.zeros((1, 5, G, G), np.float32)
    pred[0, 0, 1, 2:4] = 0.9  # one hit, one false alarm, one miss: IoU 1 / 3
    pred[0, 1, 1, 1:3] = (3.0, 1.0)  # vx on the two occupied cells
    vel = np.zeros((1, 2, G, G), np.float32)
    vel[0, 0, 1, 1:3] = (3.0, 5.0)  # errors 0 and 4 m/s
    drv = np.ones((1, G, G), np.uint8)
    pred[0, 3] = 0.8  # all drivable: IoU 1
    labels = {"occupancy": occ, "velocity": vel, "drivable": drv, "lane": np.zeros((1, G, G), np.uint8)}
    m = perception_metrics(pred, labels, np.ones((G, G), bool))
    assert m["occupancy_iou"] == pytest.approx(1 / 3) and m["velocity_error"] == pytest.approx(2.0)
    assert m["drivable_iou"] == 1.0 and math.isnan(m["lane_iou"])  # no lane anywhere: undefined
    # invisible cells are left out: hiding the false alarm's cell gives IoU 1 / 2
    vis = np.ones((G, G), bool)
    vis[1, 3] = False
    assert perception_metrics(pred, labels, vis)["occupancy_iou"] == pytest.approx(1 / 2)
    # at threshold 0.95 nothing is occupied (IoU 0); drivable at 0.85 nothing either
    m = perception_metrics(pred, labels, np.ones((G, G), bool), {"occupancy": 0.95, "drivable": 0.85})
    assert m["occupancy_iou"] == 0.0 and m["drivable_iou"] == 0.0


def test_velocity_error_split_by_detection_speed_and_distance_by_hand():
    from learner.perception.metrics import metrics_table, velocity_breakdown

    G = 4
    occ = np.zeros((1, G, G), np.uint8)
    occ[0, 0, 0] = occ[0, 2, 1] = occ[0, 3, 3] = 1  # three agents' cells, in rows 0, 2 and 3
    vel = np.zeros((1, 2, G, G), np.float32)
    vel[0, :, 2, 1] = (3.0, 4.0)  # 5 m/s
    vel[0, 0, 3, 3] = 12.0  # 12 m/s; the row-0 agent stands still
    pred = np.zeros((1, 5, G, G), np.float32)
    pred[0, 0, 2, 1] = pred[0, 0, 3, 3] = 0.8  # marked occupied there, not in row 0
    pred[0, 1:3, 0, 0] = (0.0, 2.0)  # errors: row 0: 2, row 2: 5 (predicts 0), row 3: |9 - 12| = 3
    pred[0, 1, 3, 3] = 9.0
    x_m = np.array([-2.0, 8.0, 18.0, 35.0])  # the rows' distance ahead
    labels = {"occupancy": occ, "velocity": vel}
    v = velocity_breakdown(pred, labels, np.ones((G, G), bool), x_m, threshold=0.5)
    assert v["detected"] == dict(cells=2, share=pytest.approx(2 / 3), error=pytest.approx(4.0), error_share=0.8)
    assert v["missed"] == dict(cells=1, share=pytest.approx(1 / 3), error=pytest.approx(2.0), error_share=0.2)
    assert list(v["by_speed"]) == ["< 0.5 m/s", "0.5-5 m/s", "5-10 m/s", ">= 10 m/s"]
    assert [p["cells"] for p in v["by_speed"].values()] == [1, 0, 1, 1]  # 5 m/s is the 5-10 bin's
    assert math.isnan(v["by_speed"]["0.5-5 m/s"]["error"]) and v["by_speed"][">= 10 m/s"]["error"] == 3.0
    assert [p["cells"] for p in v["by_ahead"].values()] == [1, 1, 0, 1]  # -2 m, 18 m, 35 m
    assert v["by_ahead"][">= 30 m"]["error_share"] == pytest.approx(0.3)
    # the overall error is what perception_metrics says: (2 + 5 + 3) / 3
    total = perception_metrics(pred, {**labels, "drivable": occ, "lane": occ}, np.ones((G, G), bool))
    assert total["velocity_error"] == pytest.approx(10 / 3)
    # a cell no camera sees is left out, as everywhere
    vis = np.ones((G, G), bool)
    vis[3, 3] = False
    assert velocity_breakdown(pred, labels, vis, x_m)["detected"]["cells"] == 1
    row = {"frames": 1, "velocity_error": 10 / 3}
    text = metrics_table({"all": row, "velocity": v})
    assert "in cells marked occupied (at 0.50): 4.000 m/s (67% of the occupied cells), missed: 2.000 m/s" in text
    # no occupied cell: every part is empty (nan), and so is what a stored run gives back (JSON turns nan into
    # null): both read "n/a"
    empty = velocity_breakdown(pred, {**labels, "occupancy": np.zeros_like(occ)}, np.ones((G, G), bool), x_m)
    assert empty["detected"]["cells"] == 0 and math.isnan(empty["detected"]["error"])
    stored = json.loads(json.dumps(empty).replace("NaN", "null"))
    for v_ in (empty, stored):
        assert "(at 0.50): n/a m/s (n/a of the occupied cells), missed: n/a m/s" in metrics_table(
            {"all": row, "velocity": v_}
        )


def test_thresholds_chosen_by_iou():
    from learner.perception.metrics import choose_thresholds

    G = 4
    occ = np.zeros((1, G, G), np.uint8)
    occ[0, 0, :2] = 1  # two occupied cells, scored 0.92 and 0.62; two free cells scored 0.72 and 0.32
    pred = np.zeros((1, 5, G, G), np.float32)
    pred[0, 0, 0, :4] = (0.92, 0.62, 0.72, 0.32)
    pred[0, 3] = 0.4  # drivable everywhere: any threshold below 0.4 gives IoU 1
    labels = {"occupancy": occ, "drivable": np.ones((1, G, G), np.uint8), "lane": np.zeros((1, G, G), np.uint8)}
    # by hand: t < 0.32: 2/4; 0.32 <= t < 0.62: 2/3; 0.62 <= t < 0.72: 1/3 ... best 2/3 from 0.35 (the grid's)
    t = choose_thresholds(pred, labels, np.ones((G, G), bool))
    assert t == {"occupancy": 0.35, "drivable": 0.05, "lane": 0.05}  # lane: IoU undefined everywhere, the lowest


def test_positive_weights_and_the_learning_rate_by_hand():
    from learner.perception.loss import positive_weights
    from learner.perception.stage import lr_at

    G = 4
    occ = np.zeros((2, G, G), np.uint8)
    occ[0, 0, 0] = 1  # 1 occupied of 2 x 12 visible cells: 23 negatives per positive
    occ[1, 3, 3] = 1  # ... and one the rig cannot see: not counted
    vis = np.ones((G, G), bool)
    vis[2:, 2:] = False  # 12 visible cells
    drv = np.ones((2, G, G), np.uint8)  # all drivable: 0 negatives per positive
    lane = np.zeros((2, G, G), np.uint8)
    lane[:, 0, :2] = 1  # 4 of 24: 5 negatives per positive
    arrays = {"occupancy": occ, "drivable": drv, "lane": lane}
    cache = type("Frames", (), {"visible": vis, "arrays": arrays, "__len__": lambda self: 2})()  # FrameCache's view
    assert positive_weights(cache, 30.0).tolist() == pytest.approx([23.0, 0.0, 5.0])
    assert positive_weights(cache, 3.0).tolist() == pytest.approx([3.0, 0.0, 3.0])
    cfg = PerceptionConfig(epochs=4, lr=1e-3, lr_final_fraction=0.2)
    assert [lr_at(cfg, e) for e in (0, 2, 4, 9)] == pytest.approx([1e-3, 0.6e-3, 0.2e-3, 0.2e-3])
    assert lr_at(PerceptionConfig(lr=5e-4), 3.5) == 5e-4  # the default: constant
    for bad in (dict(pos_weight_cap=0.5), dict(lr_final_fraction=0.0)):
        with pytest.raises(ValueError, match="perception"):
            PerceptionConfig(**bad)


def test_the_encoder_goes_into_the_policy():
    space = example_observation_space(3, 16, 32, parts=("cameras", "ego", "navigation", "command"))
    policy = ActorCritic(space, ActionSpec(), SMALL)
    net = PerceptionNet(3, 16, 32, SMALL, 16)
    merged = with_encoder(policy.state_dict(), net.encoder_weights())
    policy.load_state_dict(merged)
    for k, v in net.encoder.state_dict().items():
        assert torch.equal(policy.state_dict()[ENCODER_PREFIX + k], v)
    other = PerceptionNet(3, 16, 32, PolicyConfig(cnn_channels=(8, 8), cnn_kernels=(3, 3), embed_dim=32), 16)
    with pytest.raises(ValueError, match=r"perception encoder does not fit the policy: encoders\.cameras"):
        with_encoder(policy.state_dict(), other.encoder_weights())


def test_training_learns_checkpoints_and_resumes(tmp_path, suite):
    """Loss falls over epochs; a stage stopped after epoch 1 resumes at epoch 2 with the same result as an
    uninterrupted run; a finished stage is loaded, not trained again."""
    torch.set_num_threads(1)
    frames = FrameCache.build(str(suite), ENV, CFG, 1, name="train", root=tmp_path)
    cfg4 = PerceptionConfig(**{**CFG.__dict__, "epochs": 4})
    whole = train_perception(cfg4, SMALL, frames, frames, seed=1)
    losses = [h["loss"] for h in whole.history]
    assert losses[-1] < losses[0] and len(losses) == 4
    assert set(whole.metrics["by_kind"]) == {"lane_keep_straight"} and whole.metrics["all"]["frames"] == 20
    # thresholds chosen on the training frames (here also val): 0.5 is on their grid, so never worse there
    assert set(whole.metrics["thresholds"]) == {"occupancy", "drivable", "lane"}
    for name in ("occupancy", "drivable"):
        assert whole.metrics["all"][f"{name}_iou_cal"] >= whole.metrics["all"][f"{name}_iou"]
    v = whole.metrics["velocity"]  # the velocity error's split, at the calibrated occupancy threshold
    assert v["threshold"] == whole.metrics["thresholds"]["occupancy"]
    assert v["detected"]["cells"] + v["missed"]["cells"] == sum(p["cells"] for p in v["by_ahead"].values()) > 0
    rs = CheckpointStore(tmp_path / "store").run("r-perception")
    half = train_perception(
        PerceptionConfig(**{**CFG.__dict__, "epochs": 2}), SMALL, frames, frames, seed=1, run_store=rs
    )
    assert rs.versions() == [1, 2] and not half.resumed_done
    resumed = train_perception(cfg4, SMALL, frames, frames, seed=1, run_store=rs)
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3, 4]
    for a, b in zip(resumed.history, whole.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for k, v in whole.encoder.items():
        torch.testing.assert_close(resumed.encoder[k], v, rtol=1e-5, atol=1e-6)
    latest = rs.latest()
    done = train_perception(cfg4, SMALL, frames, frames, seed=1, run_store=rs)
    assert done.resumed_done and rs.latest() == latest and done.metrics["all"]["frames"] == 20
    for k, v in resumed.encoder.items():
        assert torch.equal(done.encoder[k], v)
    # a perception run of another encoder is refused, naming what differs (not torch's missing keys)
    other = dataclasses.replace(SMALL, cnn_channels=(4, 16))
    with pytest.raises(ConfigError, match=r"another encoder \(policy.cnn_channels: \[8, 16\] -> \[4, 16\]\)"):
        train_perception(cfg4, other, frames, frames, seed=1, run_store=rs)
    assert rs.latest() == latest


def test_the_val_curve_scores_every_epoch_and_changes_nothing_trained(tmp_path, suite):
    """With ``val_curve`` every epoch's row holds its val point, the last one the stage's own metrics; without it
    only the last epoch is scored. Scoring in between trains exactly the same encoder."""
    torch.set_num_threads(1)
    frames = FrameCache.build(str(suite), ENV, CFG, 1, name="train", root=tmp_path)
    cfg3 = PerceptionConfig(**{**CFG.__dict__, "epochs": 3})
    rows: list = []
    curve = train_perception(cfg3, SMALL, frames, frames, seed=2, on_epoch=lambda e, row: rows.append((e, row)))
    plain = train_perception(dataclasses.replace(cfg3, val_curve=False), SMALL, frames, frames, seed=2)
    assert [e for e, _ in rows] == [1, 2, 3] and [r for _, r in rows] == curve.history
    keys = {f"val_{k}" for k in ("occupancy_iou", "occupancy_iou_cal", "velocity_error", "drivable_iou", "lane_iou")}
    assert all(keys <= set(r) for r in curve.history)
    last = curve.metrics["all"]
    assert curve.history[-1]["val_velocity_error"] == last["velocity_error"]
    assert curve.history[-1]["val_occupancy_iou_cal"] == last["occupancy_iou_cal"]
    assert [keys & set(r) for r in plain.history] == [set(), set(), keys]
    for a, b in zip(curve.history, plain.history):
        assert a["loss"] == b["loss"]
    for k, v in plain.encoder.items():
        assert torch.equal(curve.encoder[k], v)
    assert val_words(curve.history[0]).startswith(" | val: occupancy IoU ") and val_words(plain.history[0]) == ""
    assert "n/a" in val_words({"val_velocity_error": None, "val_occupancy_iou": 0.25})
    assert plot_curve(curve.history, tmp_path / "c" / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert plot_curve(plain.history, tmp_path / "plain.png") is None and not (tmp_path / "plain.png").exists()


def test_a_perception_checkpoint_from_before_lift_backbone_means_the_small_cnn():
    lift = PolicyConfig(camera_encoder="lift", embed_dim=32)
    saved = {k: v for k, v in to_dict(lift).items() if k != "lift_backbone"}  # written before the setting
    assert policy_changes(saved, lift) == []
    deep = dataclasses.replace(lift, lift_backbone="deep")
    assert policy_changes(saved, deep) == ["policy.lift_backbone: 'small' -> 'deep'"]
    assert policy_changes({**saved, "lift_backbone": "deep"}, deep) == []


def test_a_perception_checkpoint_from_before_lift_bev_dilation_means_an_undilated_grid_cnn():
    lift = PolicyConfig(camera_encoder="lift", embed_dim=32)
    saved = {k: v for k, v in to_dict(lift).items() if k != "lift_bev_dilation"}  # written before the setting
    assert policy_changes(saved, lift) == []
    wide = dataclasses.replace(lift, lift_bev_dilation=(2, 4))
    assert policy_changes(saved, wide) == ["policy.lift_bev_dilation: [1, 1] -> [2, 4]"]


def test_train_help_documents_stage_perception(capsys):
    from learner.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "'perception' (the camera encoder and BEV heads" in " ".join(out.split())
    assert "perception.epochs" in out and "perception.freeze" in out and "perception+il+rl" in out
    assert "perception.frames" in out and "drawn evenly over the training clips" in " ".join(out.split())
    assert "perception.every" in out


def three_stage_config(tmp_path, suite, **over):
    """stage=perception+il+rl at test size (one DAgger round of 12 env-steps), ``over`` merged into the sections."""
    from learner.config import TrainConfig
    from sim.configs import from_dict, merge

    d = {
        "run": "three",
        "stage": "perception+il+rl",
        "store": {"uri": str(tmp_path / "store"), "checkpoint_every": 1, "keep_last": 50},
        "tracking": {"out": str(tmp_path / "out"), "tensorboard": False},
        "suite": str(suite),
        "env": dict(ENV),
        "policy": {"cnn_channels": [8, 16], "cnn_kernels": [3, 3], "embed_dim": 32, "hidden_dim": 64},
        "rollout": {"num_actors": 0, "envs_per_actor": 2, "fragment_length": 6},
        "ppo": {"epochs": 2, "minibatches": 2},
        "il": {"pretrain_iterations": 3, "steps_per_iteration": 2, "batch_size": 8, "rl_rounds": 2,
               "dagger_rounds": 1, "dagger_steps": 12, "dagger_iterations": 1},
        "eval": {"suite": str(suite), "every": 0, "num_envs": 2},
        "perception": {"epochs": 2, "every": 2, "val_every": 5, "cells": 16, "shard_frames": 8},
        "iterations": 3,
    }  # fmt: skip
    return from_dict(TrainConfig, merge(d, over))


@pytest.mark.slow
def test_three_stages_in_one_run_with_perception_frozen(tmp_path, suite, monkeypatch):
    """stage=perception+il+rl: the perception encoder goes into the policy and stays as it is through IL and
    RL (the planner trains); a rerun finds every stage done and trains nothing again."""
    from learner.perception import perception_run_name
    from learner.train import il_snapshot_name, train
    from store import bytes_to_tensors

    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path / "cache"))
    cfg = three_stage_config(tmp_path, suite)
    r = train(cfg)
    assert r.state.stage == "done" and r.state.il_iteration == 3 and r.state.iteration == 3
    assert r.state.dagger_round == 1
    # DAgger's states keep the frozen lift's grid [16, 16, 16] (half floats) in place of their images
    part = bytes_to_tensors(
        CheckpointStore(tmp_path / "store").run("three").load_latest().files["dagger-00000.safetensors"]
    )
    assert "obs.cameras" not in part and part["obs.cameras_bev"].dtype == torch.float16
    assert part["obs.cameras_bev"].shape[1:] == (16, 16, 16) and part["obs.cameras_bev"].shape[0] >= 12
    assert r.perception is not None and r.perception["metrics"]["all"]["frames"] == 4 and r.perception["epochs"] == 2
    store = CheckpointStore(tmp_path / "store")
    prs = store.run(perception_run_name("three"))
    p_versions = prs.versions()
    enc = {k: v for k, v in bytes_to_tensors(prs.load_latest().files["perception.safetensors"]).items()}
    enc = {"encoders.cameras." + k[len("encoder.") :]: v for k, v in enc.items() if k.startswith("encoder.")}
    final = bytes_to_tensors(store.run("three").load_latest().files["policy.safetensors"])
    il = bytes_to_tensors(store.run(il_snapshot_name("three")).load_latest().files["policy.safetensors"])
    reduce = "encoders.cameras.reduce."  # the lift encoder's read-out of the grid: the planner's, trained with it
    assert any(k.startswith(reduce) for k in enc)
    for k, v in enc.items():  # the encoder, as perception left it, after IL and after RL
        if not k.startswith(reduce):
            assert torch.equal(final[k], v) and torch.equal(il[k], v), k
    first = bytes_to_tensors(store.run("three").load(1).files["policy.safetensors"])  # end of stage perception
    assert first["encoders.cameras.backbone.0.0.weight"].equal(enc["encoders.cameras.backbone.0.0.weight"])
    assert not torch.equal(first[reduce + "0.0.weight"], il[reduce + "0.0.weight"])
    # ... while the planner trained, in IL and in RL
    assert not torch.equal(first["trunk.1.weight"], il["trunk.1.weight"])
    assert not torch.equal(il["trunk.1.weight"], final["trunk.1.weight"])
    assert (tmp_path / "out" / "three" / "perception.md").is_file()
    assert (tmp_path / "out" / "three" / "perception-curve.png").read_bytes().startswith(b"\x89PNG")
    curve_rows = [json.loads(line) for line in (tmp_path / "out" / "three" / "metrics.jsonl").read_text().splitlines()]
    curve_rows = [r for r in curve_rows if "perception/epoch/val_velocity_error" in r]
    assert [r["step"] for r in curve_rows] == [1, 2]  # one point an epoch in metrics.jsonl, step = epoch
    summary = json.loads((tmp_path / "out" / "three" / "summary.json").read_text())
    assert summary["perception"]["metrics"]["all"]["frames"] == 4
    # a rerun: nothing is trained again, perception's metrics are read back from its run
    r2 = train(cfg)
    assert r2.state.stage == "done" and prs.versions() == p_versions
    assert r2.perception is not None and r2.perception["metrics"]["all"]["frames"] == 4


@pytest.mark.slow
def test_a_run_resumed_from_dagger_rounds_of_images_keeps_grids_from_then_on(tmp_path, suite, monkeypatch):
    """DAgger rounds that hold images (perception not frozen, as in checkpoints written before the grids), resumed
    with the lift frozen and one round more: the resume converts the old round to grids, the new round joins it,
    and the checkpoint writes both as grids."""
    from learner.train import train
    from store import bytes_to_tensors

    monkeypatch.setenv("SPLATDRIVE_CACHE", str(tmp_path / "cache"))
    rs = CheckpointStore(tmp_path / "store").run("three")
    r = train(three_stage_config(tmp_path, suite, stage="perception+il", perception={"freeze": False}))
    assert r.state.stage == "done" and r.state.dagger_round == 1
    before = bytes_to_tensors(rs.load_latest().files["dagger-00000.safetensors"])
    assert before["obs.cameras"].dtype == torch.uint8 and "obs.cameras_bev" not in before
    r2 = train(three_stage_config(tmp_path, suite, stage="perception+il", il={"dagger_rounds": 2}))
    assert r2.state.stage == "done" and r2.state.dagger_round == 2
    files = rs.load_latest().files
    for name in ("dagger-00000.safetensors", "dagger-00001.safetensors"):
        part = bytes_to_tensors(files[name])
        assert "obs.cameras" not in part and part["obs.cameras_bev"].dtype == torch.float16, name
        assert part["obs.cameras_bev"].shape[1:] == (16, 16, 16), name
    again = bytes_to_tensors(files["dagger-00000.safetensors"])
    assert torch.equal(again["labels"], before["labels"])  # the same states, their images now grids


def test_fast_segment_distance_matches_the_reference():
    from learner.perception.labels import _segment_distance, _segment_distance_fast

    rng = np.random.default_rng(0)
    for n_seg in (1, 3, 40):
        pts = rng.uniform(-30, 30, (200, 2))
        a = rng.uniform(-30, 30, (n_seg, 2))
        b = a + rng.normal(0, 10, (n_seg, 2))
        b[0] = a[0]  # a zero-length segment is a point
        np.testing.assert_allclose(_segment_distance_fast(pts, a, b), _segment_distance(pts, a, b), atol=1e-9)
    # by hand: the segment (0, 0) -> (10, 0)
    pts = np.array([[5.0, 3.0], [-4.0, 3.0], [13.0, -4.0]])
    d = _segment_distance_fast(pts, np.zeros((1, 2)), np.array([[10.0, 0.0]]))
    np.testing.assert_allclose(d, [3.0, 5.0, 5.0])
