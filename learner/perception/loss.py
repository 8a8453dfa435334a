"""The loss of stage perception: weighted BCE on the maps, L1 on velocity, over visible cells."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from learner.perception.cache import FrameCache


def perception_loss(out: torch.Tensor, batch: Mapping[str, torch.Tensor], visible: torch.Tensor, pos_weight, vel_w):
    """(loss, terms): BCE on occupancy, drivable and lane (positive classes weighted by ``pos_weight``
    [3]) and L1 on velocity over occupied cells, all over visible cells [G, G] only."""
    vis = visible.to(out.dtype)[None]  # [1, G, G]
    n_vis = vis.sum() * out.shape[0]
    terms = {}
    for i, (ch, key) in enumerate(((0, "occupancy"), (3, "drivable"), (4, "lane"))):
        target = batch[key].float()
        bce = F.binary_cross_entropy_with_logits(out[:, ch], target, pos_weight=pos_weight[i], reduction="none")
        terms[key] = (bce * vis).sum() / n_vis
    occ = batch["occupancy"].float() * vis  # [B, G, G]
    err = (out[:, 1:3] - batch["velocity"]).abs().sum(1)  # [B, G, G] m/s
    terms["velocity"] = (err * occ).sum() / occ.sum().clamp_min(1.0)
    loss = terms["occupancy"] + terms["drivable"] + terms["lane"] + vel_w * terms["velocity"]
    return loss, {k: float(v.detach()) for k, v in terms.items()}


def positive_weights(train: FrameCache, cap: float) -> torch.Tensor:
    """[3] negatives / positives over visible cells of occupancy, drivable and lane, each at most ``cap``."""
    vis = train.visible[None]
    out = []
    for key in ("occupancy", "drivable", "lane"):
        pos = float((train.arrays[key].astype(bool) & vis).sum())
        tot = float(vis.sum() * len(train))
        out.append(min(cap, (tot - pos) / max(pos, 1.0)))
    return torch.tensor(out, dtype=torch.float32)
