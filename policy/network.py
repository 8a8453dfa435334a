"""The actor-critic: observation encoders, a fused trunk, RAD's conditional action heads, two value heads.

Layout (B = batch):

    cameras [B, C, H, W, 3] uint8 -> shared strided CNN per camera + learned camera embedding -> [B, E]
                                     (or camera_encoder=lift: lifted into a BEV grid, ``policy.lift``)
    ego     [B, 4] or [B, 6]      -> running-norm -> MLP                                    -> [B, E]
    navigation [B, N, 2]          -> running-norm -> flatten -> MLP                          -> [B, E]
    command [B, 3] (one-hot)      -> MLP                                                    -> [B, E]
    limits  [B, 3]                -> running-norm -> MLP                                    -> [B, E]
    route   [B, K, 2]             -> running-norm -> flatten -> MLP                          -> [B, E]
    agents  [B, M, 8] (+ mask)    -> running-norm -> per-token MLP -> masked pool            -> [B, E]
    map     [B, P, 4] (+ mask)    -> running-norm -> per-token MLP -> masked pool            -> [B, E]
    concat -> LayerNorm -> MLP trunk -> h [B, D]
    h -> longitudinal logits [B, n_long]
    h, long_idx -> lateral logits [B, n_lat], masked by feasibility()[long_idx]
    h -> values [B, 2] (lateral part, longitudinal part)

Every [B, 2] tensor is in the env's action order: column 0 lateral, column 1 longitudinal.
Camera mode (``envs.observation``) gives cameras, ego [4], navigation, command and limits; privileged
mode cameras, ego [6], route, limits, agents and map; the network takes any subset of the parts.

The camera encoder is what stage perception (``learner.perception``) trains to see agents and the map;
``freeze_cameras`` keeps it as it is while stages il and rl train the rest (the planner).

The joint policy factorises as pi(lat, long | s) = pi_long(long | s) * pi_lat(lat | long, s), so the
feasibility mask (a function of the longitudinal bin) is applied exactly. Masked logits are set to
MASK_VALUE, a large negative finite number: probabilities underflow to exactly 0 but softmax, entropy
and gradients stay finite.

Observation normalisation lives in the module, so a saved or exported policy is self-contained:
images are scaled by fixed per-channel mean/std; vector parts use running mean/var buffers that change
only in ``update_obs_stats`` (the learner calls it) and are saved in the state_dict.

Export: ``forward`` has no data-dependent Python control flow (``action is None`` and ``deterministic``
are static arguments), but sampling is not something an evaluation stack wants. ``ExportPolicy`` wraps a
trained ``ActorCritic`` into a tensor-in/tensor-out module that returns the deterministic action, the
longitudinal logits, the masked lateral logits for *every* longitudinal bin ([B, n_long, n_lat]: the
conditional head evaluated for all conditions at once, cheap since only one linear layer and the
output layer see the condition) and the values. A consumer can then pick any longitudinal bin (argmax
or sampled) and read its lateral row: no conditional branch survives export.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from envs.config import CRITIC_PREFIX
from policy.lift import LIFT_BACKBONES, LiftEncoder
from scenarios.actions import ActionSpec
from sim.configs import ConfigError, field, from_dict, to_dict

log = logging.getLogger(__name__)

MASK_VALUE = -1e9
OBS_PARTS = ("cameras", "ego", "navigation", "command", "limits", "route", "agents", "map")
VECTOR_PARTS = ("ego", "navigation", "limits", "route")  # running-normalised, flattened, MLP
RAW_PARTS = ("command",)  # one-hot: MLP without normalisation
MASK_KEYS = {"agents": "agents_mask", "map": "map_mask"}
TOKEN_PARTS = ("agents", "map")
BEV_KEY = "cameras_bev"  # learner-side only: a frozen lift's grid of obs["cameras"], see ActorCritic.frozen_grid
CRITICS = ("separate", "detached", "shared")


@dataclass(frozen=True)
class PolicyConfig:
    """Network sizes. Defaults are small and fast on CPU; scale up by config (``policy.embed_dim=256``)."""

    cnn_channels: tuple[int, ...] = field(
        (16, 32, 48, 64), help="output channels of the strided conv layers of the shared camera encoder"
    )
    cnn_kernels: tuple[int, ...] = field((5, 3, 3, 3), help="kernel size per conv layer (as many as cnn_channels)")
    cnn_strides: tuple[int, ...] | None = field(
        None,
        help="stride per conv layer (as many as cnn_channels), or None: 4 for the first layer, 2 after (a first "
        "stride of 4 quarters the cost of every later layer: the encoder is most of the CPU time)",
    )
    embed_dim: int = field(128, help="width of every per-part embedding (and of the camera and token features)")
    hidden_dim: int = field(256, help="width of the fusion trunk and of the lateral head")
    trunk_layers: int = field(2, help="number of Linear+ReLU layers in the fusion trunk")
    token_dim: int = field(
        32,
        help="width of the per-token MLP of the agent and map token sets (pooled, then projected to embed_dim): "
        "the tokens are many (64 map points), so their width sets most of a privileged update's cost",
    )
    token_pool: str = field(
        "max", help="pooling of the agent/map token sets: 'max', 'mean' or 'attention' (one learned query)"
    )
    camera_encoder: str = field(
        "flat",
        help="the camera encoder: 'flat' (a strided CNN per camera, each camera's map flattened to one vector, the "
        "cameras fused) or 'lift' (image features lifted into a bird's-eye grid through the rig's geometry, "
        "policy.lift: sees where things are; reads both frames of env.camera_history)",
    )
    lift_rig: str = field("front3", help="camera_encoder=lift: the env's camera rig (sim.RIGS), whose geometry it uses")
    bev_cells: int = field(
        32, help="camera_encoder=lift: grid side in cells (training sets it, range and behind from perception.*)"
    )
    bev_range_m: float = field(40.0, help="camera_encoder=lift: grid side in metres (= perception.range_m)")
    bev_behind_m: float = field(4.0, help="camera_encoder=lift: the grid starts this far behind the rear axle (m)")
    lift_heights: tuple[float, ...] = field(
        (0.25, 0.85, 1.45), help="camera_encoder=lift: heights above the ground (m) at which each cell is looked up"
    )
    lift_backbone: str = field(
        "small",
        help="camera_encoder=lift: the per-image CNN: 'small' (conv 5x5 /4, conv 3x3 /2: features at 1/8 of the "
        "image) or 'deep' (five 3x3 convs to 1/8 and the 1/4 features beside the 1/8 ones: sharper, ~3x the "
        "backbone's compute)",
    )
    lift_align_s: float = field(
        0.0,
        help="camera_encoder=lift with two frames: the seconds between them (env.camera_history x 0.1 s). > 0: the "
        "earlier frame is looked up where each grid point was then, the ego's motion over the gap undone from its "
        "speed and yaw rate, so still things line up and what moved differs; 0: both frames at the same points",
    )
    lift_channels: int = field(16, help="camera_encoder=lift: image feature channels lifted into the grid")
    bev_channels: int = field(16, help="camera_encoder=lift: channels of the grid's CNN")
    lift_bev_dilation: tuple[int, int] = field(
        (1, 1),
        help="camera_encoder=lift: dilations of the grid CNN's two 3x3 convolutions: with the perception heads a "
        "cell sees 1 + d1 + d2 cells around it ((1, 1): 3 cells, 3.75 m; (2, 4): 7, 8.75 m), which bounds how far "
        "an agent may move between the two frames and still be matched",
    )
    camera_fusion: str = field(
        "concat",
        help="'concat' (flatten the per-camera features) or 'mean' (camera-count agnostic; the camera embedding "
        "tells the cameras apart)",
    )
    image_mean: tuple[float, float, float] = field(
        (0.485, 0.456, 0.406), help="fixed per-channel (RGB) mean of images scaled to [0, 1]"
    )
    image_std: tuple[float, float, float] = field(
        (0.229, 0.224, 0.225), help="fixed per-channel (RGB) std of images scaled to [0, 1]"
    )
    critic: str = field(
        "separate",
        help="the value function: 'separate' (its own part encoders and trunk; camera features reach it detached), "
        "'detached' (a head on the policy's trunk features, no gradient into them) or 'shared' (a head on the "
        "policy's trunk, its loss training the trunk too)",
    )
    obs_clip: float = field(10.0, help="normalised vector observations are clipped to [-obs_clip, obs_clip]")
    norm_eps: float = field(1e-8, help="added to the running variance before the square root")

    def __post_init__(self):
        if len(self.cnn_channels) != len(self.cnn_kernels) or not self.cnn_channels:
            raise ValueError(
                f"PolicyConfig.cnn_kernels: expected one kernel size per conv layer "
                f"({len(self.cnn_channels)} channels given), got {self.cnn_kernels}"
            )
        if self.cnn_strides is None:
            object.__setattr__(self, "cnn_strides", (4,) + (2,) * (len(self.cnn_channels) - 1))
        if len(self.cnn_strides) != len(self.cnn_channels) or min(self.cnn_strides) < 1:
            raise ValueError(
                f"PolicyConfig.cnn_strides: expected one stride >= 1 per conv layer "
                f"({len(self.cnn_channels)} channels given), got {self.cnn_strides}"
            )
        if self.token_pool not in ("max", "mean", "attention"):
            raise ValueError(f"PolicyConfig.token_pool: expected 'max', 'mean' or 'attention', got {self.token_pool!r}")
        if self.critic not in CRITICS:
            raise ValueError(f"PolicyConfig.critic: expected one of {', '.join(CRITICS)}, got {self.critic!r}")
        if self.camera_encoder not in ("flat", "lift"):
            raise ValueError(f"PolicyConfig.camera_encoder: expected 'flat' or 'lift', got {self.camera_encoder!r}")
        if self.camera_encoder == "lift":
            if not self.lift_heights or self.bev_cells < 4 or self.bev_cells % 4:
                raise ValueError(
                    f"PolicyConfig: lift needs heights and bev_cells a multiple of 4, got {self.lift_heights}, "
                    f"{self.bev_cells}"
                )
            if self.lift_backbone not in LIFT_BACKBONES:
                raise ValueError(
                    f"PolicyConfig.lift_backbone: expected one of {', '.join(LIFT_BACKBONES)}, "
                    f"got {self.lift_backbone!r}"
                )
            if not (math.isfinite(self.lift_align_s) and 0.0 <= self.lift_align_s <= 5.0):
                raise ValueError(f"PolicyConfig.lift_align_s: expected seconds in [0, 5], got {self.lift_align_s!r}")
            if not (self.bev_range_m > 0 and self.bev_behind_m >= 0 and min(self.lift_channels, self.bev_channels)):
                raise ValueError("PolicyConfig: bev_range_m > 0, bev_behind_m >= 0, lift/bev_channels >= 1 are needed")
            d = tuple(self.lift_bev_dilation)
            if len(d) != 2 or not all(isinstance(x, int) and 1 <= x <= self.bev_cells // 2 for x in d):
                raise ValueError(
                    f"PolicyConfig.lift_bev_dilation: expected two integers in [1, bev_cells / 2 = "
                    f"{self.bev_cells // 2}], got {self.lift_bev_dilation!r}"
                )
        if self.camera_fusion not in ("concat", "mean"):
            raise ValueError(f"PolicyConfig.camera_fusion: expected 'concat' or 'mean', got {self.camera_fusion!r}")
        for name in ("embed_dim", "hidden_dim", "trunk_layers", "token_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"PolicyConfig.{name}: expected >= 1, got {getattr(self, name)}")


# Settings added after checkpoints were written with the network they now name: a saved policy config that
# lacks one was built the way it names (lift_backbone: the small CNN was the only one before it was a setting;
# lift_align_s: both frames were lifted at the same points; lift_bev_dilation: the grid's CNN was undilated)
LEGACY_POLICY_DEFAULTS = {"lift_backbone": "small", "lift_align_s": 0.0, "lift_bev_dilation": (1, 1)}


def upgrade_policy_config(saved: dict) -> dict:
    """A saved PolicyConfig dict (a checkpoint's config.json ``policy``, a perception run's ``policy_config``)
    with the settings it predates filled in as the network it holds was built (LEGACY_POLICY_DEFAULTS), so
    that it reads the same whatever the defaults are now."""
    return {**LEGACY_POLICY_DEFAULTS, **saved}


def policy_changes(saved: dict | None, policy: PolicyConfig) -> list[str]:
    """``policy.<key>: old -> new`` for every setting in which ``policy`` differs from a saved policy config (a
    checkpoint's config.json ``policy``, a perception run's ``policy_config``), read as the network it was built
    as (upgrade_policy_config): the saved weights fit that network, not this one. [] when there is nothing to
    compare (no saved policy config, or one of an older layout)."""
    if not isinstance(saved, dict):
        return []
    try:
        before = to_dict(from_dict(PolicyConfig, upgrade_policy_config(saved)))
    except ConfigError as e:
        log.warning("a saved policy config is not this code's PolicyConfig (%s); not compared", e)
        return []
    now = to_dict(policy)
    return [f"policy.{k}: {before[k]!r} -> {now[k]!r}" for k in sorted(now) if before[k] != now[k]]


class PolicyOutput(NamedTuple):
    """action, log_prob, entropy: [B, 2] (lateral, longitudinal); values: [B, 2] (lateral, longitudinal part).

    log_prob[:, 0] = log pi_lat(lat | long, s), log_prob[:, 1] = log pi_long(long | s); their sum is the joint
    log-probability. entropy[:, 0] is the lateral entropy given the action's longitudinal bin.
    logits_long: [B, n_long]; logits_lat: [B, n_lat], masked, conditioned on the action's longitudinal bin.
    """

    action: torch.Tensor
    log_prob: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor
    logits_long: torch.Tensor
    logits_lat: torch.Tensor


def layer_init(layer: nn.Linear | nn.Conv2d, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """CleanRL's orthogonal init."""
    nn.init.orthogonal_(layer.weight, std)
    assert layer.bias is not None
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, out_dim: int, hidden: int | None = None, layers: int = 2) -> nn.Sequential:
    """Linear+ReLU stack, ending with a ReLU (a feature extractor, not a head)."""
    hidden = hidden or out_dim
    dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
    mods: list[nn.Module] = []
    for a, b in itertools.pairwise(dims):
        mods += [layer_init(nn.Linear(a, b)), nn.ReLU()]
    return nn.Sequential(*mods)


class RunningNorm(nn.Module):
    """Per-feature running mean/variance; frozen except in ``update``. Starts as the identity.

    shape: the per-sample feature shape the statistics are kept over (e.g. [6] for ego, [K, 2] for route,
    [8] for agent tokens, which share statistics across tokens).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...], clip: float, eps: float):
        super().__init__()
        self.shape, self.clip, self.eps = tuple(shape), clip, eps
        self.register_buffer("mean", torch.zeros(self.shape))
        self.register_buffer("var", torch.ones(self.shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """Merge a batch (Chan et al.'s parallel update). x: [..., *shape]; keep: bool [...] rows to use.
        Rows with a non-finite value are left out, so one bad observation cannot poison the statistics."""
        x = x.detach().reshape(-1, *self.shape).to(torch.float64)
        rows = torch.isfinite(x).reshape(x.shape[0], -1).all(1)
        if keep is not None:
            rows &= keep.reshape(-1).to(torch.bool)
        x = x[rows]
        n = x.shape[0]
        if n == 0:
            return
        b_mean, b_var = x.mean(0), x.var(0, unbiased=False)
        tot = self.count + n
        delta = b_mean - self.mean.double()
        new_mean = self.mean.double() + delta * (n / tot)
        m2 = self.var.double() * self.count + b_var * n + delta**2 * (self.count * n / tot)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / tot)
        self.count.copy_(tot)


class CameraEncoder(nn.Module):
    """Shared strided CNN over every camera + a learned per-camera embedding. [B, C, H, W, 3] uint8 -> [B, E]."""

    img_mean: torch.Tensor
    img_std: torch.Tensor

    def __init__(self, n_cams: int, height: int, width: int, cfg: PolicyConfig):
        super().__init__()
        self.register_buffer("img_mean", torch.tensor(cfg.image_mean).view(1, 3, 1, 1))
        self.register_buffer("img_std", torch.tensor(cfg.image_std).view(1, 3, 1, 1))
        convs: list[nn.Module] = []
        c_in = 3
        assert cfg.cnn_strides is not None  # PolicyConfig.__post_init__ fills in the default
        for c_out, k, st in zip(cfg.cnn_channels, cfg.cnn_kernels, cfg.cnn_strides):
            convs += [layer_init(nn.Conv2d(c_in, c_out, k, stride=st, padding=k // 2)), nn.ReLU()]
            c_in = c_out
        self.cnn = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.cnn(torch.zeros(1, 3, height, width)).shape[1]
        self.proj = nn.Sequential(layer_init(nn.Linear(flat, cfg.embed_dim)), nn.ReLU())
        self.cam_embed = nn.Parameter(torch.randn(n_cams, cfg.embed_dim) * 0.02)
        self.fusion = cfg.camera_fusion
        fused_in = cfg.embed_dim * (n_cams if self.fusion == "concat" else 1)
        self.out = nn.Sequential(layer_init(nn.Linear(fused_in, cfg.embed_dim)), nn.ReLU())

    def forward(self, images: torch.Tensor, ego: torch.Tensor | None = None) -> torch.Tensor:
        """``ego`` is not read (the lift reads it): every camera encoder is called alike."""
        if images.dtype != torch.uint8:
            raise TypeError(f"ActorCritic: obs['cameras'] must be uint8 [B, C, H, W, 3], got dtype {images.dtype}")
        B, C, H, W, _ = images.shape
        # one float copy, normalised in place: (x / 255 - mean) / std = x * scale - shift. (Fresh
        # temporaries of this size cost more in page faults than the arithmetic on a small CPU.)
        x = images.reshape(B * C, H, W, 3).permute(0, 3, 1, 2).float()  # [B*C, 3, H, W]
        x = x.mul_(1.0 / (255.0 * self.img_std)).sub_(self.img_mean / self.img_std)
        feats = self.proj(self.cnn(x)).view(B, C, -1) + self.cam_embed  # [B, C, E]
        fused = feats.flatten(1) if self.fusion == "concat" else feats.mean(1)
        return self.out(fused)


class TokenSetEncoder(nn.Module):
    """Per-token MLP + masked pooling. tokens [B, N, F], mask [B, N] (1 = present) -> [B, E].

    A set with no present token pools to zeros (no NaN, no gradient through absent tokens).
    """

    def __init__(self, n_feat: int, cfg: PolicyConfig):
        super().__init__()
        self.token_mlp = mlp(n_feat, cfg.token_dim)
        self.pool = cfg.token_pool
        if self.pool == "attention":
            self.query = nn.Parameter(torch.randn(cfg.token_dim) * 0.02)
        self.out = nn.Sequential(layer_init(nn.Linear(cfg.token_dim, cfg.embed_dim)), nn.ReLU())

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        present = mask > 0.5  # [B, N]
        any_present = present.any(dim=1, keepdim=True)  # [B, 1]
        x = self.token_mlp(tokens)  # [B, N, E]
        if self.pool == "max":
            pooled = x.masked_fill(~present[..., None], MASK_VALUE).amax(dim=1)
        elif self.pool == "mean":
            w = present.to(x.dtype)[..., None]
            pooled = (x * w).sum(1) / w.sum(1).clamp_min(1.0)
        else:
            scores = (x @ self.query) / math.sqrt(x.shape[-1])  # [B, N]
            attn = torch.softmax(scores.masked_fill(~present, MASK_VALUE), dim=1)
            pooled = (attn[..., None] * x).sum(1)
        return self.out(torch.where(any_present, pooled, torch.zeros_like(pooled)))


def _check_box(space: gym.spaces.Space, key: str, ndim: int) -> tuple[int, ...]:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != ndim:
        raise ValueError(f"ActorCritic: observation_space[{key!r}] must be a Box with {ndim} dims, got {space}")
    return tuple(space.shape)


class ActorCritic(nn.Module):
    """RAD's actor-critic over a Dict observation space (any subset of OBS_PARTS) and an action spec.

    spec: the env's ``scenarios.actions.ActionSpec`` (so the mask is exactly the one the env enforces), or anything
    with ``n_lat``, ``n_long`` and ``feasibility()`` -> bool [n_long, n_lat].
    """

    feasible: torch.Tensor

    def __init__(self, observation_space: gym.spaces.Dict, spec: ActionSpec, cfg: PolicyConfig | None = None):
        super().__init__()
        cfg = cfg or PolicyConfig()
        self.spec, self.cfg = spec, cfg
        if not isinstance(observation_space, gym.spaces.Dict):
            raise TypeError(f"ActorCritic: observation_space must be gymnasium.spaces.Dict, got {observation_space}")
        known = set(OBS_PARTS) | set(MASK_KEYS.values())
        known |= {CRITIC_PREFIX + k for k in known if k != "cameras"}  # an asymmetric critic's (EnvConfig.critic)
        unknown = sorted(set(observation_space.spaces) - known)
        if unknown:
            raise ValueError(f"ActorCritic: unknown observation keys {unknown}; expected a subset of {sorted(known)}")
        self.parts = tuple(k for k in OBS_PARTS if k in observation_space.spaces)
        if not self.parts:
            raise ValueError(f"ActorCritic: the observation space has none of {OBS_PARTS}")
        # the privileged parts only the critic reads (an asymmetric critic): the policy never sees them
        self.critic_parts = tuple(CRITIC_PREFIX + k for k in OBS_PARTS if CRITIC_PREFIX + k in observation_space.spaces)
        if self.critic_parts and cfg.critic != "separate":
            raise ValueError(
                f"ActorCritic: the observation has critic parts {list(self.critic_parts)} (env.critic), which only a "
                f"critic of its own reads: set policy.critic=separate (got {cfg.critic!r})"
            )
        spaces = observation_space.spaces

        self.norms = nn.ModuleDict()  # running statistics of the vector parts (shared by actor and critic)
        if "cameras" in spaces:
            C, H, W, three = _check_box(spaces["cameras"], "cameras", 4)
            if three != 3:
                raise ValueError(
                    f"ActorCritic: observation_space['cameras'] must be [C, H, W, 3], got {(C, H, W, three)}"
                )
        for key in self.parts + self.critic_parts:
            part = key.removeprefix(CRITIC_PREFIX)
            if part in ("ego", "limits"):
                (n,) = _check_box(spaces[key], key, 1)
                self.norms[key] = RunningNorm((n,), cfg.obs_clip, cfg.norm_eps)
            elif part in ("navigation", "route"):
                self.norms[key] = RunningNorm(_check_box(spaces[key], key, 2), cfg.obs_clip, cfg.norm_eps)
            elif part == "command":
                _check_box(spaces[key], key, 1)
            elif part in TOKEN_PARTS:
                _, n_feat = _check_box(spaces[key], key, 2)
                self.norms[key] = RunningNorm((n_feat,), cfg.obs_clip, cfg.norm_eps)
        self.encoders = self._part_encoders(spaces, self.parts, cameras=True)
        self.trunk = self._trunk()
        # The critic: its own encoders and trunk ('separate'; the camera features, from the policy's encoder,
        # reach it detached; the critic parts, when the env gives them, its alone), or a head on the policy's
        # trunk ('detached', 'shared').
        self.critic = cfg.critic
        if self.critic == "separate":
            self.critic_encoders = self._part_encoders(spaces, self.parts + self.critic_parts, cameras=False)
            self.critic_trunk = self._trunk(len(self.parts) + len(self.critic_parts))
        D = cfg.hidden_dim

        # Heads. Small init (CleanRL: 0.01) starts the policy near uniform over the feasible bins.
        self.long_head = layer_init(nn.Linear(D, spec.n_long), std=0.01)
        # Lateral head on [h, embed(long)]: written as proj(h) + embed(long) so it can be evaluated for all
        # longitudinal bins at once by broadcasting (lateral_logits_all, export).
        self.lat_proj = layer_init(nn.Linear(D, D))
        self.long_embed = nn.Embedding(spec.n_long, D)
        nn.init.normal_(self.long_embed.weight, std=0.1)
        self.lat_out = layer_init(nn.Linear(D, spec.n_lat), std=0.01)
        self.value_head = layer_init(nn.Linear(D, 2), std=1.0)
        # Derived from the spec, so not saved: a checkpoint loads only into a network with the same bins anyway.
        self.register_buffer("feasible", torch.as_tensor(spec.feasibility()), persistent=False)

    def _part_encoders(self, spaces, keys: tuple[str, ...], cameras: bool) -> nn.ModuleDict:
        """One encoder per observation part of ``keys`` (the camera encoder only when ``cameras``): each maps
        its part to [B, embed_dim]."""
        cfg, E = self.cfg, self.cfg.embed_dim
        enc = nn.ModuleDict()
        for key in keys:
            shape = tuple(spaces[key].shape)
            if key == "cameras":
                if cameras:
                    C, H, W, _ = shape
                    lift = cfg.camera_encoder == "lift"
                    enc[key] = LiftEncoder(C, H, W, cfg) if lift else CameraEncoder(C, H, W, cfg)
            elif key.removeprefix(CRITIC_PREFIX) in TOKEN_PARTS:
                enc[key] = TokenSetEncoder(shape[-1], cfg)
            else:  # ego, command, limits: [n]; navigation, route: [K, 2] flattened
                enc[key] = mlp(int(np.prod(shape)), E)
        return enc

    def _trunk(self, n_parts: int | None = None) -> nn.Sequential:
        """LayerNorm over the concatenated embeddings of ``n_parts`` parts (the policy's), then ``trunk_layers``
        Linear+ReLU to hidden_dim."""
        cfg = self.cfg
        d_in = cfg.embed_dim * (len(self.parts) if n_parts is None else n_parts)
        layers: list[nn.Module] = [nn.LayerNorm(d_in)]
        for _ in range(cfg.trunk_layers):
            layers += [layer_init(nn.Linear(d_in, cfg.hidden_dim)), nn.ReLU()]
            d_in = cfg.hidden_dim
        return nn.Sequential(*layers)

    # ---- features -------------------------------------------------------------------------------
    def _get(self, obs: dict[str, torch.Tensor], key: str) -> torch.Tensor:
        if key not in obs:
            raise KeyError(f"ActorCritic: observation has no {key!r} (the network was built with {list(self.parts)})")
        return obs[key]

    def _mask(self, obs: dict[str, torch.Tensor], key: str, tokens: torch.Tensor) -> torch.Tensor:
        part = key.removeprefix(CRITIC_PREFIX)
        m = obs.get(key[: len(key) - len(part)] + MASK_KEYS[part])
        return torch.ones(tokens.shape[:-1], dtype=tokens.dtype, device=tokens.device) if m is None else m

    def _embed(
        self,
        obs: dict[str, torch.Tensor],
        encoders: nn.ModuleDict,
        camera: torch.Tensor | None = None,
        keys: tuple[str, ...] | None = None,
    ):
        """Per-part embeddings [B, E] each, in ``keys`` order (the policy's parts by default); the cameras' from
        ``encoders`` or given."""
        feats = []
        for key in self.parts if keys is None else keys:
            part = key.removeprefix(CRITIC_PREFIX)
            if key == "cameras" and camera is not None:
                feats.append(camera)
                continue
            enc = encoders[key] if key == "cameras" else None
            if isinstance(enc, LiftEncoder) and BEV_KEY in obs:
                # the frozen grid, computed once per batch (or kept in place of the images: imitation data)
                feats.append(enc.reduce(obs[BEV_KEY].float()))
                continue
            x = self._get(obs, key)
            if key == "cameras":
                feats.append(encoders[key](x, obs.get("ego")))
            elif part in RAW_PARTS:
                feats.append(encoders[key](x.float()))
            elif part in TOKEN_PARTS:
                feats.append(encoders[key](self.norms[key](x.float()), self._mask(obs, key, x)))
            else:
                feats.append(encoders[key](self.norms[key](x.float()).flatten(1)))
        return feats

    def features(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Fused trunk features h [B, hidden_dim] of the policy."""
        return self.trunk(torch.cat(self._embed(obs, self.encoders), dim=-1))

    def _features_and_values(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(policy features h [B, hidden_dim], values [B, 2] per reward part), by ``cfg.critic``."""
        if self.critic != "separate":
            h = self.features(obs)
            return h, self.value_head(h.detach() if self.critic == "detached" else h)
        feats = self._embed(obs, self.encoders)
        h = self.trunk(torch.cat(feats, dim=-1))
        camera = feats[self.parts.index("cameras")].detach() if "cameras" in self.parts else None
        keys = self.parts + self.critic_parts
        hv = self.critic_trunk(torch.cat(self._embed(obs, self.critic_encoders, camera, keys), dim=-1))
        return h, self.value_head(hv)

    def values(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """V(s) [B, 2] per reward part (lateral, longitudinal)."""
        return self._features_and_values(obs)[1].float()

    def freeze_cameras(self) -> int:
        """Keep the camera encoder (the perception stage's image encoder) as it is: its parameters get no
        gradient, so the optimizer leaves them alone. Returns how many parameters were frozen (0 without
        cameras)."""
        if "cameras" not in self.encoders:
            return 0
        enc = self.encoders["cameras"]
        params = enc.perceptual() if isinstance(enc, LiftEncoder) else list(enc.parameters())
        for p in params:
            p.requires_grad_(False)
        return sum(p.numel() for p in params)

    @torch.no_grad()
    def frozen_grid(self, obs: dict[str, torch.Tensor], chunk: int = 256) -> torch.Tensor | None:
        """The lift's BEV grid [B, Cb, G, G] of a batch when its perception is frozen (it cannot change during
        an update, so the learner computes it once per batch instead of once per minibatch and epoch, and
        passes it as ``obs[BEV_KEY]``); None for any other camera encoder, or one still training."""
        if self.frozen_grid_shape() is None:
            return None
        enc = self.encoders["cameras"]
        assert isinstance(enc, LiftEncoder)
        cams, ego = obs["cameras"], obs.get("ego")
        parts = [
            enc.bev(cams[i : i + chunk], None if ego is None else ego[i : i + chunk])
            for i in range(0, cams.shape[0], chunk)
        ]
        return torch.cat(parts) if parts else None

    def frozen_grid_shape(self) -> tuple[int, int, int] | None:
        """The shape [Cb, G, G] of one state's :meth:`frozen_grid` (None when it gives none)."""
        enc = self.encoders["cameras"] if "cameras" in self.encoders else None
        if not isinstance(enc, LiftEncoder) or any(p.requires_grad for p in enc.perceptual()):
            return None
        return (enc.bev_channels, enc.cells, enc.cells)

    @torch.no_grad()
    def update_obs_stats(self, obs: dict[str, torch.Tensor]) -> None:
        """Merge a batch into the running statistics of the vector parts (the only place they change).

        obs: tensors with any number of leading batch dims ([B, ...] or [T, B, ...]). Token statistics use only
        the tokens marked present by the mask.
        """
        for key, norm in self.norms.items():
            assert isinstance(norm, RunningNorm)
            if key in self.critic_parts and key not in obs:  # demonstrations: the policy's parts alone
                continue
            x = self._get(obs, key)
            keep = None
            if key.removeprefix(CRITIC_PREFIX) in TOKEN_PARTS:
                keep = self._mask(obs, key, x) > 0.5
            norm.update(x, keep)

    # ---- heads ----------------------------------------------------------------------------------
    def _lat_logits(self, h: torch.Tensor, long_idx: torch.Tensor) -> torch.Tensor:
        """Masked lateral logits given longitudinal bins. h [B, D], long_idx [B] -> [B, n_lat]."""
        z = self.lat_out(F.relu(self.lat_proj(h) + self.long_embed(long_idx)))
        return z.masked_fill(~self.feasible[long_idx], MASK_VALUE)

    def lateral_logits_all(self, h: torch.Tensor) -> torch.Tensor:
        """Masked lateral logits for every longitudinal bin. h [B, D] -> [B, n_long, n_lat]."""
        z = self.lat_out(F.relu(self.lat_proj(h)[:, None, :] + self.long_embed.weight[None, :, :]))
        return z.masked_fill(~self.feasible[None], MASK_VALUE)

    @staticmethod
    def _sample(logits: torch.Tensor) -> torch.Tensor:
        # Gumbel-max: a draw from softmax(logits) with tensor ops only (no multinomial). Masked logits
        # (-1e9) cannot win: the Gumbel noise is bounded by the clamp on u to about +-17.
        u = torch.rand_like(logits).clamp(1e-7, 1.0 - 1e-7)
        return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)

    @staticmethod
    def _logp_entropy(logits: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, idx[:, None])[:, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def forward(
        self, obs: dict[str, torch.Tensor], action: torch.Tensor | None = None, deterministic: bool = False
    ) -> PolicyOutput:
        """obs: dict of [B, ...] tensors. action: [B, 2] int64 (lat, long) to evaluate, or None to choose one
        (sampled, or argmax long then argmax lateral under its mask when deterministic)."""
        h, values = self._features_and_values(obs)
        logits_long = self.long_head(h).float()  # [B, n_long]; every bin has a feasible lateral, so no mask
        if action is None:
            long_idx = logits_long.argmax(-1) if deterministic else self._sample(logits_long)
        else:
            if action.ndim != 2 or action.shape[1] != 2:
                raise ValueError(
                    f"ActorCritic: action must be [B, 2] (lat, long) bin indices, got {tuple(action.shape)}"
                )
            long_idx = action[:, 1].long()
        logits_lat = self._lat_logits(h, long_idx).float()  # [B, n_lat]
        if action is None:
            lat_idx = logits_lat.argmax(-1) if deterministic else self._sample(logits_lat)
        else:
            lat_idx = action[:, 0].long()
        logp_lat, ent_lat = self._logp_entropy(logits_lat, lat_idx)
        logp_long, ent_long = self._logp_entropy(logits_long, long_idx)
        return PolicyOutput(
            action=torch.stack([lat_idx, long_idx], dim=-1),
            log_prob=torch.stack([logp_lat, logp_long], dim=-1),
            entropy=torch.stack([ent_lat, ent_long], dim=-1),
            values=values.float(),
            logits_long=logits_long,
            logits_lat=logits_lat,
        )

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor], deterministic: bool = False) -> PolicyOutput:
        """Rollout-time forward without autograd."""
        return self.forward(obs, deterministic=deterministic)

    def evaluate_actions(self, obs: dict[str, torch.Tensor], actions: torch.Tensor) -> PolicyOutput:
        """Learner-time forward: log-probs, entropies, values of the given actions [B, 2] (lat, long)."""
        return self.forward(obs, action=actions)

    def logits(
        self, obs: dict[str, torch.Tensor], long_idx: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits_long [B, n_long], masked logits_lat [B, n_lat]) with the lateral head conditioned on
        long_idx [B] (e.g. the expert's bin for IL teacher forcing), or on argmax long when None."""
        h = self.features(obs)
        logits_long = self.long_head(h).float()
        if long_idx is None:
            long_idx = logits_long.argmax(-1)
        return logits_long, self._lat_logits(h, long_idx.long()).float()


class ExportPolicy(nn.Module):
    """Tensor-in/tensor-out view of an ActorCritic for torch.export / ONNX: no sampling, no branching.

    forward(obs) -> (action [B, 2] int64 deterministic (lat, long), logits_long [B, n_long],
    logits_lat_all [B, n_long, n_lat] masked, one row per longitudinal bin, values [B, 2]).

    A policy with an asymmetric critic (``critic_parts``: privileged state it read while training) takes the
    policy's parts alone and gives NaN values: its value function needs what a deployed car does not have.
    """

    def __init__(self, policy: ActorCritic):
        super().__init__()
        self.policy = policy

    def forward(self, obs: dict[str, torch.Tensor]):
        if self.policy.critic_parts:
            h = self.policy.features(obs)
            values = torch.full((h.shape[0], 2), float("nan"), dtype=h.dtype, device=h.device)
        else:
            h, values = self.policy._features_and_values(obs)
        logits_long = self.policy.long_head(h)
        lat_all = self.policy.lateral_logits_all(h)  # [B, n_long, n_lat]
        long_idx = logits_long.argmax(-1)  # [B]
        row = torch.gather(lat_all, 1, long_idx[:, None, None].expand(-1, 1, lat_all.shape[-1]))[:, 0]
        action = torch.stack([row.argmax(-1), long_idx], dim=-1)
        return action, logits_long, lat_all, values


# ---- benchmark: python -m policy.network --bench ---------------------------------------------------
PRIVILEGED_PARTS = ("cameras", "ego", "route", "limits", "agents", "map")
CAMERA_PARTS = ("cameras", "ego", "navigation", "command", "limits")


def example_observation_space(
    n_cams: int = 3, height: int = 64, width: int = 128, parts: tuple[str, ...] = PRIVILEGED_PARTS
) -> gym.spaces.Dict:
    """The env's observation space with its default sizes (front3 cameras by default), for benchmarks and
    examples: privileged mode's parts by default, ``parts=CAMERA_PARTS`` for camera mode (ego [4])."""
    f32 = np.float32
    camera_mode = "navigation" in parts or "command" in parts
    all_spaces: dict[str, gym.spaces.Space] = {
        "cameras": gym.spaces.Box(0, 255, (n_cams, height, width, 3), np.uint8),
        "ego": gym.spaces.Box(-np.inf, np.inf, (4 if camera_mode else 6,), f32),
        "navigation": gym.spaces.Box(-np.inf, np.inf, (5, 2), f32),
        "command": gym.spaces.Box(0, 1, (3,), f32),
        "limits": gym.spaces.Box(0, np.inf, (3,), f32),
        "route": gym.spaces.Box(-np.inf, np.inf, (10, 2), f32),
        "agents": gym.spaces.Box(-np.inf, np.inf, (8, 8), f32),
        "agents_mask": gym.spaces.Box(0, 1, (8,), f32),
        "map": gym.spaces.Box(-np.inf, np.inf, (64, 4), f32),
        "map_mask": gym.spaces.Box(0, 1, (64,), f32),
    }
    keep = set(parts) | {MASK_KEYS[p] for p in parts if p in MASK_KEYS}
    return gym.spaces.Dict({k: v for k, v in all_spaces.items() if k in keep})


def random_obs(space: gym.spaces.Dict, batch: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """A batch of random observations matching ``space`` (masks ~half present)."""
    obs = {}
    for key, s in space.spaces.items():
        shape = (batch, *(s.shape or ()))
        if s.dtype == np.uint8:
            obs[key] = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        elif key == "command":  # one-hot
            obs[key] = F.one_hot(torch.randint(0, shape[-1], shape[:-1], generator=generator), shape[-1]).float()
        elif key.endswith("_mask"):
            obs[key] = (torch.rand(shape, generator=generator) > 0.5).float()
        else:
            obs[key] = torch.randn(shape, generator=generator)
    return obs


def _bench(batches: tuple[int, ...], repeats: int, parts: tuple[str, ...] = CAMERA_PARTS) -> dict:
    torch.manual_seed(0)
    space = example_observation_space(parts=parts)
    net = ActorCritic(space, ActionSpec(), PolicyConfig())
    out = {
        "config": asdict(PolicyConfig()),
        "parameters": sum(p.numel() for p in net.parameters()),
        "torch_threads": torch.get_num_threads(),
    }
    for b in batches:
        obs = random_obs(space, b)
        for _ in range(2):
            net.act(obs)
        t0 = time.perf_counter()
        for _ in range(repeats):
            net.act(obs)
        act_ms = (time.perf_counter() - t0) / repeats * 1e3
        actions = net.act(obs).action
        for _ in range(2):  # warm-up: the first backward allocates autograd buffers
            o = net.evaluate_actions(obs, actions)
            (o.log_prob.sum() + o.values.sum()).backward()
        t0 = time.perf_counter()
        for _ in range(repeats):
            o = net.evaluate_actions(obs, actions)
            (o.log_prob.sum() + o.values.sum()).backward()
        train_ms = (time.perf_counter() - t0) / repeats * 1e3
        out[f"batch_{b}"] = {"act_ms": round(act_ms, 2), "forward_backward_ms": round(train_ms, 2)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ActorCritic figures (parameter count, CPU forward time) as JSON.")
    parser.add_argument("--bench", action="store_true", help="time act() and a training forward+backward")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 64], help="batch sizes to time")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats per batch size")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.print_help()
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(json.dumps(_bench(tuple(args.batches), args.repeats), indent=2))


if __name__ == "__main__":
    main()
