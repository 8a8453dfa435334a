"""Metrics of stage perception on the validation frames, overall and per kind.

Occupancy IoU, velocity error (mean |v - v*| m/s over truly occupied cells), drivable-area IoU and
lane-centre IoU, each beside the IoU of the train set's per-cell prior (what a network that ignored its
images could reach).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from learner.perception.cache import FrameCache
from learner.perception.heads import CHANNELS, PerceptionNet
from learner.perception.labels import LABEL_KEYS


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


def perception_metrics(pred: np.ndarray, labels: Mapping[str, np.ndarray], visible: np.ndarray) -> dict:
    """IoU (threshold 0.5) of occupancy, drivable area and lane centre over visible cells, pooled over
    the frames; velocity error: mean |v - v*| (vector norm, m/s) over truly occupied visible cells."""
    vis = np.broadcast_to(visible, labels["occupancy"].shape)
    occ_true = labels["occupancy"].astype(bool) & vis
    out: dict[str, Any] = dict(frames=len(pred))
    out["occupancy_iou"] = _iou((pred[:, 0] > 0.5) & vis, occ_true)
    out["drivable_iou"] = _iou((pred[:, 3] > 0.5) & vis, labels["drivable"].astype(bool) & vis)
    out["lane_iou"] = _iou((pred[:, 4] > 0.5) & vis, labels["lane"].astype(bool) & vis)
    err = np.linalg.norm(pred[:, 1:3] - labels["velocity"], axis=1)  # [N, G, G]
    out["velocity_error"] = float(err[occ_true].mean()) if occ_true.any() else math.nan
    out["occupied_cells"] = int(occ_true.sum())
    return out


def prior_prediction(train: FrameCache, n: int) -> np.ndarray:
    """[n, 5, G, G]: the train frames' per-cell label means (velocity: mean over occupied frames), the
    same for every frame: what a predictor that ignores its images does at best, per cell."""
    a = train.arrays
    occ = a["occupancy"].astype(np.float64)
    vel = (a["velocity"] * occ[:, None]).sum(0) / np.maximum(occ.sum(0), 1.0)[None]
    maps = np.stack([occ.mean(0), vel[0], vel[1], a["drivable"].mean(0), a["lane"].mean(0)]).astype(np.float32)
    return np.broadcast_to(maps, (n, *maps.shape))


def evaluate_perception(net: PerceptionNet, val: FrameCache, train: FrameCache | None = None) -> dict:
    """Metrics on ``val`` overall (``all``) and per kind (``by_kind``), each with the train prior's IoUs
    beside (``prior_*``) when ``train`` is given."""
    a = val.arrays
    pred = predict(net, a["cameras"], ego=a.get("ego"))
    prior = prior_prediction(train, len(pred)) if train is not None else None

    def block(idx: np.ndarray) -> dict:
        labels = {k: a[k][idx] for k in LABEL_KEYS}
        m = perception_metrics(pred[idx], labels, val.visible)
        if prior is not None:
            p = perception_metrics(prior[idx], labels, val.visible)
            m.update({f"prior_{k}": p[k] for k in ("occupancy_iou", "drivable_iou", "lane_iou", "velocity_error")})
        return m

    out = {"all": block(np.arange(len(pred))), "by_kind": {}}
    for i, kind in enumerate(val.kinds):
        idx = np.flatnonzero(a["kind"] == i)
        if len(idx):
            out["by_kind"][kind] = block(idx)
    return out


def metrics_table(m: Mapping[str, Any]) -> str:
    """The metrics as a markdown table (one row per kind, then all)."""
    cols: tuple[str, ...] = ("occupancy_iou", "prior_occupancy_iou", "velocity_error", "drivable_iou")
    cols = (*cols, "prior_drivable_iou", "lane_iou", "prior_lane_iou")
    lines = ["| kind | frames | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]

    def fmt(v):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"

    for kind, row in [*m.get("by_kind", {}).items(), ("all", m["all"])]:
        lines.append(f"| {kind} | {row['frames']} | " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(lines)
