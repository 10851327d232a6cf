"""Autoregressive image generation (paper 4.2): bytes in raster order, bits/dim, RNN-speed sampling."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from lintf.layout.directories import run_directory
from lintf.metrics import BitsPerDim
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import PositionKind
from lintf.names import HeadName
from lintf.sampling import Sampling, complete
from lintf.tasks.autoregressive import AutoregressiveTask


def image_grid(images: np.ndarray, columns: int | None = None, gap: int = 2) -> np.ndarray:
    """Tile uint8 images (K, H, W, C) into one (rows*(H+gap)-gap, cols*(W+gap)-gap, C) array."""
    count, height, width, channels = images.shape
    columns = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    grid = np.full((rows * (height + gap) - gap, columns * (width + gap) - gap, channels), 255, dtype=np.uint8)
    for index, image in enumerate(images):
        top, left = (index // columns) * (height + gap), (index % columns) * (width + gap)
        grid[top : top + height, left : left + width] = image
    return grid


MIN_SIDE = 400
"""Grids are enlarged by the smallest whole factor that makes their longer side at least this many pixels."""
GRID_CAPTIONS = {"originals": "test images", "completions": "completions: the top half given, the rest sampled",
                 "samples": "samples: only the first byte given"}


def save_png(grid: np.ndarray, path: Path, caption: str | None = None, scale: int | None = None) -> None:
    """Save a uint8 grid (H, W, C) as a PNG, each pixel a ``scale`` x ``scale`` block, with a caption below.

    Args:
        grid: the image, C = 1 (grey) or 3 (RGB).
        path: the PNG file (its folder is made).
        caption: text written under the image; None writes none.
        scale: enlargement (nearest neighbour); None picks the smallest making the longer side >= MIN_SIDE.
    """
    from PIL import Image

    image = Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid)
    scale = scale or max(1, math.ceil(MIN_SIDE / max(image.size)))
    image = image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    (with_caption(image, caption) if caption else image).save(path)


def with_caption(image: Any, caption: str, size: int = 14) -> Any:
    """A copy of a PIL image with ``caption`` in black on white below it, wrapped to the image's width."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one bitmap size
        font = ImageFont.load_default()
    measure = ImageDraw.Draw(image).textlength
    lines: list[str] = []
    for word in caption.split():
        if lines and measure(f"{lines[-1]} {word}", font=font) <= image.width - 8:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    white, black = (255, 0) if image.mode == "L" else ((255, 255, 255), (0, 0, 0))
    framed = Image.new(image.mode, (image.width, image.height + len(lines) * (size + 4) + 6), white)
    framed.paste(image, (0, 0))
    draw = ImageDraw.Draw(framed)
    for index, line in enumerate(lines):
        draw.text((4, image.height + 4 + index * (size + 4)), line, fill=black, font=font)
    return framed


class ImageGenerationTask(AutoregressiveTask):
    """Next-byte model over images with a registered output head; bits/dim; PNG samples.

    Batches are (input, target) byte sequences from ``lintf.data.ImageData``. ``predict`` draws,
    for each batch of test images, completions of their bottom half (the top half given) and
    unconditional samples (only the first byte given: the model never predicts it), both with
    the recurrent ``step`` (O(1) memory per pixel for linear attention), writes PNG grids
    (originals, completions, samples) to ``<log dir>/samples`` and logs them when it can.

    Args:
        vocab_size: byte values (256); linked from the data module.
        max_length: bytes per image minus one; linked from the data module.
        encoder: the encoder stack (width, depth, attention and feature map by registry name, ...).
        positions: "learned" (one embedding per byte position), fixed "sinusoidal" codes, or
            "raster": a learned row embedding plus a learned column embedding, so every row shares
            the column codes (far fewer to learn; needs ``row_bytes``).
        row_bytes: bytes per image row for "raster" positions: 28 for MNIST, 96 for CIFAR-10
            (32 pixels x 3 interleaved channels).
        optimizer: optimizer class and arguments.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
        head: output-head registry name: "logistic_mixture" (PixelCNN++) or "categorical" (256-way softmax).
        head_kwargs: extra arguments of the head, e.g. ``{n_components: 10}``.
        init_from: a Hugging Face directory of a lintf model (``lintf export``) to start from; its model must
            be the configured one, what differs is listed.
    """

    prediction_metrics = ("bits_per_dim",)

    def __init__(
        self,
        vocab_size: int = 256,
        max_length: int = 783,
        encoder: EncoderConfig = EncoderConfig(d_model=256, n_layers=8, n_heads=8),
        positions: PositionKind = "learned",
        row_bytes: int | None = None,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        head: HeadName = HeadName("logistic_mixture"),
        head_kwargs: dict[str, Any] | None = None,
        init_from: str | None = None,
    ) -> None:
        super().__init__(vocab_size, max_length, encoder, positions, row_bytes, optimizer, lr_scheduler, head, head_kwargs,
                         init_from)
        self.image_shape: tuple[int, int, int] | None = None

    def build_metrics(self) -> None:
        self.val_bits_per_dim, self.test_bits_per_dim = BitsPerDim(), BitsPerDim()

    def setup(self, stage: str) -> None:
        datamodule = self.attached_datamodule
        self.image_shape = getattr(datamodule, "image_shape", None)
        if self.image_shape is not None and self.hparams.positions == "raster":
            _, width, channels = self.image_shape
            if width * channels != self.hparams.row_bytes:
                raise ValueError(f"row_bytes={self.hparams.row_bytes} but the data's rows hold {width * channels} "
                                 f"bytes ({width} pixels x {channels} channels); set model.init_args.row_bytes")

    def nll(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Per-byte negative log-likelihood in nats (B, N-1)."""
        inputs, targets = batch
        return self.head.nll(self(inputs), targets)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = self.nll(batch).mean()
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/bits_per_dim", loss / math.log(2))
        return loss

    def _evaluate(self, batch: tuple[Tensor, Tensor], stage: str, metric: BitsPerDim) -> None:
        nll = self.nll(batch)
        metric.update(nll)
        self.log(f"{stage}/loss", nll.mean(), prog_bar=True, sync_dist=True)
        self.log(f"{stage}/bits_per_dim", metric, prog_bar=True)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_bits_per_dim)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_bits_per_dim)

    def generate(self, prompt: Tensor, known: int, generator: torch.Generator | None = None) -> Tensor:
        """Complete byte sequences: the given bytes in one parallel pass (``prefill``), the rest with ``step``.

        Args:
            prompt: (B, N) int bytes; only the first ``known`` columns are used.
            known: leading bytes kept as given (>= 1: the first byte is never predicted).
            generator: random generator for reproducible samples.

        Returns:
            (B, N) int64 bytes: the prompt's first ``known``, then samples.
        """
        return complete(self, prompt, known, Sampling(), generator)

    def on_predict_start(self) -> None:
        # The run's own directory (for W&B too, whose trainer.log_dir is the shared save_dir).
        self.samples_directory = Path(run_directory(self.trainer)) / "samples"

    def predict_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> list[dict[str, Any]]:
        """Completions and unconditional samples for one batch; rows report each original's bits/dim."""
        if self.image_shape is None:
            raise ValueError("predicting images needs an image data module (lintf.data.ImageData) for their shape")
        inputs, targets = batch
        originals = torch.cat([inputs[:, :1], targets], dim=1)  # (B, N) whole images
        height, width, channels = self.image_shape
        completions = self.generate(originals, known=(height // 2) * width * channels)
        samples = self.generate(originals, known=1)
        grids = {name: image_grid(t.to(torch.uint8).view(-1, height, width, channels).cpu().numpy())
                 for name, t in (("originals", originals), ("completions", completions), ("samples", samples))}
        self.write_grids(grids, batch_idx)
        bits = self.nll(batch).mean(dim=1) / math.log(2)  # (B,)
        return [{"batch": batch_idx, "index": i, "bits_per_dim": float(b)} for i, b in enumerate(bits.tolist())]

    def write_grids(self, grids: dict[str, np.ndarray], batch_idx: int) -> None:
        """Save PNG grids and hand them to TensorBoard / W&B loggers when present."""
        for name, grid in grids.items():
            save_png(grid, self.samples_directory / f"{name}-{batch_idx:04d}.png",
                     caption=f"{GRID_CAPTIONS.get(name, name)} (batch {batch_idx})")
        for logger in self.trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_image"):  # TensorBoard
                for name, grid in grids.items():
                    experiment.add_image(f"predict/{name}", grid, batch_idx, dataformats="HWC")
            elif hasattr(logger, "log_image"):  # Weights & Biases
                logger.log_image("predict/grids", list(grids.values()), caption=list(grids))
