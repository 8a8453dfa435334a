"""Stage perception's checkpoints: every epoch to the store run ``<run>-perception``
(``perception.safetensors``, the optimizer, ``perception.json`` with the epoch, history and metrics), the
newest two kept."""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid

import torch
from torch import nn

from learner.config import PerceptionConfig
from learner.perception.cache import FrameCache
from policy.network import PolicyConfig, policy_changes
from sim.configs import ConfigError, to_dict
from store import (
    Checkpoint,
    RunStore,
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    json_safe,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    tensors_to_bytes,
)

log = logging.getLogger(__name__)

STATE_FILE, OPT_FILE, OPT_TREE_FILE, META_FILE = (
    "perception.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "perception.json",
)


def perception_run_name(run: str, shared: str = "") -> str:
    """The store run that holds a training run's perception checkpoints: ``shared`` (``perception.run``, a run
    several training runs load) when given, else ``<run>-perception``."""
    return shared or f"{run}-perception"


def lease_owner() -> str:
    """An owner name for a store lease: host, process and a random tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def write_checkpoint(
    rs: RunStore,
    net: nn.Module,
    opt: torch.optim.Optimizer,
    epoch: int,
    history: list,
    metrics: dict,
    done: bool,
    fps: float,
    cfg: PerceptionConfig,
    policy_cfg: PolicyConfig,
    train: FrameCache,
) -> None:
    """Commit the network, the optimizer and ``perception.json`` after ``epoch`` epochs, then keep the
    newest two versions (when the caller holds the run's lease)."""
    opt_t, opt_tree = optimizer_state_to_payload(opt.state_dict())
    meta = dict(
        format=1,
        epoch=epoch,
        done=done,
        history=history,
        metrics=json_safe(metrics),
        frames_per_s=fps if math.isfinite(fps) else None,
        config=to_dict(cfg),
        policy_config=to_dict(policy_cfg),
        cache=str(train.folder),
        frames=len(train),
    )
    files = {
        STATE_FILE: tensors_to_bytes({k: v.detach().cpu() for k, v in net.state_dict().items()}),
        OPT_FILE: tensors_to_bytes(opt_t),
        OPT_TREE_FILE: json_bytes(opt_tree),
        META_FILE: json_bytes(meta),
    }
    rs.commit(files, dict(stage="perception", epoch=epoch, done=done))
    try:
        rs.retain(2)
    except Exception as e:  # housekeeping; needs the run's lease, which the caller may not hold
        log.debug("perception checkpoints not pruned: %s", e)


def restore_checkpoint(
    ck: Checkpoint, net: nn.Module, opt: torch.optim.Optimizer, policy_cfg: PolicyConfig | None = None, where: str = ""
) -> dict:
    """Load a checkpoint's network and optimizer state into ``net`` and ``opt``; returns its
    ``perception.json`` (epoch, done, history, metrics, frames_per_s...). With ``policy_cfg`` (the network
    ``net`` was built from), a checkpoint of another encoder is refused naming the settings that differ."""
    meta = from_json_bytes(ck.files[META_FILE])
    changes = policy_changes(meta.get("policy_config"), policy_cfg) if policy_cfg is not None else []
    try:
        net.load_state_dict(bytes_to_tensors(ck.files[STATE_FILE]))
    except RuntimeError as e:
        differs = "; ".join(changes) or "no policy setting differs"
        raise ConfigError(
            f"perception checkpoint {where or ck.version} holds another encoder ({differs}): name another "
            f"perception.run, or train with its policy settings ({str(e).splitlines()[0]})"
        ) from None
    if changes:
        log.warning("perception checkpoint %s was trained with other policy settings: %s", where, "; ".join(changes))
    opt.load_state_dict(
        optimizer_state_from_payload(bytes_to_tensors(ck.files[OPT_FILE]), from_json_bytes(ck.files[OPT_TREE_FILE]))
    )
    return meta
