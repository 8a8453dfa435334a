"""Pictures: camera tiles, PNG and MP4 writing (used by sim.render, envs' rgb_array and reports)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from sim.camera import CameraRig


def camera_yaw_deg(rig: CameraRig) -> np.ndarray:
    """Yaw (deg, left positive) of each camera's optical axis in the ego frame: [C]."""
    z = rig.ego_T_cams()[:, :3, 2]
    return np.degrees(np.arctan2(z[:, 1], z[:, 0]))


def display_order(rig: CameraRig) -> np.ndarray:
    """Camera indices left to right as a driver would see them (largest yaw first)."""
    return np.argsort(-camera_yaw_deg(rig), kind="stable")


def to_uint8(img) -> np.ndarray:
    a = np.asarray(img)
    if a.dtype == np.uint8:
        return a
    return (np.clip(a, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def tile_cameras(images, rig: CameraRig | None = None, gap: int = 2) -> np.ndarray:
    """Camera images [C, H, W, 3] (float in [0, 1] or uint8) side by side, left to right: [H, C*W + gaps, 3]."""
    imgs = to_uint8(images.numpy() if hasattr(images, "numpy") else images)
    order = display_order(rig) if rig is not None else np.arange(imgs.shape[0])
    C, H, W, _ = imgs.shape
    out = np.zeros((H, C * W + gap * (C - 1), 3), np.uint8)
    for k, c in enumerate(order):
        out[:, k * (W + gap) : k * (W + gap) + W] = imgs[c]
    return out


def upscale(img: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour enlargement, for looking at 128x64 frames."""
    return img if factor <= 1 else np.repeat(np.repeat(img, factor, 0), factor, 1)


def write_png(path: str | Path, img: np.ndarray) -> Path:
    from PIL import Image

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    Image.fromarray(to_uint8(img)).save(tmp, format="PNG")
    os.replace(tmp, p)
    return p


class Mp4Writer:
    """H.264 MP4 through imageio-ffmpeg; frames of one size, written to a temp file then renamed."""

    def __init__(self, path: str | Path, fps: float = 10.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.stem + ".tmp.mp4")
        self._writer = None
        self.fps = fps
        self.frames = 0

    def add(self, img: np.ndarray) -> None:
        import imageio.v2 as imageio

        frame = to_uint8(img)
        # H.264 wants even dimensions
        h, w = frame.shape[:2]
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
        if self._writer is None:
            self._writer = imageio.get_writer(
                self._tmp, fps=self.fps, codec="libx264", quality=8, macro_block_size=1, pixelformat="yuv420p"
            )
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> Path:
        if self._writer is not None:
            self._writer.close()
            os.replace(self._tmp, self.path)
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        elif self._writer is not None:
            self._writer.close()
            self._tmp.unlink(missing_ok=True)


def grid(images: list[np.ndarray], cols: int, gap: int = 2) -> np.ndarray:
    """Same-size uint8 images [H, W, 3] in a grid with ``cols`` columns."""
    imgs = [to_uint8(i) for i in images]
    H, W = imgs[0].shape[:2]
    rows = math.ceil(len(imgs) / cols)
    out = np.zeros((rows * H + gap * (rows - 1), cols * W + gap * (cols - 1), 3), np.uint8)
    for k, im in enumerate(imgs):
        r, c = divmod(k, cols)
        out[r * (H + gap) : r * (H + gap) + H, c * (W + gap) : c * (W + gap) + W] = im
    return out
