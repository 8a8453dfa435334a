"""Stage perception (RAD's stage 1): the image encoder learns to see agents and the map from the cameras.

Design (RAD §3.2, kept small enough for two CPU cores):

- **Encoder**: ``policy.network.CameraEncoder``, the policy's own -- a strided CNN shared by every camera,
  a learned per-camera embedding, the cameras fused into one feature [B, E]. Stage perception trains it;
  stages il and rl load it into the policy and keep it frozen (``ActorCritic.freeze_cameras``): the
  planner reads the world only through what perception learned to see.
- **Heads** (:class:`BEVDecoder`): the fused feature -> a bird's-eye grid of ``cells`` x ``cells`` over
  ``range_m`` x ``range_m`` m around the ego (from ``behind_m`` behind the rear axle forward, centred
  laterally; ego frame, row i along x forward, column j along y left), five channels: agent occupancy
  (logit), agent velocity (vx, vy, m/s in the ego frame), drivable area (logit) and lane centre (logit).
- **Labels** from the digital twin's ground truth (:func:`bev_labels`): a cell is occupied when it
  overlaps an agent's or a static obstacle's box (its centre within half a cell of the box along the
  box's axes); its velocity is that agent's; drivable when its centre lies within half a lane width of
  a lane centre line; lane centre within ``LANE_CENTRE_M`` of one. Cells no camera sees (behind or
  beside the rig's fields of view, :func:`visible_cells`) are left out of losses and metrics.
- **Frames** are rendered once along every clip's expert drive, one every ``every`` steps, each seen
  from the expert's pose moved sideways by up to ``jitter_m`` m and turned by up to ``jitter_deg``
  degrees (seeded per clip and step, so closed-loop poses off the log are seen too), into a
  **frame cache** (:class:`FrameCache`): uint8 ``.npz`` shards of ``shard_frames`` frames, each with its
  sha256 in ``index.json``, read with ``allow_pickle=False``; a shard whose checksum fails is rendered
  again; the cache holds at most ``cache_mb`` MB (an evenly spaced subset of the planned frames when
  the plan is bigger). Epochs read the cache; nothing is re-rendered.
- **Metrics** on the validation frames, overall and per kind (:func:`evaluate_perception`):
  occupancy IoU, velocity error (mean |v - v*| m/s over truly occupied cells), drivable-area IoU,
  lane-centre IoU, each beside the IoU of the train set's per-cell prior (what a network that ignored
  its images could reach).
- **Checkpoints**: every epoch to the store run ``<run>-perception`` (``perception.safetensors``,
  the optimizer, ``perception.json`` with the epoch, history and metrics); a rerun resumes there, and a
  finished stage is not trained again.

``python -m learner.perception --bench`` prints the cache's render frames/s, the stage's training
frames/s and the camera-mode rollout + PPO loop's env-steps/s as JSON, with the machine's load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import socket
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from numba import njit
from torch import nn

from envs.config import EnvConfig
from envs.driving import DrivingEnv, rgb_to_uint8
from envs.vector import VectorDrivingEnv
from learner.config import PerceptionConfig
from policy.network import ActorCritic, CameraEncoder, PolicyConfig, layer_init
from sim import rendering  # called as rendering.render: the one place benches and tests count or patch
from sim.camera import CameraRig
from sim.configs import to_dict
from sim.files import atomic_path, atomic_write
from store import (
    RunStore,
    bytes_to_tensors,
    from_json_bytes,
    json_bytes,
    json_safe,
    optimizer_state_from_payload,
    optimizer_state_to_payload,
    tensors_to_bytes,
)

log = logging.getLogger("learner.perception")

CACHE_VERSION = 2  # 2: lane segments cropped by their distance to the ego, not by their vertices
LANE_CENTRE_M = 0.75  # a cell is on a lane centre when its centre is this close to a centre line
CHANNELS = ("occupancy", "vx", "vy", "drivable", "lane")  # the decoder's output channels
LABEL_KEYS = ("occupancy", "velocity", "drivable", "lane")
RENDER_BATCH = 8  # frames per render call while building a cache
MAX_POS_WEIGHT = 20.0  # cap of the positive-class weight of the occupancy / map losses
ENCODER_PREFIX = "encoders.cameras."  # where the encoder's weights sit in the policy's state_dict
STATE_FILE, OPT_FILE, OPT_TREE_FILE, META_FILE = (
    "perception.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "perception.json",
)


def perception_run_name(run: str) -> str:
    """The store run that holds a training run's perception checkpoints."""
    return f"{run}-perception"


# -- the grid and its labels -----------------------------------------------------------------------


@dataclass(frozen=True)
class BEVGrid:
    """cells x cells square cells over ``range_m`` m, from ``behind_m`` behind the rear axle forward,
    centred laterally (ego frame). Row i is along x (forward), column j along y (left)."""

    cells: int = 32
    range_m: float = 40.0
    behind_m: float = 4.0

    @property
    def cell_m(self) -> float:
        return self.range_m / self.cells

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """(x [G], y [G]) of the cell centres, metres, ego frame."""
        c = (np.arange(self.cells) + 0.5) * self.cell_m
        return c - self.behind_m, c - 0.5 * self.range_m

    def points(self) -> np.ndarray:
        """[G, G, 2] cell centres (x, y), ego frame: points[i, j] = (x[i], y[j])."""
        x, y = self.centres()
        return np.stack(np.meshgrid(x, y, indexing="ij"), axis=-1)


def grid_of(cfg: PerceptionConfig) -> BEVGrid:
    return BEVGrid(cfg.cells, cfg.range_m, cfg.behind_m)


def visible_cells(grid: BEVGrid, rig: CameraRig, min_depth: float = 0.5) -> np.ndarray:
    """bool [G, G]: cells whose centre on the ground (z = 0 in the ego frame) projects into some camera
    of the rig (at least ``min_depth`` m in front of it, inside its image columns)."""
    pts = grid.points().reshape(-1, 2)
    ground = np.concatenate([pts, np.zeros((len(pts), 1)), np.ones((len(pts), 1))], axis=1)  # [N, 4]
    seen = np.zeros(len(pts), dtype=bool)
    for cam in rig.cameras:
        p = (np.linalg.inv(cam.ego_T_cam) @ ground.T).T  # camera frame (OpenCV: z forward)
        z = p[:, 2]
        u = cam.fx * p[:, 0] / np.where(z > 0, z, 1.0) + cam.cx
        seen |= (z > min_depth) & (u >= 0) & (u < cam.width)
    return seen.reshape(grid.cells, grid.cells)


def _segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance [N] from points [N, 2] to the nearest of the segments a[s] -> b[s] (a, b: [S, 2], S >= 1).
    (The numpy reference of :func:`_segment_distance_fast`, which the labels use.)"""
    ab = b - a
    L2 = np.einsum("sk,sk->s", ab, ab)
    t = np.einsum("nsk,sk->ns", points[:, None, :] - a[None], ab) / np.where(L2 > 0, L2, 1.0)
    t = np.clip(t, 0.0, 1.0)
    d = points[:, None, :] - (a[None] + t[..., None] * ab[None])
    return np.sqrt(np.einsum("nsk,nsk->ns", d, d).min(axis=1))


@njit(cache=True, nogil=True)
def _segment_distance_fast(points, a, b):
    """:func:`_segment_distance` in numba: no [N, S, 2] temporaries (a frame's lanes: ~1 ms, not ~50)."""
    out = np.empty(points.shape[0])
    for n in range(points.shape[0]):
        px, py = points[n, 0], points[n, 1]
        best = np.inf
        for s in range(a.shape[0]):
            ex, ey = b[s, 0] - a[s, 0], b[s, 1] - a[s, 1]
            L2 = ex * ex + ey * ey
            qx, qy = px - a[s, 0], py - a[s, 1]
            u = (qx * ex + qy * ey) / L2 if L2 > 0 else 0.0
            u = min(max(u, 0.0), 1.0)
            dx, dy = qx - u * ex, qy - u * ey
            d2 = dx * dx + dy * dy
            if d2 < best:
                best = d2
        out[n] = math.sqrt(best)
    return out


def bev_labels(data, t: int, pose: Sequence[float] | np.ndarray, grid: BEVGrid) -> dict[str, np.ndarray]:
    """The ground truth around an ego at ``pose`` = (x, y, yaw) (world) at step t of a scenario.

    data: an ``envs.scenario_data.ScenarioData``. Returns occupancy uint8 [G, G], velocity float32
    [2, G, G] (vx, vy in the ego frame, m/s, zero where not occupied), drivable uint8 [G, G] and lane
    uint8 [G, G] (module docstring for the rules).
    """
    x, y, yaw = (float(v) for v in pose)
    c, s = math.cos(yaw), math.sin(yaw)
    local = grid.points().reshape(-1, 2)  # [N, 2] ego frame
    world = np.stack([x + c * local[:, 0] - s * local[:, 1], y + s * local[:, 0] + c * local[:, 1]], axis=1)
    G, half = grid.cells, 0.5 * grid.cell_m
    occ = np.zeros(len(local), dtype=np.uint8)
    vel = np.zeros((len(local), 2), dtype=np.float32)
    t = min(int(t), data.box_xy.shape[0] - 1)
    present = np.flatnonzero(data.box_present[t])
    reach = 0.5 * math.hypot(grid.range_m, grid.range_m) + grid.range_m  # far beyond any cell
    corner = float(np.hypot(local[:, 0], local[:, 1]).max()) + grid.cell_m  # the grid's farthest cell, and more
    for k in present:
        bx, by = data.box_xy[t, k]
        if math.hypot(bx - x, by - y) > reach:
            continue
        byaw = float(data.box_yaw[t, k])
        bc, bs = math.cos(byaw), math.sin(byaw)
        dx, dy = world[:, 0] - bx, world[:, 1] - by
        along, across = bc * dx + bs * dy, -bs * dx + bc * dy
        L, W = float(data.box_size[k, 0]), float(data.box_size[k, 1])
        inside = (np.abs(along) <= 0.5 * L + half) & (np.abs(across) <= 0.5 * W + half)
        if inside.any():
            occ[inside] = 1
            vx, vy = data.box_vel[t, k]
            vel[inside] = (c * vx + s * vy, -s * vx + c * vy)  # world -> ego frame
    drivable = np.zeros(len(local), dtype=bool)
    lane = np.zeros(len(local), dtype=bool)
    ego = np.array([[x, y]])
    for ln in data.scenario.map.lanes:
        line = np.asarray(ln.centerline, dtype=np.float64)
        if len(line) < 2:
            continue
        a, b = line[:-1], line[1:]
        # the segments that come near the grid (however long: a straight lane may be one segment)
        ab = b - a
        u = np.clip(np.einsum("sk,sk->s", ego - a, ab) / np.maximum(np.einsum("sk,sk->s", ab, ab), 1e-12), 0, 1)
        near = np.hypot(*(ego - (a + u[:, None] * ab)).T)  # [S] the ego's distance to each segment
        keep = near <= corner + 0.5 * float(ln.width)
        if not keep.any():
            continue
        dist = _segment_distance_fast(world, np.ascontiguousarray(a[keep]), np.ascontiguousarray(b[keep]))
        drivable |= dist <= 0.5 * float(ln.width)
        lane |= dist <= LANE_CENTRE_M
    return dict(
        occupancy=occ.reshape(G, G),
        velocity=np.ascontiguousarray(vel.reshape(G, G, 2).transpose(2, 0, 1)),
        drivable=drivable.reshape(G, G).astype(np.uint8),
        lane=lane.reshape(G, G).astype(np.uint8),
    )


# -- the frame cache -------------------------------------------------------------------------------


def _cache_root() -> Path:
    base = os.environ.get("SPLATDRIVE_CACHE")
    if base:
        return Path(base) / "perception"
    return Path(__file__).resolve().parent.parent / ".cache" / "perception"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def frame_pose(data, t: int, jitter_m: float, jitter_deg: float, seed: int) -> np.ndarray:
    """(x, y, yaw) of a frame: the expert's pose at step t moved sideways (along its left normal) by
    U(-jitter_m, jitter_m) m and turned by U(-jitter_deg, jitter_deg) degrees, drawn from a generator
    seeded with (seed, the clip's id, t) so a shard renders the same frames again, in any process."""
    p = data.expert_poses[t]
    x, y, yaw = float(p[0]), float(p[1]), float(p[3])
    clip = int.from_bytes(hashlib.sha256(str(data.id).encode()).digest()[:4], "little")
    rng = np.random.default_rng([seed, clip, t])
    off = rng.uniform(-jitter_m, jitter_m) if jitter_m > 0 else 0.0
    turn = math.radians(rng.uniform(-jitter_deg, jitter_deg)) if jitter_deg > 0 else 0.0
    return np.array([x - off * math.sin(yaw), y + off * math.cos(yaw), yaw + turn])


class FrameCache:
    """Rendered frames and their labels, in memory, from a folder of checksummed ``.npz`` shards.

    ``arrays``: cameras uint8 [N, C, H, W, 3], occupancy / drivable / lane uint8 [N, G, G], velocity
    float32 [N, 2, G, G], kind int64 [N] (index into ``kinds``), scenario int64 [N] (index into
    ``scenario_ids``), step int64 [N]. ``visible`` bool [G, G] (the rig's view). ``rendered``: frames
    rendered by this call (0 when everything came from disk); ``folder``: where the shards are.
    """

    def __init__(self, folder: Path, arrays: dict[str, np.ndarray], index: dict, rendered: int):
        self.folder, self.arrays, self.index, self.rendered = folder, arrays, index, rendered
        self.kinds: list[str] = list(index["kinds"])
        self.scenario_ids: list[str] = list(index["scenario_ids"])
        self.visible = np.asarray(index["visible"], dtype=bool)

    def __len__(self) -> int:
        return len(self.arrays["occupancy"])

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))

    @staticmethod
    def build(
        source,
        env_config: Mapping[str, Any] | EnvConfig | None,
        cfg: PerceptionConfig,
        every: int,
        *,
        name: str = "frames",
        root: Path | None = None,
        seed: int = 0,
        progress: Callable[[str], None] | None = None,
    ) -> FrameCache:
        """The cache of ``source``'s frames (a suite name, folder, file or Scenarios, as DrivingEnv takes
        them), rendered with ``env_config``'s rig, resolution and render backend; loaded when it is on
        disk and intact, else rendered (only the shards that are missing or fail their checksum)."""
        env_dict = env_config.to_dict() if isinstance(env_config, EnvConfig) else dict(env_config or {})
        env_dict = {**env_dict, "observation": "camera", "camera_ablation": "none", "cameras": True}
        env = DrivingEnv(env_dict, scenarios=source)
        pool, grid = env.pool, grid_of(cfg)
        plan = _frame_plan(env, every)
        C, H, W = len(env.rig), env.rig.height, env.rig.width
        per_frame = C * H * W * 3 + 3 * grid.cells**2 + 8 * grid.cells**2 + 24
        cap = int(cfg.cache_mb * 2**20 // per_frame)
        if len(plan) > cap:  # evenly spaced over the plan: every clip and kind keeps its share
            keep = np.unique(np.linspace(0, len(plan) - 1, max(cap, 1)).round().astype(int))
            log.warning(
                "perception cache %s: %d frames planned, %d fit in cache_mb=%s; keeping an evenly spaced %d",
                name,
                len(plan),
                cap,
                cfg.cache_mb,
                len(keep),
            )
            plan = [plan[i] for i in keep]
        key = _fingerprint(pool, env.config, cfg, every, seed, plan, (env.rig.name, W, H))
        folder = (root or _cache_root()) / f"{name}-{key}"
        kinds = sorted({str(pool.scenarios[k].kind or "unknown") for k, _ in plan})
        index = dict(
            version=CACHE_VERSION,
            key=key,
            kinds=kinds,
            scenario_ids=[str(s.id) for s in pool.scenarios],
            grid=asdict(grid),
            rig=dict(name=env.rig.name, width=W, height=H),
            visible=visible_cells(grid, env.rig).astype(int).tolist(),
            frames=len(plan),
            shard_frames=int(cfg.shard_frames),
            shards=[],
        )
        folder.mkdir(parents=True, exist_ok=True)
        old = _read_index(folder / "index.json")
        known = {s["file"]: s for s in (old or {}).get("shards", [])} if old and old.get("key") == key else {}
        parts: list[dict[str, np.ndarray]] = []
        rendered = 0
        n_shards = math.ceil(len(plan) / cfg.shard_frames)
        for i in range(n_shards):
            fname = f"shard-{i:05d}.npz"
            path = folder / fname
            entry = known.get(fname)
            arrays = _load_shard(path, entry) if entry else None
            if arrays is None:
                chunk = plan[i * cfg.shard_frames : (i + 1) * cfg.shard_frames]
                arrays = _render_shard(env, chunk, grid, cfg, seed, kinds)
                rendered += len(chunk)
                with atomic_path(path, suffix=".npz") as tmp:
                    np.savez(tmp, **arrays)  # type: ignore[arg-type]  # (numpy's stub types the first keyword)
                entry = dict(file=fname, frames=len(chunk), bytes=path.stat().st_size, sha256=_sha256(path))
                if progress:
                    progress(f"perception cache {name}: shard {i + 1}/{n_shards} rendered ({len(chunk)} frames)")
            index["shards"].append(entry)
            parts.append(arrays)
            # the index after every shard: an interrupted build keeps what it rendered
            atomic_write(folder / "index.json", json.dumps(index))
        env.close()
        if not parts:
            raise RuntimeError(f"perception cache {name}: no frames (no scenario in {source!r} could be used)")
        arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return FrameCache(folder, arrays, index, rendered)


def _frame_plan(env: DrivingEnv, every: int) -> list[tuple[int, int]]:
    """(clip index in the pool, step) of every frame: steps 0, every, 2 every, ... < each horizon."""
    plan = []
    for k in range(len(env.pool)):
        try:
            d = env.pool.data(k)
        except Exception as e:  # a broken clip is left out, not fatal
            log.error("perception frames: leaving out scenario %s: %s", env.pool.ids[k], e)
            continue
        plan += [(k, t) for t in range(0, d.horizon, every)]
    return plan


def _fingerprint(pool, env_cfg: EnvConfig, cfg: PerceptionConfig, every, seed, plan, rig) -> str:
    h = hashlib.sha256()
    what = dict(
        v=CACHE_VERSION,
        grid=asdict(grid_of(cfg)),
        every=every,
        jitter=(cfg.jitter_m, cfg.jitter_deg),
        seed=seed,
        rig=rig,
        backend=rendering.resolve_backend(env_cfg.render_backend),  # auto: what it renders with here
        horizon=env_cfg.horizon,
        frames=len(plan),
        lane_centre=LANE_CENTRE_M,
    )
    h.update(json.dumps(what, sort_keys=True).encode())
    h.update(json.dumps(plan).encode())
    for sc in pool.scenarios:
        h.update(str(sc.id).encode())
        path = getattr(sc, "path", None)
        if path is not None and Path(path).is_file():
            h.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()[:20]


def _read_index(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("version") == CACHE_VERSION else None


def _load_shard(path: Path, entry: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """The shard's arrays, or None (then it is rendered again) when it is missing, its size or sha256
    differ from the index, or it does not read (pickled payloads are refused, not loaded)."""
    try:
        if path.stat().st_size != entry.get("bytes") or _sha256(path) != entry.get("sha256"):
            log.warning("perception cache: %s fails its checksum; rendering it again", path)
            return None
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("perception cache: %s does not read (%s); rendering it again", path, e)
        return None
    if len(out.get("occupancy", ())) != entry.get("frames"):
        return None
    return out


def _render_shard(env: DrivingEnv, chunk, grid: BEVGrid, cfg: PerceptionConfig, seed: int, kinds) -> dict:
    rows: dict[str, list] = {k: [] for k in (*LABEL_KEYS, "cameras", "kind", "scenario", "step")}
    for start in range(0, len(chunk), RENDER_BATCH):
        reqs = []
        for k, t in chunk[start : start + RENDER_BATCH]:
            d = env.pool.data(k)
            pose = frame_pose(d, t, cfg.jitter_m, cfg.jitter_deg, seed)
            reqs.append(env.view_request(k, t, *pose))
            for key, v in bev_labels(d, t, pose, grid).items():
                rows[key].append(v)
            rows["kind"].append(kinds.index(str(d.scenario.kind or "unknown")))
            rows["scenario"].append(k)
            rows["step"].append(t)
        vms = torch.stack([v for _, v, _ in reqs])
        out = rendering.render(
            [c for c, _, _ in reqs],
            vms,
            env.rig.Ks(),
            env.rig.width,
            env.rig.height,
            backend=env.config.render_backend,
            far_plane=max(f for _, _, f in reqs),
        )
        rows["cameras"] += list(rgb_to_uint8(out.rgb))
    return {
        "cameras": np.stack(rows["cameras"]),
        "occupancy": np.stack(rows["occupancy"]),
        "velocity": np.stack(rows["velocity"]).astype(np.float32),
        "drivable": np.stack(rows["drivable"]),
        "lane": np.stack(rows["lane"]),
        "kind": np.asarray(rows["kind"], np.int64),
        "scenario": np.asarray(rows["scenario"], np.int64),
        "step": np.asarray(rows["step"], np.int64),
    }


# -- the network -----------------------------------------------------------------------------------


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


class PerceptionNet(nn.Module):
    """The policy's camera encoder with BEV heads. cameras uint8 [B, C, H, W, 3] -> [B, 5, G, G]."""

    def __init__(self, n_cams: int, height: int, width: int, policy_cfg: PolicyConfig, cells: int):
        super().__init__()
        self.encoder = CameraEncoder(n_cams, height, width, policy_cfg)
        self.decoder = BEVDecoder(policy_cfg.embed_dim, cells)

    def forward(self, cameras: torch.Tensor) -> torch.Tensor:
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


# -- metrics ---------------------------------------------------------------------------------------


def _iou(pred: np.ndarray, true: np.ndarray) -> float:
    inter = np.logical_and(pred, true).sum()
    union = np.logical_or(pred, true).sum()
    return float(inter / union) if union else math.nan


@torch.no_grad()
def predict(net: PerceptionNet, cameras: np.ndarray, batch: int = 64) -> np.ndarray:
    """[N, 5, G, G] float32: sigmoid probabilities (occupancy, drivable, lane) and velocities (m/s)."""
    net.eval()
    outs = []
    for i in range(0, len(cameras), batch):
        o = net(torch.from_numpy(np.ascontiguousarray(cameras[i : i + batch])))
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
    pred = predict(net, a["cameras"])
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


# -- training --------------------------------------------------------------------------------------


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


def _pos_weight(train: FrameCache) -> torch.Tensor:
    """[3] negatives / positives over visible cells of occupancy, drivable and lane, capped."""
    vis = train.visible[None]
    out = []
    for key in ("occupancy", "drivable", "lane"):
        pos = float((train.arrays[key].astype(bool) & vis).sum())
        tot = float(vis.sum() * len(train))
        out.append(min(MAX_POS_WEIGHT, (tot - pos) / max(pos, 1.0)))
    return torch.tensor(out, dtype=torch.float32)


def build_net(train: FrameCache, policy_cfg: PolicyConfig, cfg: PerceptionConfig) -> PerceptionNet:
    _, C, H, W, _ = train.arrays["cameras"].shape
    return PerceptionNet(C, H, W, policy_cfg, cfg.cells)


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
    ``cfg.batch_size``, shuffled by a generator seeded with (seed, epoch)); evaluate on ``val`` at the
    end. With ``run_store``, a checkpoint after every epoch, and a resume from its newest one (a stage
    already finished is loaded, not trained again)."""
    say = progress or (lambda msg: log.info("%s", msg))
    torch.manual_seed(seed)
    net = build_net(train, policy_cfg, cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    history: list = []
    start, fps = 0, math.nan
    if run_store is not None and run_store.latest() is not None:
        ck = run_store.load_latest()
        assert ck is not None
        meta = from_json_bytes(ck.files[META_FILE])
        net.load_state_dict(bytes_to_tensors(ck.files[STATE_FILE]))
        opt.load_state_dict(
            optimizer_state_from_payload(bytes_to_tensors(ck.files[OPT_FILE]), from_json_bytes(ck.files[OPT_TREE_FILE]))
        )
        start, history = int(meta["epoch"]), list(meta.get("history", []))
        if meta.get("done") and start >= cfg.epochs:
            say(f"perception: finished earlier ({start} epochs, {run_store.uri}@{ck.version}); not trained again")
            return PerceptionResult(
                net.encoder_weights(), meta.get("metrics") or {}, history, float(meta.get("frames_per_s", math.nan)),
                start, resumed_done=True,
            )  # fmt: skip
        say(f"perception: resuming at epoch {start}/{cfg.epochs} from {run_store.uri}@{ck.version}")
    pos_weight = _pos_weight(train)
    visible = torch.from_numpy(train.visible)
    tensors = {k: torch.from_numpy(train.arrays[k]) for k in ("cameras", *LABEL_KEYS)}
    n = len(train)
    seen, busy = 0, 0.0
    for epoch in range(start, cfg.epochs):
        net.train()
        gen = torch.Generator().manual_seed(seed * 1000 + epoch)
        perm = torch.randperm(n, generator=gen)
        sums: dict[str, float] = {}
        steps = 0
        t0 = time.perf_counter()
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            batch = {k: v[idx] for k, v in tensors.items()}
            out = net(batch["cameras"])
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
        history.append(row)
        say(
            f"perception epoch {epoch + 1}/{cfg.epochs} | loss {row['loss']:.3f} (occupancy {row['occupancy']:.3f}, "
            f"drivable {row['drivable']:.3f}, lane {row['lane']:.3f}, velocity {row['velocity']:.2f} m/s) | "
            f"{row['frames_per_s']:.0f} frames/s"
        )
        done = epoch + 1 == cfg.epochs
        metrics = evaluate_perception(net, val, train) if (done and val is not None) else {}
        if on_epoch:
            on_epoch(epoch + 1, row)
        if run_store is not None:
            _commit(run_store, net, opt, epoch + 1, history, metrics, done, fps, cfg, policy_cfg, train)
        if done:
            return PerceptionResult(net.encoder_weights(), metrics, history, fps, epoch + 1)
    metrics = evaluate_perception(net, val, train) if val is not None else {}
    return PerceptionResult(net.encoder_weights(), metrics, history, fps, cfg.epochs)


def _commit(rs: RunStore, net, opt, epoch, history, metrics, done, fps, cfg, policy_cfg, train) -> None:
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
) -> tuple[PerceptionResult, dict]:
    """The whole stage: both frame caches (built or loaded), training (or its finished checkpoint),
    metrics. Returns (result, info) with info: frames, cache folders and sizes, render frames/s."""
    say = progress or (lambda msg: log.info("%s", msg))
    t0 = time.perf_counter()
    train = FrameCache.build(train_suite, env_config, cfg, cfg.every, name="train", seed=cfg.seed, progress=say)
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
    result = train_perception(cfg, policy_cfg, train, val, seed=seed, run_store=run_store, progress=say)
    m = result.metrics.get("all") if result.metrics else None
    if m:
        say(
            f"perception on val: occupancy IoU {m['occupancy_iou']:.3f} (prior {m.get('prior_occupancy_iou', 0):.3f}), "
            f"velocity error {m['velocity_error']:.2f} m/s, drivable IoU {m['drivable_iou']:.3f} "
            f"(prior {m.get('prior_drivable_iou', 0):.3f}), lane IoU {m['lane_iou']:.3f} "
            f"(prior {m.get('prior_lane_iou', 0):.3f})"
        )
    return result, info


def lease_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# -- benchmark -------------------------------------------------------------------------------------


def _load() -> dict:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return {}
    return dict(load_1m=round(one, 2), load_5m=round(five, 2), load_15m=round(fifteen, 2), cpus=os.cpu_count())


def bench(suite: str = "train", frames: int = 32, steps: int = 64, threads: int = 1) -> dict:
    """Throughput figures (JSON-able) on this machine, now: the frame cache's rendering + labelling
    (frames/s, scenes loaded beforehand: 4 clips, ``frames`` frames), the stage's training (frames/s,
    forward + backward at batch 32) and the camera-mode rollout (a vector env of 4 with the policy acting,
    frozen encoder) in env-steps/s. The load average before and after goes with them: figures from a
    loaded machine are not final."""
    torch.set_num_threads(threads)
    cfg = PerceptionConfig(shard_frames=frames, cache_mb=1e6)
    out: dict[str, Any] = dict(load_before=_load(), threads=threads, suite=suite)
    env = DrivingEnv({"render_backend": "auto"}, scenarios=suite)
    clips = [env.pool.scenarios[k] for k in range(min(4, len(env.pool)))]
    for k in range(len(clips)):  # PLYs read before the clock starts (a cache build reads each once)
        env.pool.data(k).load_scene()
    every = max(1, (len(clips) * env.pool.data(0).horizon) // frames)
    env.close()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cache = FrameCache.build(clips, {"render_backend": "auto"}, cfg, every, name="bench", root=Path(tmp))
        dt = time.perf_counter() - t0
        out["cache_render"] = dict(frames=len(cache), seconds=round(dt, 2), frames_per_s=round(len(cache) / dt, 2))
        net = build_net(cache, PolicyConfig(), cfg)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        tensors = {k: torch.from_numpy(cache.arrays[k]) for k in ("cameras", *LABEL_KEYS)}
        vis, pw = torch.from_numpy(cache.visible), _pos_weight(cache)
        bs = min(32, len(cache))
        times = []
        for i in range(4):
            t0 = time.perf_counter()
            batch = {k: v[:bs] for k, v in tensors.items()}
            loss, _ = perception_loss(net(batch["cameras"]), batch, vis, pw, 0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i:  # the first step allocates
                times.append(time.perf_counter() - t0)
        out["perception_train"] = dict(batch=bs, frames_per_s=round(bs / float(np.mean(times)), 2))
    out["camera_rollout"] = _bench_rollout(suite, steps)
    out["load_after"] = _load()
    return out


def _bench_rollout(suite: str, steps: int) -> dict:
    """env-steps/s of a 4-env camera-mode vector env with the policy choosing the actions (what a
    rollout actor does), and the policy's share of it."""
    venv = VectorDrivingEnv(suite, 4, {"render_backend": "auto"})
    space = venv.envs[0].observation_space
    assert isinstance(space, gym.spaces.Dict)
    net = ActorCritic(space, venv.action_spec)
    net.freeze_cameras()
    obs, _ = venv.reset(seed=0)

    def act(o):
        with torch.no_grad():
            return net.act({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in o.items()}).action.numpy()

    for _ in range(4):
        obs, *_ = venv.step(act(obs))
    policy_s = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        t1 = time.perf_counter()
        a = act(obs)
        policy_s += time.perf_counter() - t1
        obs, *_ = venv.step(a)
    dt = time.perf_counter() - t0
    venv.close()
    return dict(num_envs=4, steps=4 * steps, seconds=round(dt, 2), env_steps_per_s=round(4 * steps / dt, 2),
                policy_share=round(policy_s / dt, 3))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m learner.perception",
        description="Stage perception's figures. The stage itself runs in python -m learner.train stage=perception.",
    )
    parser.add_argument("--bench", action="store_true", help="print throughput figures as JSON")
    parser.add_argument("--suite", default="train", help="scenarios for the benchmark")
    parser.add_argument("--frames", type=int, default=32, help="frames rendered for the cache figure")
    parser.add_argument("--steps", type=int, default=64, help="vector-env steps for the rollout figure")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(bench(args.suite, args.frames, args.steps, args.threads), indent=2))
    return 0


__all__ = [
    "BEVDecoder",
    "BEVGrid",
    "FrameCache",
    "PerceptionNet",
    "PerceptionResult",
    "bev_labels",
    "evaluate_perception",
    "perception_run_name",
    "run_stage",
    "train_perception",
    "visible_cells",
    "with_encoder",
]

if __name__ == "__main__":
    raise SystemExit(main())
