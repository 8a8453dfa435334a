"""Scenes: a static background plus actor assets posed per time step (Street Gaussians / OmniRe style).

An asset is a GaussianCloud in its box frame (``sim.frames``), shared by any number of actors. At a
time step a scene composes into a :class:`Composite`: the background and each visible actor's asset
with its world_T_box pose. Renderers draw a Composite directly (the CPU renderer projects each part
through ``viewmat @ world_T_box``, so per-asset work is done once, not per frame);
:meth:`Composite.to_cloud` materialises one world cloud (SH rotated with the asset) for the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from sim.frames import is_rigid, poses_to_matrices
from sim.gaussians import GaussianCloud


@dataclass(frozen=True, eq=False)
class Instance:
    """An asset placed in the world: ``asset`` is in its box frame, ``world_T_box`` [4, 4] rigid."""

    asset: GaussianCloud
    world_T_box: np.ndarray


@dataclass(frozen=True, eq=False)
class Composite:
    """What one scene shows at one instant: the static background and the posed actors."""

    background: GaussianCloud
    instances: tuple[Instance, ...] = ()

    def __len__(self) -> int:
        return len(self.background) + sum(len(i.asset) for i in self.instances)

    def parts(self) -> list[tuple[GaussianCloud, np.ndarray]]:
        """(cloud, world_T_cloud) for the background (identity) and each instance."""
        return [(self.background, np.eye(4))] + [(i.asset, i.world_T_box) for i in self.instances]

    def to_cloud(self) -> GaussianCloud:
        """One world-frame cloud: background followed by each instance's transformed asset."""
        return GaussianCloud.cat(
            [self.background] + [i.asset.to(self.background.device).transform(i.world_T_box) for i in self.instances]
        )


@dataclass(frozen=True)
class ActorTrack:
    """One actor's asset name, planar poses [T, 4] (x, y, z, yaw of its box frame) and presence [T]."""

    asset: str
    poses: np.ndarray
    present: np.ndarray

    def __post_init__(self):
        T = len(self.poses)
        if np.asarray(self.poses).shape != (T, 4) or np.asarray(self.present).shape != (T,):
            raise ValueError(f"ActorTrack: poses must be [T, 4] and present [T], got {np.shape(self.poses)}")


@dataclass
class Scene:
    """A digital twin over time: background, assets by name, and actor tracks by id."""

    background: GaussianCloud
    assets: Mapping[str, GaussianCloud] = field(default_factory=dict)
    actors: Mapping[str, ActorTrack] = field(default_factory=dict)

    def __post_init__(self):
        for aid, tr in self.actors.items():
            if tr.asset not in self.assets:
                raise ValueError(f"actor {aid!r} uses asset {tr.asset!r}, not among {sorted(self.assets)}")
        self._mats = {aid: poses_to_matrices(tr.poses) for aid, tr in self.actors.items()}

    @property
    def num_steps(self) -> int:
        return max((len(t.poses) for t in self.actors.values()), default=0)

    def compose(self, step: int, extra: tuple[Instance, ...] = ()) -> Composite:
        """The composite at time index ``step``: every actor present then, plus ``extra`` instances.

        An actor whose track is shorter than ``step`` is absent (it has left the log).
        """
        inst = []
        for aid, tr in self.actors.items():
            if step < len(tr.poses) and tr.present[step]:
                inst.append(Instance(self.assets[tr.asset], self._mats[aid][step]))
        return Composite(self.background, tuple(inst) + tuple(extra))


def check_instance(inst: Instance) -> None:
    if np.asarray(inst.world_T_box).shape != (4, 4) or not is_rigid(inst.world_T_box):
        raise ValueError("Instance.world_T_box must be a rigid 4x4 transform")
