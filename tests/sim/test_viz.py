"""sim.viz: enlarging (against np.repeat), text overlays (where they draw and what they leave), PNGs."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sim.viz import banner, caption, upscale, write_png


@pytest.mark.parametrize("factor", [1, 2, 3, 5])
@pytest.mark.parametrize("shape", [(5, 7, 3), (33, 65, 3), (4, 9)])
def test_upscale_repeats_every_pixel(factor, shape):
    img = np.random.default_rng(factor).integers(0, 256, shape, dtype=np.uint8)
    np.testing.assert_array_equal(upscale(img, factor), np.repeat(np.repeat(img, factor, 0), factor, 1))


def test_caption_draws_white_text_on_black_in_the_top_left_only():
    frame = np.full((64, 200, 3), 120, np.uint8)
    out = caption(frame, "policy | s0 | step 3")
    assert (frame == 120).all()  # a copy: the input is left alone
    changed = (out != 120).any(-1)
    rows, cols = np.nonzero(changed)
    assert rows.min() == 0 and cols.min() == 0 and rows.max() < 20 and cols.max() < 200
    box = out[: rows.max() + 1, : cols.max() + 1]
    assert ((box == 0).all(-1).mean() > 0.5) and (box.min(-1) > 200).any()  # mostly black, some white text
    assert (out[rows.max() + 1 :] == 120).all()
    longer = (caption(frame, "policy | s0 | step 3 and more") != 120).any(-1)
    assert np.nonzero(longer)[1].max() > cols.max()  # the box grows with the text


@pytest.mark.parametrize("where", ["bottom", "top"])
def test_banner_fills_a_band_with_its_colour_and_text(where):
    frame = np.zeros((60, 320, 3), np.uint8)
    out = banner(frame, "static_collision at step 12", (30, 130, 60), where=where, band=18)
    band = out[42:] if where == "bottom" else out[:18]
    rest = out[:42] if where == "bottom" else out[18:]
    assert (rest == 0).all()
    green = (band == (30, 130, 60)).all(-1)
    assert green.mean() > 0.7 and (band.min(-1) > 200).any()  # the band's colour, white text on it
    assert green[:, -20:].all()  # the text starts at the left and ends well before the right edge
    with pytest.raises(ValueError, match="where"):
        banner(frame, "x", where="middle")


def test_write_png_round_trips(tmp_path):
    img = np.random.default_rng(0).integers(0, 256, (17, 23, 3), dtype=np.uint8)
    p = write_png(tmp_path / "a" / "x.png", img)
    np.testing.assert_array_equal(np.asarray(Image.open(p)), img)
    np.testing.assert_array_equal(np.asarray(Image.open(write_png(tmp_path / "f.png", img / 255.0))), img)
    assert sorted(q.name for q in tmp_path.rglob("*")) == ["a", "f.png", "x.png"]  # no temporary left
