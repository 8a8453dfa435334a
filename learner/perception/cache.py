"""The frame cache: frames rendered once along every clip's expert drive, with their BEV labels.

Which frames (:func:`frame_plan`): ``frames`` of them drawn evenly over the clips (every clip gets its
share, at steps spread over its horizon), or one every ``every`` steps of each clip. Each is seen from the
expert's pose moved sideways by up to ``jitter_m`` m and turned by up to ``jitter_deg`` degrees (seeded
per clip and step, so closed-loop poses off the log are seen too), stored as uint8 ``.npz`` shards of
``shard_frames`` frames, each with its sha256 in ``index.json``, read with ``allow_pickle=False``; a shard
whose checksum fails is rendered again; the cache holds at most ``cache_mb`` MB (an evenly spaced subset
of the planned frames when the plan is bigger). Epochs read the cache; nothing is re-rendered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.config import EnvConfig
from envs.demos import expert_motion
from envs.driving import DrivingEnv, rgb_to_uint8
from learner.config import PerceptionConfig
from learner.perception.labels import LABEL_KEYS, LANE_CENTRE_M, BEVGrid, bev_labels, grid_of, visible_cells
from sim import rendering  # called as rendering.render: the one place benches and tests count or patch
from sim.files import atomic_path, atomic_write, cache_dir, sha256_file
from sim.seeding import derive_seed

log = logging.getLogger(__name__)

# 2: lane segments cropped by their distance to the ego, not by their vertices; 3: frames drawn evenly over
# the clips (perception.frames), pose jitter seeded by derive_seed; 5: the ego's speed and yaw rate per frame
CACHE_VERSION = 5
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # clip k's steps start at frac(k * GOLDEN) of a stride: phases spread evenly
RENDER_BATCH = 8  # frames per render call while building a cache


def frame_pose(data, t: int, jitter_m: float, jitter_deg: float, seed: int, at: int | None = None) -> np.ndarray:
    """(x, y, yaw) of a frame: the expert's pose at step t moved sideways (along its left normal) by
    U(-jitter_m, jitter_m) m and turned by U(-jitter_deg, jitter_deg) degrees, drawn from a generator
    seeded with ``derive_seed(seed, clip, t)`` (clip: the first 4 bytes of the sha256 of the clip's id) so a
    shard renders the same frames again, in any process. ``at``: the same offset from the expert's pose at
    step ``at`` instead (a frame's earlier images, ``EnvConfig.camera_history``)."""
    p = data.expert_poses[t if at is None else at]
    x, y, yaw = float(p[0]), float(p[1]), float(p[3])
    clip = int.from_bytes(hashlib.sha256(str(data.id).encode()).digest()[:4], "little")
    rng = np.random.default_rng(derive_seed(seed, clip, t))
    off = rng.uniform(-jitter_m, jitter_m) if jitter_m > 0 else 0.0
    turn = math.radians(rng.uniform(-jitter_deg, jitter_deg)) if jitter_deg > 0 else 0.0
    return np.array([x - off * math.sin(yaw), y + off * math.cos(yaw), yaw + turn])


class FrameCache:
    """Rendered frames and their labels, in memory, from a folder of checksummed ``.npz`` shards.

    ``arrays``: cameras uint8 [N, C, H, W, 3] ([N, 2C, ...] with ``camera_history``), ego float32 [N, 2] (the
    expert's speed and yaw rate, ``envs.demos.expert_motion``), occupancy / drivable / lane uint8 [N, G, G], velocity
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
        every: int = 0,
        *,
        frames: int = 0,
        name: str = "frames",
        root: Path | None = None,
        seed: int = 0,
        progress: Callable[[str], None] | None = None,
    ) -> FrameCache:
        """The cache of ``source``'s frames (a suite name, folder, file or Scenarios, as DrivingEnv takes
        them), rendered with ``env_config``'s rig, resolution and render backend; loaded when it is on
        disk and intact, else rendered (only the shards that are missing or fail their checksum). Which
        frames: ``frames`` drawn evenly over the clips, or (``every`` > 0 instead) one every ``every``
        steps of each clip, as :func:`frame_plan`."""
        if (every > 0) == (frames > 0):
            raise ValueError(f"perception cache {name}: give frames > 0 or every > 0 (one), got {frames=}, {every=}")
        env_dict = env_config.to_dict() if isinstance(env_config, EnvConfig) else dict(env_config or {})
        env_dict = {**env_dict, "observation": "camera", "camera_ablation": "none", "cameras": True}
        env = DrivingEnv(env_dict, scenarios=source)
        pool, grid = env.pool, grid_of(cfg)
        plan = _frame_plan(env, every, frames)
        C, H, W = len(env.rig) * (2 if env.config.camera_history else 1), env.rig.height, env.rig.width
        per_frame = C * H * W * 3 + 3 * grid.cells**2 + 8 * grid.cells**2 + 32
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
        key = _fingerprint(pool, env.config, cfg, (every, frames), seed, plan, (env.rig.name, W, H))
        folder = (root or cache_dir("perception")) / f"{name}-{key}"
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
                entry = dict(file=fname, frames=len(chunk), bytes=path.stat().st_size, sha256=sha256_file(path))
                if progress:
                    progress(f"perception cache {name}: shard {i + 1}/{n_shards} rendered ({len(chunk)} frames)")
            index["shards"].append(entry)
            parts.append(arrays)
            if rendered:
                # the index after every rendered shard, listing the intact ones still ahead too: an interrupted
                # build keeps what it rendered and what was already there
                ahead = [known[f] for j in range(i + 1, n_shards) if (f := f"shard-{j:05d}.npz") in known]
                atomic_write(folder / "index.json", json.dumps({**index, "shards": index["shards"] + ahead}))
        if not rendered and old != index:
            atomic_write(folder / "index.json", json.dumps(index))
        env.close()
        if not parts:
            raise RuntimeError(f"perception cache {name}: no frames (no scenario in {source!r} could be used)")
        arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return FrameCache(folder, arrays, index, rendered)


def frame_plan(horizons: Sequence[int], *, every: int = 0, frames: int = 0) -> list[tuple[int, int]]:
    """(clip, step) of every frame, clip by clip, for clips of ``horizons`` steps (a frame at step t < its
    horizon).

    ``every`` > 0: steps 0, every, 2 every, ... of each clip. Else ``frames`` drawn evenly over the clips:
    each of the N clips gets ``frames // N`` and the remaining ``frames % N`` go one each to clips spread
    evenly over the list (with fewer frames than clips: one each to ``frames`` clips spread evenly), at most
    one per step; clip k's n frames lie at steps ``floor((i + phase_k) * horizon / n)``, i < n, one in each
    n-th of its horizon, ``phase_k = frac(k * 0.618...)`` (the golden ratio's: neighbouring clips, often the
    same place in other traffic, are seen at other moments).
    """
    n = len(horizons)
    if every > 0:
        return [(k, t) for k, h in enumerate(horizons) for t in range(0, int(h), every)]
    if frames < 1:
        raise ValueError(f"frame_plan: expected frames >= 1 or every >= 1, got {frames=}, {every=}")
    if n == 0:
        return []
    per = np.full(n, frames // n, dtype=np.int64)
    extra = frames % n
    per[(np.arange(extra) * n) // extra] += 1  # extra clips spread evenly: k = floor(i n / extra), i < extra
    plan = []
    for k, (h, m) in enumerate(zip(horizons, per.tolist(), strict=True)):
        m = min(m, int(h))
        phase = (k * GOLDEN) % 1.0
        plan += [(k, min(int((i + phase) * h / m), int(h) - 1)) for i in range(m)]
    return plan


def _frame_plan(env: DrivingEnv, every: int, frames: int) -> list[tuple[int, int]]:
    """:func:`frame_plan` over the pool's usable clips: (clip index in the pool, step) of every frame."""
    usable, horizons = [], []
    for k in range(len(env.pool)):
        try:
            d = env.pool.data(k)
        except Exception as e:  # a broken clip is left out, not fatal
            log.error("perception frames: leaving out scenario %s: %s", env.pool.ids[k], e)
            continue
        usable.append(k)
        horizons.append(d.horizon)
    return [(usable[j], t) for j, t in frame_plan(horizons, every=every, frames=frames)]


def _fingerprint(pool, env_cfg: EnvConfig, cfg: PerceptionConfig, sampling, seed, plan, rig) -> str:
    """The cache's key: what decides its frames and labels (``sampling``: (every, frames)), the plan itself,
    and each scenario's id and file sha256."""
    h = hashlib.sha256()
    what = dict(
        v=CACHE_VERSION,
        grid=asdict(grid_of(cfg)),
        sampling=sampling,
        jitter=(cfg.jitter_m, cfg.jitter_deg),
        seed=seed,
        rig=rig,
        backend=rendering.resolve_backend(env_cfg.render_backend),  # auto: what it renders with here
        horizon=env_cfg.horizon,
        frames=len(plan),
        lane_centre=LANE_CENTRE_M,
        **({"history": env_cfg.camera_history} if env_cfg.camera_history else {}),
    )
    h.update(json.dumps(what, sort_keys=True).encode())
    h.update(json.dumps(plan).encode())
    for sc in pool.scenarios:
        h.update(str(sc.id).encode())
        path = getattr(sc, "path", None)
        if path is not None and Path(path).is_file():
            h.update(bytes.fromhex(sha256_file(path)))
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
        if path.stat().st_size != entry.get("bytes") or sha256_file(path) != entry.get("sha256"):
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
    """The frames of ``chunk`` ((clip, step) each) and their labels; with ``camera_history`` k, each frame's
    images are the rig's now and k steps earlier (the same offset from the expert's pose then), as the env
    stacks them."""
    rows: dict[str, list] = {k: [] for k in (*LABEL_KEYS, "cameras", "ego", "kind", "scenario", "step")}
    history = env.config.camera_history
    for start in range(0, len(chunk), RENDER_BATCH):
        reqs = []
        for k, t in chunk[start : start + RENDER_BATCH]:
            d = env.pool.data(k)
            pose = frame_pose(d, t, cfg.jitter_m, cfg.jitter_deg, seed)
            reqs.append(env.view_request(k, t, *pose))
            if history:
                past = max(t - history, 0)
                reqs.append(env.view_request(k, past, *frame_pose(d, t, cfg.jitter_m, cfg.jitter_deg, seed, at=past)))
            for key, v in bev_labels(d, t, pose, grid).items():
                rows[key].append(v)
            m = expert_motion(d, t)  # the ego part's first two features, as the demonstrations have them
            rows["ego"].append((float(m["state"][3]), float(m["yaw_rate"])))
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
        images = rgb_to_uint8(out.rgb)  # [S, C, H, W, 3]
        if history:  # (now, then) pairs -> [S / 2, 2C, H, W, 3]
            images = images.reshape(-1, 2 * images.shape[1], *images.shape[2:])
        rows["cameras"] += list(images)
    return {
        "cameras": np.stack(rows["cameras"]),
        "ego": np.asarray(rows["ego"], np.float32).reshape(-1, 2),
        "occupancy": np.stack(rows["occupancy"]),
        "velocity": np.stack(rows["velocity"]).astype(np.float32),
        "drivable": np.stack(rows["drivable"]),
        "lane": np.stack(rows["lane"]),
        "kind": np.asarray(rows["kind"], np.int64),
        "scenario": np.asarray(rows["scenario"], np.int64),
        "step": np.asarray(rows["step"], np.int64),
    }
