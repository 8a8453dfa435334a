"""Pictures: camera tiles, enlarging, text overlays, PNG and MP4 writing (used by ``python -m
sim.render``, envs' rgb_array and the evaluation's videos).

Libraries: OpenCV (``cv2``) enlarges frames and draws text; Pillow writes PNGs; imageio-ffmpeg writes
MP4s (H.264, yuv420p: what browsers play). OpenCV and imageio are optional extras (viz), imported
where they are used, so ``sim`` imports without them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from sim.camera import CameraRig
from sim.files import atomic_path, temporary_path

if TYPE_CHECKING:  # imageio is an optional extra (viz), imported where it is used
    from imageio.core.format import Format


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
    """Nearest-neighbour enlargement by a whole ``factor`` (each pixel becomes factor x factor), for
    looking at 128x64 frames: [H, W(, K)] -> [factor*H, factor*W(, K)]."""
    if factor <= 1:
        return img
    import cv2  # optional (the viz extra)

    h, w = img.shape[:2]
    # NEAREST_EXACT samples at pixel centres: each source pixel becomes a factor x factor block
    return cv2.resize(np.ascontiguousarray(img), (w * factor, h * factor), interpolation=cv2.INTER_NEAREST_EXACT)


def caption(frame: np.ndarray, text: str, scale: float = 0.35) -> np.ndarray:
    """A copy of frame [H, W, 3] uint8 with ``text`` in white on a black box in its top-left corner."""
    import cv2  # optional (the viz extra)

    img = np.array(to_uint8(frame), copy=True, order="C")
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    cv2.rectangle(img, (0, 0), (w + 7, h + base + 5), (0, 0, 0), -1)
    cv2.putText(img, text, (4, h + 3), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def banner(frame: np.ndarray, text: str, color=(200, 30, 30), where: str = "bottom", band: int = 18) -> np.ndarray:
    """A copy of frame [H, W, 3] uint8 with ``text`` in white on a ``color`` band ``band`` px high across
    its bottom (or top)."""
    import cv2  # optional (the viz extra)

    if where not in ("bottom", "top"):
        raise ValueError(f"banner: where must be 'bottom' or 'top', got {where!r}")
    img = np.array(to_uint8(frame), copy=True, order="C")
    H = img.shape[0]
    y0 = H - band if where == "bottom" else 0
    img[max(y0, 0) : y0 + band] = color
    (_, h), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
    cv2.putText(img, text, (6, y0 + (band + h) // 2), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def write_png(path: str | Path, img: np.ndarray) -> Path:
    p = Path(path)
    with atomic_path(p, suffix=".png") as tmp:
        Image.fromarray(to_uint8(img)).save(tmp, format="PNG")
    return p


class Mp4Writer:
    """H.264 MP4 through imageio-ffmpeg; frames of one size, written to a temp file then renamed."""

    def __init__(self, path: str | Path, fps: float = 10.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_path(self.path, suffix=".mp4")
        self._writer: Format.Writer | None = None
        self.fps = fps
        self.frames = 0

    def add(self, img: np.ndarray) -> None:
        import imageio.v2 as imageio  # optional (the viz extra), with imageio-ffmpeg for the H.264 encoder

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
