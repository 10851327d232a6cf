"""A small grid of images at the end of an image model's ``fit``: what the trained model draws, saved in the run.

``IMAGES`` images are drawn byte by byte with the recurrent step from the first byte 0 alone, at
``lintf generate``'s defaults (temperature 1, seed 0), so the grid is the one ``lintf generate --ckpt_path
<run>/checkpoints/last.ckpt --num_samples 4`` draws on the CPU, and two runs of one config draw the same. It is
saved as ``<run>/samples/fit-step<N>.png`` and its path printed under the ``fit:`` line. Drawing stops after
``TIME_LIMIT`` seconds (as the text sample does; the example configs' MNIST models finish within it on a CPU)
and keeps what was drawn, the rest of each image left black and the line saying how far it got; a failure to
draw is one line, never the run's failure.

Image tasks are those with ``prefill``, ``step``, ``head`` and an ``image_shape`` (``ImageGenerationTask``
with ``ImageData``); other runs get no grid.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch import LightningModule, Trainer

from lintf.layout.directories import own_run_directory, unused_path
from lintf.run.callbacks.fit_sample import SEED, TEMPERATURE, TIME_LIMIT
from lintf.sampling import Sampling
from lintf.tasks.image_samples import sample_images, save_grid

IMAGES = 4
FIRST_BYTE = 0
"""The byte every image starts from (the model never predicts the first byte): ``lintf generate``'s default."""


def image_shape(pl_module: LightningModule) -> tuple[int, int, int] | None:
    """(height, width, channels) of a model that draws images; None for any other model."""
    if not all(hasattr(pl_module, name) for name in ("prefill", "step", "head")):
        return None
    shape = getattr(pl_module, "image_shape", None)
    return tuple(shape) if shape is not None else None


def fit_image_sample(trainer: Trainer, pl_module: LightningModule) -> str | None:
    """``image sample (...): <path>``; a one-line note if drawing fails; None for a model that draws no images.
    Call on rank 0 only."""
    try:
        shape = image_shape(pl_module)
    except Exception as error:  # noqa: BLE001  (a sample never fails the run)
        return f"image sample: not drawn ({type(error).__name__}: {error})"
    if shape is None:
        return None
    training = pl_module.training
    try:
        pl_module.eval()
        generator = torch.Generator(device=pl_module.device).manual_seed(SEED)
        size = shape[0] * shape[1] * shape[2]
        samples = sample_images(pl_module, shape, [FIRST_BYTE], size - 1, IMAGES, Sampling(TEMPERATURE), generator,
                                time_limit=TIME_LIMIT)
        reach = "" if samples.complete else (f"; {samples.drawn} of {samples.asked} bytes drawn within the "
                                             f"{TIME_LIMIT:g} s limit, the rest left black")
        caption = (f"{IMAGES} samples after step {trainer.global_step}, seed {SEED}: the first byte given "
                   f"({FIRST_BYTE}), " + (f"{samples.drawn} drawn" if samples.complete else reach[2:]))
        samples_folder = Path(own_run_directory(trainer)) / "samples"
        path = Path(unused_path(str(samples_folder / f"fit-step{trainer.global_step}.png")))
        save_grid(samples, path, caption)
        return (f"image sample ({IMAGES} images drawn from the first byte {FIRST_BYTE} at temperature {TEMPERATURE:g}, "
                f"seed {SEED}{reach}): {path}")
    except Exception as error:  # noqa: BLE001  (a sample never fails the run)
        return f"image sample: not drawn ({type(error).__name__}: {error})"
    finally:
        pl_module.train(training)
