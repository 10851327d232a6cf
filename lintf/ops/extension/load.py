"""Load the compiled ops library once per process and hand it to the ops, or say why PyTorch runs instead.

``load_library`` takes, in order: the library if this process loaded it already; the ahead-of-time
build in ``$LINTF_EXTENSION_DIR`` (default ``lintf/ops/_prebuilt/``), if its manifest matches this
torch and the file; the just-in-time build (``build.py``), compiled now if needed. Loading a
truncated library would kill the process (SIGBUS), so every load checks the library against its
manifest first: a JIT library that fails is rebuilt; an AOT build that fails, was made for another
torch or has an unreadable manifest is ignored with a warning naming the file. Without a C++
compiler (or ninja) one warning is issued and the ops run their pure-PyTorch paths, as they do with
``LINTF_EXTENSION=off``.

The loader knows no op by name. Each op's ``compiled.py`` hands ``on_load`` the function that
registers its Python parts (fake, autograd and autocast rules), which runs once the library is
loaded, and asks ``serves`` whether the library runs a device's tensors: the CPU's always, CUDA's
when its build included the CUDA sources (as its manifest records).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from lintf.ops.extension.build import (DEFAULT_PREBUILT_DIR, NAME, built_library, compile_into, compiler_problem,
                                       cuda_wanted, jit_build_dir, source_dir)
from lintf.ops.extension.environment import extension_disabled
from lintf.ops.extension.lock import BuildLockError
from lintf.ops.extension.manifest import ManifestError, library_problem, read_manifest

_REGISTRATIONS: list[Callable[[], None]] = []
_LOADED: list[Path] = []  # the library, once load_library has loaded it and run the registrations


def on_load(register: Callable[[], None]) -> None:
    """Run register once the library is loaded: now if it is, else when ``load_library`` loads it.

    Args:
        register: registers an op's Python parts for the loaded library; must be idempotent.
    """
    _REGISTRATIONS.append(register)
    if _LOADED:
        register()


@functools.cache
def load_library() -> bool:
    """Load the compiled library once per process; False (after one warning) means pure PyTorch."""
    if extension_disabled():
        return False
    prebuilt_dir = Path(os.environ.get("LINTF_EXTENSION_DIR", DEFAULT_PREBUILT_DIR))
    library = _loaded_before() or _load(prebuilt_library(prebuilt_dir)) or _load(_jit_library())
    if library is None:
        return False
    for register in _REGISTRATIONS:
        register()
    _LOADED.append(library)
    return True


@functools.cache
def serves(device_type: str) -> bool:
    """Whether the library runs tensors on device_type ("cpu", "cuda"); loads it, warns once if CUDA was left out."""
    if not load_library():
        return False
    if device_type == "cpu" or (device_type == "cuda" and _built_with_cuda(_LOADED[0])):
        return True
    if device_type == "cuda":
        warnings.warn(
            "lintf: the loaded op library has no CUDA kernels (built without a GPU/CUDA toolkit, or "
            "AOT-built without --cuda); CUDA tensors use the slower pure-PyTorch paths",
            stacklevel=4,
        )
    return False


def prebuilt_library(directory: Path) -> Path | None:
    """The AOT library in directory if its manifest matches this torch and the file, else None (warns why)."""
    fallback = "falling back to the just-in-time build"
    try:
        manifest = read_manifest(directory)
    except ManifestError as error:
        warnings.warn(f"lintf: {error}; ignoring the ahead-of-time build there ({fallback})", stacklevel=3)
        return None
    if manifest is None:
        return None
    if manifest["torch"] != torch.__version__:
        warnings.warn(
            f"lintf: ignoring the ahead-of-time build in {directory}: it was built for torch "
            f"{manifest['torch']}, this is torch {torch.__version__}; rebuild with `lintf build` ({fallback})",
            stacklevel=3,
        )
        return None
    problem = library_problem(directory, manifest)
    if problem is not None:
        warnings.warn(
            f"lintf: ignoring the ahead-of-time build in {directory}: {problem}; rebuild with `lintf build` "
            f"({fallback})",
            stacklevel=3,
        )
        return None
    return directory / manifest["library"]


def _loaded_before() -> Path | None:
    """The library, if this process loaded it already (a second copy could not register the same ops)."""
    return next((Path(p) for p in sorted(torch.ops.loaded_libraries) if Path(p).name.startswith(f"{NAME}.")), None)


def _built_with_cuda(library: Path) -> bool:
    """Whether the build of library included the CUDA sources, as its manifest records."""
    try:
        manifest = read_manifest(library.parent)
    except ManifestError:
        return False
    return manifest is not None and manifest.get("cuda") is not None


def _load(library: Path | None) -> Path | None:
    if library is None:
        return None
    try:
        torch.ops.load_library(str(library))
    except OSError as error:
        warnings.warn(f"lintf: could not load {library} ({error}); trying the next option", stacklevel=4)
        return None
    return library


def _jit_library() -> Path | None:
    with_cuda = cuda_wanted()
    ready = built_library(jit_build_dir(with_cuda))
    if ready is not None:
        return ready  # built before: no compiler, no ninja and no torch.utils.cpp_extension needed
    problem = compiler_problem() or (None if source_dir() else "the csrc/ sources are not installed")
    if problem is not None:
        warnings.warn(f"lintf: {problem}; the ops run on their slower pure-PyTorch paths", stacklevel=4)
        return None
    try:
        return compile_into(jit_build_dir(with_cuda), with_cuda)
    except BuildLockError:
        raise
    except (OSError, RuntimeError) as error:  # torch reports compiler failures as RuntimeError
        warnings.warn(
            f"lintf: building the compiled ops failed ({str(error).strip()[-500:]}); "
            "the ops run on their slower pure-PyTorch paths",
            stacklevel=4,
        )
        return None
