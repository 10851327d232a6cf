"""Image cache faults: replaced sources are never served from an old cache, unreadable caches are rebuilt,
and a killed build leaves no cache file, complete or partial; a CIFAR-10 batch is parsed, never run."""

from __future__ import annotations

import builtins
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from lintf.data import image_sources
from lintf.data.images import ImageData
from tests.data.test_images import make_mnist_dir, write_cifar_dir, write_idx_images

TRAIN, TEST = (image_sources.IDX_FILES[split] for split in ("train", "test"))


def prepared(data: ImageData) -> dict[str, np.ndarray]:
    data.prepare_data()
    data.setup()
    return data.splits


def cache_files(data: ImageData) -> list[str]:
    """Every file in the cache directory (caches and anything a build left behind)."""
    return sorted(path.name for path in data.cache_dir.iterdir())


def replace_test_images(source: Path, seed: int, keep_mtime: bool = False) -> np.ndarray:
    """New test images of the same count and size in place of the old ones; returns them as sequences."""
    path = source / TEST
    stat = path.stat()
    images = np.random.default_rng(seed).integers(0, 256, (10, 28, 28))
    write_idx_images(path, images)
    if keep_mtime:  # as `cp -p` or `rsync -t` of a file made at the same time would leave it
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    return images.reshape(10, 784).astype(np.uint8)


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_replaced_source_files_are_served_not_the_old_cache(tmp_path, keep_mtime):
    make_mnist_dir(tmp_path / "src")
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"))
    old = prepared(data)["test"].copy()
    new = replace_test_images(tmp_path / "src", seed=7, keep_mtime=keep_mtime)
    assert not np.array_equal(old, new)
    served = prepared(ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src")))
    np.testing.assert_array_equal(served["test"], new)
    assert len(cache_files(data)) == 2, "the caches of the replaced content must be removed"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong shape"])
def test_unreadable_cache_is_rebuilt_never_served(tmp_path, damage):
    images = make_mnist_dir(tmp_path / "src")
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"))
    data.prepare_data()
    (cache,) = data.cache_dir.glob("test*.npy")
    if damage == "truncated":
        cache.write_bytes(cache.read_bytes()[:-1000])
    elif damage == "garbage":
        cache.write_bytes(b"garbage")
    else:
        np.save(cache, np.zeros((3, 5), np.uint8))
    data.prepare_data()  # the next run's preparation rebuilds it
    np.testing.assert_array_equal(np.load(cache), images["test"].reshape(10, 784))
    cache.write_bytes(b"garbage")  # spoiled between preparation and setup: setup rebuilds too, and says so
    with pytest.warns(UserWarning, match=r"ImageData: cache file .*test-.*\.npy is missing or unreadable .*rebuilding"):
        data.setup()
    np.testing.assert_array_equal(data.splits["test"], images["test"].reshape(10, 784))
    assert len(cache_files(data)) == 2


def test_killed_build_leaves_no_cache_and_the_next_run_serves_the_new_source(tmp_path, monkeypatch):
    make_mnist_dir(tmp_path / "src")
    data = ImageData("mnist", data_dir=str(tmp_path / "data"), source_dir=str(tmp_path / "src"))
    prepared(data)
    new = replace_test_images(tmp_path / "src", seed=3)
    real_save, saved = np.save, []

    def killed_during_the_second_file(file, array, *args, **kwargs):
        if saved:
            file.write(b"\x93NUMPY half an array")
            raise KeyboardInterrupt
        saved.append(file.name)
        real_save(file, array, *args, **kwargs)

    monkeypatch.setattr(np, "save", killed_during_the_second_file)
    with pytest.raises(KeyboardInterrupt):
        data.prepare_data()
    monkeypatch.undo()
    left = cache_files(data)
    assert not [name for name in left if "partial" in name], f"a half-written file was left: {left}"
    key = data.source_key()
    assert f"test-{key}.npy" not in left and f"train-{key}.npy" in left
    np.testing.assert_array_equal(prepared(data)["test"], new)
    assert cache_files(data) == [f"test-{key}.npy", f"train-{key}.npy"]


def test_mnist_5k_split_follows_its_seed(tmp_path, monkeypatch):
    digits = np.arange(5000 * 784, dtype=np.int64).reshape(5000, 28, 28, 1).astype(np.uint8)
    digits[:, 0, 0, 0] = np.arange(5000) % 256  # each image told apart by its first bytes
    digits[:, 0, 1, 0] = np.arange(5000) // 256
    monkeypatch.setattr(image_sources, "fetch_mnist_5k", lambda downloads: digits)
    tests = {}
    for seed in (0, 1):
        splits = prepared(ImageData("mnist_5k", data_dir=str(tmp_path), seed=seed))
        order = np.random.default_rng(seed).permutation(5000)
        np.testing.assert_array_equal(splits["test"], digits[order[:500]].reshape(500, 784))
        tests[seed] = splits["test"]
    assert not np.array_equal(tests[0], tests[1])


class Call:
    """Unpickling it calls ``function(*args)``."""

    def __init__(self, function, *args) -> None:
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@pytest.mark.parametrize("payload,refused", [("os.system", f"{os.system.__module__}.system"),
                                            ("builtins.exec", "__builtin__.exec")])  # as protocol 2 names them
def test_a_cifar_batch_that_runs_code_is_refused_without_running_it(tmp_path, payload, refused):
    marker = tmp_path / "payload-ran"
    call = (Call(os.system, f"touch {marker}") if payload == "os.system"
            else Call(builtins.exec, f"open({str(marker)!r}, 'w').close()"))
    write_cifar_dir(tmp_path / "c", np.zeros((6, 32, 32, 3), dtype=np.uint8))
    batch = tmp_path / "c" / "data_batch_2"
    batch.write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [call]}, protocol=2))
    with pytest.raises(image_sources.DataSourceError,
                       match=re.escape(f"{batch} is not a readable CIFAR-10 batch: it refers to {refused}, ")):
        ImageData("cifar10", data_dir=str(tmp_path / "d"), source_dir=str(tmp_path / "c")).prepare_data()
    assert not marker.exists()


def python2_batch(planar: np.ndarray) -> bytes:
    """``planar`` (num, 3072) uint8 as Python 2's cPickle wrote cifar-10-batches-py: protocol 2, str keys and
    strings, the array by numpy.core.multiarray._reconstruct, numpy.ndarray and numpy.dtype."""
    def string(raw: bytes) -> bytes:  # SHORT_BINSTRING / BINSTRING: a Python 2 str
        return b"U" + bytes([len(raw)]) + raw if len(raw) < 256 else b"T" + struct.pack("<I", len(raw)) + raw

    def integer(value: int) -> bytes:  # BININT2
        return b"M" + struct.pack("<H", value)

    minus_one = b"J" + struct.pack("<i", -1)
    dtype = (b"cnumpy\ndtype\n" + string(b"u1") + b"K\x00K\x01\x87R(K\x03" + string(b"|") + b"NNN"
             + minus_one * 2 + b"K\x00tb")  # dtype('u1') and its state (3, '|', None, None, None, -1, -1, 0)
    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + string(b"b") + b"\x87R(K\x01"
             + integer(planar.shape[0]) + integer(planar.shape[1]) + b"\x86" + dtype + b"\x89"
             + string(planar.tobytes()) + b"tb")
    labels = b"](" + b"K\x03" * len(planar) + b"e"
    return (b"\x80\x02}(" + string(b"batch_label") + string(b"training batch 1 of 5") + string(b"data") + array
            + string(b"labels") + labels + b"u.")


@pytest.mark.parametrize("written_by", ["python2", "protocol2", "protocol4", "protocol5"])
def test_cifar_batches_of_python_2_and_3_load(tmp_path, written_by):
    images = np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    planar = images.transpose(0, 3, 1, 2).reshape(12, 3072)  # CIFAR-10's layout: all red, all green, all blue
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    (tmp_path / "c").mkdir()
    for index, name in enumerate(names):
        part = planar[2 * index : 2 * index + 2]
        batch = {b"batch_label": b"x", b"data": part, b"labels": [3, 3], b"filenames": [b"a.png", b""]}
        raw = python2_batch(part) if written_by == "python2" else pickle.dumps(batch, protocol=int(written_by[-1]))
        (tmp_path / "c" / name).write_bytes(raw)
    loaded = image_sources.read_cifar10_directory(tmp_path / "c")
    np.testing.assert_array_equal(loaded["train"], images[:10])
    np.testing.assert_array_equal(loaded["test"], images[10:])
