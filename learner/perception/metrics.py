"""Metrics of stage perception on the validation frames, overall and per kind.

Occupancy IoU, velocity error (mean |v - v*| m/s over truly occupied cells), drivable-area IoU and
lane-centre IoU, each beside the IoU of the train set's per-cell prior (what a network that ignored its
images could reach).

The IoUs are given twice: at the threshold 0.5 (``occupancy_iou``) and at the threshold that gives the best
IoU on a subset of the *training* frames (``occupancy_iou_cal``, thresholds in ``thresholds``). The BCE
losses weight the rare positive cells up (``perception.pos_weight_cap``), which moves the network's
probabilities up, so 0.5 is not where it separates best; the calibrated figure is the operating point a
user of the maps would pick, chosen without looking at val. The prior gets the same treatment.

Where the velocity error lives (``velocity``, :func:`velocity_breakdown`): the same error split by whether
the network marks the cell occupied (at the calibrated occupancy threshold), by the agent's true speed and
by how far ahead the cell is, each part with its share of the cells and of the summed error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch

from learner.perception.cache import FrameCache
from learner.perception.heads import CHANNELS, PerceptionNet
from learner.perception.labels import LABEL_KEYS, BEVGrid


def _iou(pred: np.ndarray, true: np.ndarray) -> float:
    inter = np.logical_and(pred, true).sum()
    union = np.logical_or(pred, true).sum()
    return float(inter / union) if union else math.nan


@torch.no_grad()
def predict(net: PerceptionNet, cameras: np.ndarray, batch: int = 64, ego: np.ndarray | None = None) -> np.ndarray:
    """[N, 5, G, G] float32: sigmoid probabilities (occupancy, drivable, lane) and velocities (m/s).
    ego: [N, 2] the ego's speed and yaw rate (the cache's ``ego``), or None."""
    net.eval()
    outs = []
    for i in range(0, len(cameras), batch):
        e = None if ego is None else torch.from_numpy(np.ascontiguousarray(ego[i : i + batch]))
        o = net(torch.from_numpy(np.ascontiguousarray(cameras[i : i + batch])), e)
        o[:, [0, 3, 4]] = torch.sigmoid(o[:, [0, 3, 4]])
        outs.append(o.numpy())
    return np.concatenate(outs) if outs else np.zeros((0, len(CHANNELS), 1, 1), np.float32)


BINARY_MAPS = {"occupancy": 0, "drivable": 3, "lane": 4}  # name -> channel of the prediction
THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05, 0.10, ..., 0.95


def velocity_errors(pred: np.ndarray, labels: Mapping[str, np.ndarray], visible: np.ndarray):
    """(err [N, G, G] |v - v*| m/s (vector norm) in every cell, occupied [N, G, G] the truly occupied visible
    cells): the velocity error is err's mean over occupied."""
    occupied = labels["occupancy"].astype(bool) & np.broadcast_to(visible, labels["occupancy"].shape)
    return np.linalg.norm(pred[:, 1:3] - labels["velocity"], axis=1), occupied


def perception_metrics(
    pred: np.ndarray,
    labels: Mapping[str, np.ndarray],
    visible: np.ndarray,
    thresholds: Mapping[str, float] | None = None,
) -> dict:
    """IoU of occupancy, drivable area and lane centre over visible cells, pooled over the frames, each map
    thresholded at ``thresholds[name]`` (default 0.5); velocity error: mean |v - v*| (vector norm, m/s)
    over truly occupied visible cells."""
    vis = np.broadcast_to(visible, labels["occupancy"].shape)
    out: dict[str, Any] = dict(frames=len(pred))
    for name, ch in BINARY_MAPS.items():
        t = 0.5 if thresholds is None else float(thresholds.get(name, 0.5))
        out[f"{name}_iou"] = _iou((pred[:, ch] > t) & vis, labels[name].astype(bool) & vis)
    err, occ_true = velocity_errors(pred, labels, visible)
    out["velocity_error"] = float(err[occ_true].mean()) if occ_true.any() else math.nan
    out["occupied_cells"] = int(occ_true.sum())
    return out


SPEED_EDGES_MPS = (0.5, 5.0, 10.0)  # the agent's true speed: still, slow, 5-10, >= 10 m/s
AHEAD_EDGES_M = (10.0, 20.0, 30.0)  # the cell centre's distance ahead of the rear axle


def _bins(edges: tuple[float, ...], unit: str) -> list[tuple[str, float, float]]:
    bounds = [-math.inf, *edges, math.inf]
    names = [f"< {edges[0]:g} {unit}"]
    names += [f"{a:g}-{b:g} {unit}" for a, b in pairwise(edges)]
    names += [f">= {edges[-1]:g} {unit}"]
    return [(n, lo, hi) for n, (lo, hi) in zip(names, pairwise(bounds), strict=True)]


def velocity_breakdown(
    pred: np.ndarray, labels: Mapping[str, np.ndarray], visible: np.ndarray, x_m: np.ndarray, threshold: float = 0.5
) -> dict:
    """The velocity error (mean |v - v*| m/s over truly occupied visible cells) split three ways: ``detected``
    / ``missed`` (the network's occupancy above / not above ``threshold`` there), ``by_speed`` (the agent's
    true speed, SPEED_EDGES_MPS) and ``by_ahead`` (the cell centre's x, ``x_m`` [G] per row, AHEAD_EDGES_M).
    Each part: its cells, their share of the occupied cells, its mean error (nan when empty) and its share
    of the summed error."""
    err, occ = velocity_errors(pred, labels, visible)
    n_all, total = int(occ.sum()), float(err[occ].sum())

    def part(mask: np.ndarray) -> dict:
        m = occ & mask
        n = int(m.sum())
        return dict(
            cells=n,
            share=n / n_all if n_all else math.nan,
            error=float(err[m].mean()) if n else math.nan,
            error_share=float(err[m].sum()) / total if total > 0 else math.nan,
        )

    marked = pred[:, 0] > threshold
    speed = np.linalg.norm(labels["velocity"], axis=1)
    ahead = np.broadcast_to(np.asarray(x_m, dtype=np.float64)[None, :, None], occ.shape)
    return dict(
        threshold=float(threshold),
        detected=part(marked),
        missed=part(~marked),
        by_speed={n: part((speed >= lo) & (speed < hi)) for n, lo, hi in _bins(SPEED_EDGES_MPS, "m/s")},
        by_ahead={n: part((ahead >= lo) & (ahead < hi)) for n, lo, hi in _bins(AHEAD_EDGES_M, "m")},
    )


def choose_thresholds(
    pred: np.ndarray, labels: Mapping[str, np.ndarray], visible: np.ndarray, grid: tuple[float, ...] = THRESHOLD_GRID
) -> dict[str, float]:
    """Per binary map, the threshold in ``grid`` with the best IoU over the visible cells of (pred, labels)
    (ties: the lowest). Meant for training frames: the thresholds then apply, unchanged, to val."""
    vis = np.broadcast_to(visible, labels["occupancy"].shape)
    out = {}
    for name, ch in BINARY_MAPS.items():
        p, true = pred[:, ch][vis], labels[name].astype(bool)[vis]
        ious = [_iou(p > t, true) for t in grid]
        scores = [-1.0 if math.isnan(v) else v for v in ious]
        out[name] = float(grid[int(np.argmax(scores))])
    return out


def prior_prediction(train: FrameCache, n: int) -> np.ndarray:
    """[n, 5, G, G]: the train frames' per-cell label means (velocity: mean over occupied frames), the
    same for every frame: what a predictor that ignores its images does at best, per cell."""
    a = train.arrays
    occ = a["occupancy"].astype(np.float64)
    vel = (a["velocity"] * occ[:, None]).sum(0) / np.maximum(occ.sum(0), 1.0)[None]
    maps = np.stack([occ.mean(0), vel[0], vel[1], a["drivable"].mean(0), a["lane"].mean(0)]).astype(np.float32)
    return np.broadcast_to(maps, (n, *maps.shape))


CALIBRATION_FRAMES = 1024  # training frames (evenly spread) the thresholds are chosen on


def evaluate_perception(net: PerceptionNet, val: FrameCache, train: FrameCache | None = None) -> dict:
    """Metrics on ``val`` overall (``all``) and per kind (``by_kind``), each with the train prior's IoUs
    beside (``prior_*``) when ``train`` is given, and then also the IoUs at thresholds chosen on up to
    ``CALIBRATION_FRAMES`` training frames (``*_iou_cal``; the thresholds in ``thresholds`` and
    ``prior_thresholds``)."""
    a = val.arrays
    pred = predict(net, a["cameras"], ego=a.get("ego"))
    prior = prior_prediction(train, len(pred)) if train is not None else None
    cal: dict[str, float] | None = None
    prior_cal: dict[str, float] | None = None
    if train is not None and len(train):
        t = train.arrays
        sub = np.unique(np.linspace(0, len(train) - 1, min(len(train), CALIBRATION_FRAMES)).astype(int))
        t_labels = {k: t[k][sub] for k in LABEL_KEYS}
        t_pred = predict(net, t["cameras"][sub], ego=None if t.get("ego") is None else t["ego"][sub])
        cal = choose_thresholds(t_pred, t_labels, train.visible)
        prior_cal = choose_thresholds(prior_prediction(train, len(sub)), t_labels, train.visible)
    ious = [f"{name}_iou" for name in BINARY_MAPS]

    def block(idx: np.ndarray) -> dict:
        labels = {k: a[k][idx] for k in LABEL_KEYS}
        m = perception_metrics(pred[idx], labels, val.visible)
        if cal is not None:
            c = perception_metrics(pred[idx], labels, val.visible, cal)
            m.update({f"{k}_cal": c[k] for k in ious})
        if prior is not None:
            p = perception_metrics(prior[idx], labels, val.visible)
            m.update({f"prior_{k}": p[k] for k in (*ious, "velocity_error")})
            if prior_cal is not None:
                pc = perception_metrics(prior[idx], labels, val.visible, prior_cal)
                m.update({f"prior_{k}_cal": pc[k] for k in ious})
        return m

    out: dict[str, Any] = {"all": block(np.arange(len(pred))), "by_kind": {}}
    if cal is not None:
        out["thresholds"], out["prior_thresholds"] = cal, prior_cal
    rows_x = BEVGrid(**val.index["grid"]).centres()[0]
    labels_all = {k: a[k] for k in LABEL_KEYS}
    out["velocity"] = velocity_breakdown(pred, labels_all, val.visible, rows_x, (cal or {}).get("occupancy", 0.5))
    for i, kind in enumerate(val.kinds):
        idx = np.flatnonzero(a["kind"] == i)
        if len(idx):
            out["by_kind"][kind] = block(idx)
    return out


def fmt_number(v: Any, spec: str = ".3f") -> str:
    """``v`` formatted with ``spec``, or "n/a" when it is missing or not finite (a NaN stored in JSON comes back
    as None)."""
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def plot_curve(history: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """The stage's curves over epochs as a PNG at ``path``: the training velocity loss beside the val velocity
    error, and the val occupancy IoU at 0.5 and calibrated. None (nothing written) when fewer than two epochs
    carry a val point (``perception.val_curve`` off) or matplotlib (the viz extra) is not installed."""
    rows = [h for h in history if h.get("val_velocity_error") is not None]
    if len(rows) < 2:
        return None
    try:
        import matplotlib  # here, not at the top: optional (the viz extra), and only the picture needs it
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key: str, of: Sequence[Mapping[str, Any]]) -> tuple[list, list]:
        pts = [(h["epoch"], h[key]) for h in of if h.get(key) is not None]
        return [e for e, _ in pts], [v for _, v in pts]

    fig, (vel, occ) = plt.subplots(1, 2, figsize=(9, 3.2))
    vel.plot(*series("velocity", history), ".-", label="train: velocity loss (L1 of both components)")
    vel.plot(*series("val_velocity_error", rows), ".-", label="val: velocity error (vector)")
    vel.set_title("velocity (m/s)")
    occ.plot(*series("val_occupancy_iou", rows), ".-", label="val: at 0.5")
    occ.plot(*series("val_occupancy_iou_cal", rows), ".-", label="val: calibrated on train frames")
    occ.set_title("occupancy IoU")
    for ax in (vel, occ):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def metrics_table(m: Mapping[str, Any]) -> str:
    """The metrics as a markdown table (one row per kind, then all)."""
    cols: tuple[str, ...] = ("occupancy_iou", "prior_occupancy_iou", "velocity_error", "drivable_iou")
    cols = (*cols, "prior_drivable_iou", "lane_iou", "prior_lane_iou")
    if "occupancy_iou_cal" in m["all"]:
        cols = (*cols, "occupancy_iou_cal", "prior_occupancy_iou_cal", "drivable_iou_cal", "lane_iou_cal")
    lines = ["| kind | frames | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]

    for kind, row in [*m.get("by_kind", {}).items(), ("all", m["all"])]:
        lines.append(f"| {kind} | {row['frames']} | " + " | ".join(fmt_number(row.get(c)) for c in cols) + " |")
    if m.get("thresholds"):
        chosen = ", ".join(f"{k} {v:.2f}" for k, v in m["thresholds"].items())
        prior = ", ".join(f"{k} {v:.2f}" for k, v in (m.get("prior_thresholds") or {}).items())
        lines += [
            "",
            f"*_cal: at the thresholds with the best IoU on training frames ({chosen}; the prior's: {prior}).",
        ]
    v = m.get("velocity")
    if v:

        def parts(d: Mapping[str, Mapping]) -> str:
            return "; ".join(
                f"{k} {fmt_number(p['error'])} m/s ({fmt_number(p['share'], '.0%')} of cells)" for k, p in d.items()
            )

        lines += [
            "",
            f"Velocity error (all kinds) in cells marked occupied (at {v['threshold']:.2f}): "
            f"{fmt_number(v['detected']['error'])} m/s ({fmt_number(v['detected']['share'], '.0%')} of the occupied "
            "cells), missed: "
            f"{fmt_number(v['missed']['error'])} m/s. By the agent's speed: {parts(v['by_speed'])}. By the distance "
            f"ahead: {parts(v['by_ahead'])}.",
        ]
    return "\n".join(lines)
