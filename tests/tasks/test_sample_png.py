"""Sample grids as PNG files: enlarged pixel for pixel (nearest neighbour), with a caption below."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lintf.tasks.image_generation import MIN_SIDE, save_png


@pytest.mark.parametrize("channels", [1, 3])
def test_each_pixel_becomes_a_block(tmp_path, channels):
    rng = np.random.default_rng(0)
    grid = rng.integers(0, 256, size=(5, 7, channels), dtype=np.uint8)
    save_png(grid, tmp_path / "grid.png", scale=3)
    saved = np.asarray(Image.open(tmp_path / "grid.png")).reshape(15, 21, channels)
    expected = grid.repeat(3, axis=0).repeat(3, axis=1)  # the reference: every pixel a 3 x 3 block
    assert np.array_equal(saved, expected)


def test_the_default_scale_makes_the_longer_side_at_least_min_side(tmp_path):
    save_png(np.zeros((30, 118, 1), dtype=np.uint8), tmp_path / "grid.png")
    scale = -(-MIN_SIDE // 118)
    assert Image.open(tmp_path / "grid.png").size == (118 * scale, 30 * scale)
    assert (118 * (scale - 1)) < MIN_SIDE <= 118 * scale


def test_the_caption_is_written_below_the_unchanged_image(tmp_path):
    grid = np.full((10, 100, 3), 128, dtype=np.uint8)
    save_png(grid, tmp_path / "grid.png", caption="completions: top half given", scale=4)
    saved = np.asarray(Image.open(tmp_path / "grid.png"))
    assert saved.shape[1] == 400 and saved.shape[0] > 40
    assert np.array_equal(saved[:40], grid.repeat(4, axis=0).repeat(4, axis=1))
    band = saved[40:]
    assert (band == 255).mean() > 0.7 and (band < 100).any()  # white with dark text


def test_a_long_caption_wraps_to_more_lines(tmp_path):
    grid = np.zeros((100, 100, 1), dtype=np.uint8)
    save_png(grid, tmp_path / "short.png", caption="short", scale=1)
    save_png(grid, tmp_path / "long.png", caption=" ".join(["word"] * 40), scale=1)
    short, long = Image.open(tmp_path / "short.png"), Image.open(tmp_path / "long.png")
    assert short.width == long.width == 100 and long.height > short.height > 100
