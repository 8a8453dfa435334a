"""A scenario's ``sim.Scene``: PLYs loaded once per process and shared between scenarios.

Clouds are cached by (resolved path, size, mtime), so an asset PLY shared by a suite's scenarios is
read once, and a file rewritten on disk is read again. Backgrounds (megabytes each) are kept in a
bounded LRU (``BACKGROUND_CACHE_SIZE``); assets (small) are kept while the process lives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from scenarios.format import Scenario
from sim.gaussians import GaussianCloud
from sim.ply import load_ply
from sim.scene import ActorTrack, Scene

BACKGROUND_CACHE_SIZE = 16

_lock = threading.Lock()
_backgrounds: OrderedDict[tuple, GaussianCloud] = OrderedDict()
_assets: dict[tuple, GaussianCloud] = {}


def cloud_key(path: Path) -> tuple:
    """What identifies a PLY's contents in the caches: (resolved path, size, mtime)."""
    st = Path(path).stat()
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def load_cloud(path: Path, kind: str = "asset") -> GaussianCloud:
    """The cloud in ``path`` (a 3DGS PLY), read at most once per process while the file is unchanged."""
    key = cloud_key(path)
    with _lock:
        cache = _backgrounds if kind == "background" else _assets
        if key in cache:
            if kind == "background":
                _backgrounds.move_to_end(key)
            return cache[key]
    cloud = load_ply(path)
    with _lock:
        cache[key] = cloud
        if kind == "background":
            while len(_backgrounds) > BACKGROUND_CACHE_SIZE:
                _backgrounds.popitem(last=False)
    return cloud


def clear_cache() -> None:
    """Forget every cached cloud (tests, or to free memory)."""
    with _lock:
        _backgrounds.clear()
        _assets.clear()


def load_scene(scenario: Scenario) -> Scene:
    """``sim.Scene`` for ``scenario``: background, the assets its agents use (by name), and one
    ActorTrack per agent that has an asset (poses and presence over steps 0..horizon).

    Agents without an asset (``asset: null``) are not rendered but still collide in the env.
    """
    background = load_cloud(scenario.scene.background, "background")
    used = sorted({a.asset for a in scenario.agents if a.asset is not None})
    assets = {name: load_cloud(scenario.scene.assets[name]) for name in used}
    actors = {
        a.id: ActorTrack(a.asset, np.asarray(a.poses, dtype=np.float64), np.asarray(a.present, dtype=bool))
        for a in scenario.agents
        if a.asset is not None
    }
    return Scene(background=background, assets=assets, actors=actors)
