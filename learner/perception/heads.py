"""The network of stage perception: the policy's camera encoder with bird's-eye heads, and the hand-over
of the trained encoder to the policy."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from policy.lift import LiftEncoder
from policy.network import CameraEncoder, PolicyConfig, layer_init

CHANNELS = ("occupancy", "vx", "vy", "drivable", "lane")  # the decoder's output channels
ENCODER_PREFIX = "encoders.cameras."  # where the encoder's weights sit in the policy's state_dict


class BEVDecoder(nn.Module):
    """Fused camera feature [B, E] -> BEV maps [B, 5, G, G] (``CHANNELS``): a linear layer to a
    64-channel G/4 x G/4 map, two transposed convolutions (x2 each) and a 3x3 output convolution."""

    def __init__(self, embed_dim: int, cells: int):
        super().__init__()
        if cells % 4 or cells < 4:
            raise ValueError(f"perception.cells: expected a multiple of 4, got {cells}")
        self.base = cells // 4
        self.fc = nn.Sequential(layer_init(nn.Linear(embed_dim, 64 * self.base * self.base)), nn.ReLU())
        self.up = nn.Sequential(
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, len(CHANNELS), 3, padding=1),
        )

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        x = self.fc(feature).view(-1, 64, self.base, self.base)
        return self.up(x)


class GridHeads(nn.Module):
    """The lift encoder's BEV features [B, Cb, G, G] -> BEV maps [B, 5, G, G] (``CHANNELS``): a 3x3
    convolution and a 1x1 output convolution, cell by cell on the grid the encoder lifted into."""

    def __init__(self, channels: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.Conv2d(2 * channels, len(CHANNELS), 1)
        )

    def forward(self, bev: torch.Tensor) -> torch.Tensor:
        return self.net(bev)


class PerceptionNet(nn.Module):
    """The policy's camera encoder with BEV heads. cameras uint8 [B, C, H, W, 3] -> [B, 5, G, G].

    With ``policy.camera_encoder=flat`` the heads decode the encoder's fused vector (``BEVDecoder``); with
    ``lift`` they read the grid the encoder lifted the images into (``GridHeads``), which must be the
    perception grid (``cells``)."""

    def __init__(self, n_cams: int, height: int, width: int, policy_cfg: PolicyConfig, cells: int):
        super().__init__()
        self.encoder: nn.Module
        self.decoder: nn.Module
        if policy_cfg.camera_encoder == "lift":
            if policy_cfg.bev_cells != cells:
                raise ValueError(
                    f"perception.cells={cells} but policy.bev_cells={policy_cfg.bev_cells}: the lift encoder's grid "
                    "is the perception grid (set both, and range_m / bev_range_m, behind_m / bev_behind_m, alike)"
                )
            self.encoder = LiftEncoder(n_cams, height, width, policy_cfg)
            self.decoder = GridHeads(policy_cfg.bev_channels)
        else:
            self.encoder = CameraEncoder(n_cams, height, width, policy_cfg)
            self.decoder = BEVDecoder(policy_cfg.embed_dim, cells)

    def forward(self, cameras: torch.Tensor, ego: torch.Tensor | None = None) -> torch.Tensor:
        """ego: [B, >= 2] the ego's speed and yaw rate (the lift encoder reads them; the flat one does not)."""
        if isinstance(self.encoder, LiftEncoder):
            return self.decoder(self.encoder.bev(cameras, ego))
        return self.decoder(self.encoder(cameras))

    def encoder_weights(self) -> dict[str, torch.Tensor]:
        """The encoder's state_dict under the policy's names (``encoders.cameras.*``)."""
        return {ENCODER_PREFIX + k: v.detach().cpu().clone() for k, v in self.encoder.state_dict().items()}


def with_encoder(policy_weights: Mapping[str, torch.Tensor], encoder: Mapping[str, torch.Tensor]) -> dict:
    """A policy state_dict with its camera encoder replaced by ``encoder`` (``encoders.cameras.*``);
    raises ValueError naming the keys when they do not fit (another network size or camera rig)."""
    want = {k for k in policy_weights if k.startswith(ENCODER_PREFIX)}
    got = set(encoder)
    if want != got:
        raise ValueError(
            f"perception encoder does not fit the policy: missing {sorted(want - got)[:4]}, "
            f"unexpected {sorted(got - want)[:4]} (the same policy config and camera rig are needed)"
        )
    bad = [k for k in want if tuple(policy_weights[k].shape) != tuple(encoder[k].shape)]
    if bad:
        k = bad[0]
        raise ValueError(
            f"perception encoder does not fit the policy: {k} is {tuple(encoder[k].shape)}, the policy's "
            f"{tuple(policy_weights[k].shape)} (the same policy config and camera rig are needed)"
        )
    return {**dict(policy_weights), **{k: v.clone() for k, v in encoder.items()}}
