"""Images sampled byte by byte from an image model and saved as one captioned PNG grid.

``lintf generate`` on an image checkpoint and the sample at the end of an image model's ``fit`` both draw
here: the given leading bytes in one parallel pass, every later byte from the recurrent ``step``
(``lintf.sampling.complete``), a whole batch of images at once. A time limit stops the drawing early
and keeps what was drawn: the images' later bytes stay 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from lintf.sampling import Sampling, StepFunction, complete
from lintf.tasks.image_generation import image_grid, save_png


class OutOfTime(Exception):
    """Raised inside the sampling loop when its time limit has passed."""


@dataclass
class ImageSamples:
    """Sampled images and how far they got.

    Args:
        images: (K, H, W, C) uint8.
        given: leading bytes of each image that were given.
        drawn: bytes sampled after them (fewer than asked when the time limit stopped the drawing).
        asked: bytes that were asked for.
    """

    images: Tensor
    given: int
    drawn: int
    asked: int

    @property
    def complete(self) -> bool:
        return self.drawn == self.asked


def sample_images(task: torch.nn.Module, image_shape: tuple[int, int, int], prompt: list[int], new_bytes: int,
                  count: int, sampling: Sampling, generator: torch.Generator | None = None,
                  step: StepFunction | None = None, time_limit: float | None = None) -> ImageSamples:
    """``count`` images that start with the bytes of ``prompt`` and go on with ``new_bytes`` sampled ones.

    Args:
        task: an image model (``prefill``, ``step`` and ``head``), in eval mode.
        image_shape: (height, width, channels).
        prompt: the leading bytes every image is given (at least one: the first byte is never predicted).
        new_bytes: bytes to sample after them (at most the rest of the image).
        count: images, sampled together as one batch.
        sampling: how each byte is chosen.
        generator: random generator (on the task's device), for reproducible images.
        step: the step function (default ``task.step``).
        time_limit: seconds the drawing may take; None: no limit.
    """
    height, width, channels = image_shape
    device = next(task.parameters()).device
    buffer = torch.zeros(count, height * width * channels, dtype=torch.long, device=device)  # (K, H*W*C)
    given = len(prompt)
    buffer[:, :given] = torch.tensor(prompt, device=device)
    start, drawn = time.perf_counter(), 0

    def keep(position: int, tokens: Tensor) -> None:
        nonlocal drawn
        buffer[:, position], drawn = tokens, position + 1 - given
        if time_limit is not None and drawn < new_bytes and time.perf_counter() - start > time_limit:
            raise OutOfTime

    try:
        complete(task, buffer[:, : given + new_bytes], given, sampling, generator, on_token=keep, step=step)
    except OutOfTime:
        pass
    images = buffer.to(torch.uint8).view(count, height, width, channels).cpu()  # (K, H, W, C)
    return ImageSamples(images, given, drawn, new_bytes)


def save_grid(samples: ImageSamples, path: Path, caption: str) -> None:
    """Save sampled images as one PNG grid (about square) with ``caption`` under it."""
    save_png(image_grid(samples.images.numpy()), path, caption)
