"""Stage perception's training loop and the whole stage (both frame caches, training, metrics)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from envs.config import EnvConfig
from learner.config import PerceptionConfig
from learner.perception.cache import FrameCache
from learner.perception.checkpoint import restore_checkpoint, write_checkpoint
from learner.perception.heads import PerceptionNet
from learner.perception.labels import LABEL_KEYS
from learner.perception.loss import perception_loss, positive_weights
from learner.perception.metrics import evaluate_perception, fmt_number
from policy.network import PolicyConfig
from sim.seeding import derive_seed
from store import RunStore

log = logging.getLogger(__name__)


@dataclass
class PerceptionResult:
    """What the stage gives: the encoder under the policy's names, the val metrics, the per-epoch
    history, and the training frames/s (forward + backward, this process)."""

    encoder: dict[str, torch.Tensor]
    metrics: dict
    history: list
    frames_per_s: float
    epochs: int
    resumed_done: bool = False


def build_net(train: FrameCache, policy_cfg: PolicyConfig, cfg: PerceptionConfig) -> PerceptionNet:
    """A fresh network for ``train``'s camera rig and image size and ``cfg``'s grid."""
    _, C, H, W, _ = train.arrays["cameras"].shape
    return PerceptionNet(C, H, W, policy_cfg, cfg.cells)


def lr_at(cfg: PerceptionConfig, progress: float) -> float:
    """The learning rate after ``progress`` epochs: ``lr`` decayed linearly to ``lr * lr_final_fraction`` at
    ``epochs``."""
    return cfg.lr * (1.0 - (1.0 - cfg.lr_final_fraction) * min(1.0, progress / cfg.epochs))


def train_perception(
    cfg: PerceptionConfig,
    policy_cfg: PolicyConfig,
    train: FrameCache,
    val: FrameCache | None,
    *,
    seed: int = 0,
    run_store: RunStore | None = None,
    progress: Callable[[str], None] | None = None,
    on_epoch: Callable[[int, dict], None] | None = None,
) -> PerceptionResult:
    """Train the encoder and heads for ``cfg.epochs`` epochs on ``train`` (minibatches of
    ``cfg.batch_size``, shuffled by a generator seeded with ``derive_seed(seed, epoch)``); evaluate on ``val`` at the
    end, and with ``cfg.val_curve`` after every epoch too (``val_*`` in its history row: the curve to choose
    ``epochs`` on; scoring never changes what is trained). ``on_epoch(epoch, row)`` after each epoch. With
    ``run_store``, a checkpoint after every epoch, and a resume from its newest one (a stage already finished is
    loaded, not trained again)."""
    say = progress or (lambda msg: log.info("%s", msg))
    torch.manual_seed(seed)
    net = build_net(train, policy_cfg, cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    history: list = []
    start, fps = 0, math.nan
    if run_store is not None and run_store.latest() is not None:
        ck = run_store.load_latest()
        assert ck is not None
        meta = restore_checkpoint(ck, net, opt, policy_cfg, where=f"{run_store.uri}@{ck.version}")
        start, history = int(meta["epoch"]), list(meta.get("history", []))
        if meta.get("done") and start >= cfg.epochs:
            say(f"perception: finished earlier ({start} epochs, {run_store.uri}@{ck.version}); not trained again")
            return PerceptionResult(
                net.encoder_weights(), meta.get("metrics") or {}, history, float(meta.get("frames_per_s", math.nan)),
                start, resumed_done=True,
            )  # fmt: skip
        say(f"perception: resuming at epoch {start}/{cfg.epochs} from {run_store.uri}@{ck.version}")
    pos_weight = positive_weights(train, cfg.pos_weight_cap)
    visible = torch.from_numpy(train.visible)
    tensors = {k: torch.from_numpy(train.arrays[k]) for k in ("cameras", "ego", *LABEL_KEYS)}
    n = len(train)
    seen, busy = 0, 0.0
    for epoch in range(start, cfg.epochs):
        net.train()
        gen = torch.Generator().manual_seed(derive_seed(seed, epoch))
        perm = torch.randperm(n, generator=gen)
        sums: dict[str, float] = {}
        steps = 0
        t0 = time.perf_counter()
        for i in range(0, n, cfg.batch_size):
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, epoch + i / n)
            idx = perm[i : i + cfg.batch_size]
            batch = {k: v[idx] for k, v in tensors.items()}
            out = net(batch["cameras"], batch["ego"])
            loss, terms = perception_loss(out, batch, visible, pos_weight, cfg.velocity_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            for k, v in {"loss": float(loss.detach()), **terms}.items():
                sums[k] = sums.get(k, 0.0) + v
        dt = time.perf_counter() - t0
        seen += n
        busy += dt
        fps = seen / max(busy, 1e-9)
        row = {"epoch": epoch + 1, "seconds": dt, "frames_per_s": n / max(dt, 1e-9)}
        row.update({k: v / max(steps, 1) for k, v in sums.items()})
        done = epoch + 1 == cfg.epochs
        metrics = evaluate_perception(net, val, train) if (val is not None and (done or cfg.val_curve)) else {}
        row.update(val_point(metrics))
        history.append(row)
        say(
            f"perception epoch {epoch + 1}/{cfg.epochs} | loss {row['loss']:.3f} (occupancy {row['occupancy']:.3f}, "
            f"drivable {row['drivable']:.3f}, lane {row['lane']:.3f}, velocity {row['velocity']:.2f} m/s) | "
            f"{row['frames_per_s']:.0f} frames/s{val_words(row)}"
        )
        if on_epoch:
            on_epoch(epoch + 1, row)
        if run_store is not None:  # its metrics are the finished stage's; an earlier epoch's point is in history
            final = metrics if done else {}
            write_checkpoint(run_store, net, opt, epoch + 1, history, final, done, fps, cfg, policy_cfg, train)
        if done:
            return PerceptionResult(net.encoder_weights(), metrics, history, fps, epoch + 1)
    metrics = evaluate_perception(net, val, train) if val is not None else {}
    return PerceptionResult(net.encoder_weights(), metrics, history, fps, cfg.epochs)


VAL_POINT = ("occupancy_iou", "occupancy_iou_cal", "velocity_error", "drivable_iou", "lane_iou")


def val_point(metrics: Mapping[str, Any]) -> dict[str, float]:
    """One point of the val curve: ``val_<metric>`` for the headline metrics of ``evaluate_perception``'s output
    (empty when val was not scored)."""
    m = metrics.get("all") or {}
    return {f"val_{k}": float(m[k]) for k in VAL_POINT if k in m}


def val_words(row: Mapping[str, Any]) -> str:
    """The val point of an epoch's row for its log line ('' when the epoch was not scored on val)."""
    if "val_velocity_error" not in row:
        return ""
    cal = row.get("val_occupancy_iou_cal")
    occ = fmt_number(row.get("val_occupancy_iou"), ".3f")
    occ += f" (calibrated {fmt_number(cal, '.3f')})" if cal is not None else ""
    return f" | val: occupancy IoU {occ}, velocity error {fmt_number(row['val_velocity_error'], '.2f')} m/s"


def run_stage(
    cfg: PerceptionConfig,
    policy_cfg: PolicyConfig,
    env_config: Mapping[str, Any] | EnvConfig | None,
    train_suite,
    val_suite,
    *,
    seed: int = 0,
    run_store: RunStore | None = None,
    progress: Callable[[str], None] | None = None,
    on_epoch: Callable[[int, dict], None] | None = None,
) -> tuple[PerceptionResult, dict]:
    """The whole stage: both frame caches (built or loaded), training (or its finished checkpoint),
    metrics. Returns (result, info) with info: frames, cache folders and sizes, render frames/s."""
    say = progress or (lambda msg: log.info("%s", msg))
    t0 = time.perf_counter()
    train = FrameCache.build(
        train_suite, env_config, cfg, cfg.every, frames=0 if cfg.every else cfg.frames, name="train", seed=cfg.seed,
        progress=say,
    )  # fmt: skip
    t1 = time.perf_counter()
    val = FrameCache.build(val_suite, env_config, cfg, cfg.val_every, name="val", seed=cfg.seed, progress=say)
    t2 = time.perf_counter()
    rendered = train.rendered + val.rendered
    info = dict(
        train_frames=len(train),
        val_frames=len(val),
        cache_mb=round((train.nbytes + val.nbytes) / 2**20, 1),
        cache=[str(train.folder), str(val.folder)],
        rendered=rendered,
        render_frames_per_s=rendered / (t2 - t0) if rendered else None,
        cache_seconds=t2 - t0,
    )
    say(
        f"perception frames: {len(train)} train, {len(val)} val ({info['cache_mb']} MB; "
        f"{rendered} rendered in {t2 - t0:.0f} s, train {t1 - t0:.0f} s)"
    )
    result = train_perception(
        cfg, policy_cfg, train, val, seed=seed, run_store=run_store, progress=say, on_epoch=on_epoch
    )
    m = result.metrics.get("all") if result.metrics else None
    if m:
        say(
            f"perception on val: occupancy IoU {m['occupancy_iou']:.3f} (prior {m.get('prior_occupancy_iou', 0):.3f}), "
            f"velocity error {m['velocity_error']:.2f} m/s, drivable IoU {m['drivable_iou']:.3f} "
            f"(prior {m.get('prior_drivable_iou', 0):.3f}), lane IoU {m['lane_iou']:.3f} "
            f"(prior {m.get('prior_lane_iou', 0):.3f})"
        )
        if "occupancy_iou_cal" in m:
            t = result.metrics.get("thresholds", {})
            say(
                f"perception on val at thresholds chosen on train (occupancy {t.get('occupancy', 0):.2f}): occupancy "
                f"IoU {m['occupancy_iou_cal']:.3f} (prior {m.get('prior_occupancy_iou_cal', 0):.3f}), drivable "
                f"{m['drivable_iou_cal']:.3f}, lane {m['lane_iou_cal']:.3f}"
            )
        v = result.metrics.get("velocity")
        if v:
            top = next(reversed(v["by_speed"]))  # the top speed bin, ">= 10 m/s"
            det, miss, fast = v["detected"], v["missed"], v["by_speed"][top]
            say(
                f"velocity error {fmt_number(det['error'], '.2f')} m/s in the occupied cells it marks "
                f"({fmt_number(det['share'], '.0%')} of them), {fmt_number(miss['error'], '.2f')} in those it misses; "
                f"agents at {top} {fmt_number(fast['error'], '.2f')} ({fmt_number(fast['share'], '.0%')})"
            )
    return result, info
