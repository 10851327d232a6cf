"""Build the compiled ops library from ``csrc/``: just in time on first use, or ahead of time (``lintf build``).

The library's sources are every ``.cpp`` file under ``csrc/`` (with CUDA, every ``.cu`` file too), so
an op added there is built without a change here; ``csrc/`` is also the include root
(``#include "common/cpu/path.h"``). Torch's extension loader names each object after its file, so
the file names are unique across the tree.

Just in time (the default): the first call of a compiled op builds the library with
``torch.utils.cpp_extension`` and ninja into ``$TORCH_EXTENSIONS_DIR/lintf/<key>`` (default
``~/.cache/torch_extensions/lintf/<key>``; the key hashes the sources, flags and torch version),
about 15 s once per machine and torch version; later processes only load it. CUDA sources are
added when torch sees a GPU and a CUDA toolkit. Ahead of time (CUDA clusters, read-only installs,
containers): ``lintf build`` into ``lintf/ops/_prebuilt/``, or ``lintf build --output DIR --cuda``
and then ``export LINTF_EXTENSION_DIR=DIR``.

Every build writes a manifest beside the library (``manifest.py``) and holds the build lock
(``lock.py``) while it compiles. Each CPU kernel is compiled once per vector path (AVX-512,
AVX2+FMA, portable) inside target regions of its own, while the rest of the library keeps the
compiler's baseline ISA: one build runs on any CPU of its architecture (``csrc/common/cpu/target.h``).
``LINTF_CPU_ARCH`` adds ``-march=<value>`` to every translation unit (default: none, portable).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from lintf.ops.extension.lock import build_lock
from lintf.ops.extension.manifest import ManifestError, library_problem, read_manifest, write_manifest
from lintf.ops.extension.progress import build_progress

NAME = "lintf_causal_product"
BUILD_NOTICE = "lintf: building the compiled ops (once per machine and torch version)"
# lintf/ops/csrc in an installed copy (setup.py puts the sources there), csrc/ in a clone
_CSRC_CANDIDATES = (Path(__file__).parents[1] / "csrc", Path(__file__).parents[3] / "csrc")
_LIBRARY_ROOT = Path("common") / "library.cpp"  # the file that marks a csrc/ tree: it defines the namespace
DEFAULT_PREBUILT_DIR = Path(__file__).parents[1] / "_prebuilt"
# torch.utils.cpp_extension's LIB_EXT, known without importing it (its import looks for CUDA and may log)
LIBRARY_SUFFIX = ".pyd" if sys.platform == "win32" else ".so"


def source_dir() -> Path | None:
    """The csrc/ directory (the library's sources and include root), or None in an install without sources."""
    return next((d for d in _CSRC_CANDIDATES if (d / _LIBRARY_ROOT).is_file()), None)


def sources(with_cuda: bool) -> list[Path]:
    """The library's translation units: every .cpp under csrc/ (and every .cu with CUDA), in path order."""
    root = source_dir()
    if root is None:
        raise FileNotFoundError(f"lintf: csrc/{_LIBRARY_ROOT} not found in {[str(d) for d in _CSRC_CANDIDATES]}")
    units = sorted(root.rglob("*.cpp")) + (sorted(root.rglob("*.cu")) if with_cuda else [])
    names = [path.name.rsplit(".", 1)[0] for path in units if path.suffix == ".cpp"]
    assert len(set(names)) == len(names), f"two translation units under {root} share a file name: {sorted(names)}"
    return units


def openmp_flags() -> list[str]:
    """``-fopenmp`` where torch's intra-op threads are OpenMP's (Linux builds), else nothing.

    ``at::parallel_for`` is a header template: compiled without ``-fopenmp`` it runs its whole range
    on the calling thread, so the ops would ignore ``torch.set_num_threads``. The ops' parallel regions
    then run on the OpenMP runtime torch already loaded, sized by ``torch.set_num_threads``.
    """
    return ["-fopenmp"] if sys.platform.startswith("linux") and torch.backends.openmp.is_available() else []


def cflags() -> list[str]:
    """Host compiler flags: optimised, FMA contraction allowed, OpenMP, no -march unless LINTF_CPU_ARCH asks.

    The vector paths carry their own targets and are chosen at run time, so the default build runs
    on any CPU of the build machine's architecture.
    """
    arch = os.environ.get("LINTF_CPU_ARCH")
    return ["-O3", "-ffp-contract=fast", *openmp_flags()] + ([f"-march={arch}"] if arch else [])


def cuda_wanted() -> bool:
    """Whether a build should include the CUDA kernels: a visible GPU and a toolkit."""
    if not torch.cuda.is_available():
        return False  # before the import: a CUDA wheel without a GPU logs "No CUDA runtime is found" there
    with quiet_build_tools():
        from torch.utils.cpp_extension import CUDA_HOME
    return CUDA_HOME is not None


def _not_a_missing_cuda_runtime(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("No CUDA runtime is found")


# Whoever imports torch.utils.cpp_extension first (lintf, or a torch module lintf uses), a CUDA wheel on a
# machine without a GPU logs that it found no CUDA runtime: expected there, and lintf runs its CPU kernels.
logging.getLogger("torch.utils.cpp_extension").addFilter(_not_a_missing_cuda_runtime)


@contextlib.contextmanager
def quiet_build_tools() -> Iterator[None]:
    """Keep torch's build-time chatter (``torch.utils.cpp_extension``'s log and warnings) out of the user's output.

    Its import logs "No CUDA runtime is found" on a CUDA wheel without a GPU, and its builds warn about
    unset CUDA architecture lists and compiler versions: notes for torch's developers, not lintf's
    users. A failed build still raises with the compiler's output; ``lintf build`` shows everything.
    """
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"torch\.utils\.cpp_extension")
            yield
    finally:
        logger.setLevel(level)


def build_key(with_cuda: bool) -> str:
    """Hash of everything that changes the binary: sources, headers, flags, torch, CUDA."""
    digest = hashlib.sha256()
    root = source_dir()
    for path in sorted(p for p in root.rglob("*") if p.is_file()) if root else []:
        digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    digest.update(" ".join(cflags() + [torch.__version__, str(torch.version.cuda), str(with_cuda)]).encode())
    return digest.hexdigest()[:16]


def compiler_problem() -> str | None:
    """Why nothing can be compiled here (missing C++ compiler or ninja), or None."""
    with quiet_build_tools():
        from torch.utils.cpp_extension import is_ninja_available

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler found (looked for {compiler!r}; set CXX or install g++)"
    if not is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    return None


def _unverified(build_dir: Path, library: Path) -> str | None:
    """Why library in build_dir needs (re)building, or None when it exists and matches its manifest."""
    if not library.exists():
        return "not built yet"
    try:
        manifest = read_manifest(build_dir)
    except ManifestError as error:
        return str(error)
    if manifest is None:
        return f"{library} has no build manifest"
    return library_problem(build_dir, manifest)


def built_library(build_dir: Path) -> Path | None:
    """The library in build_dir if it matches its manifest, else None; imports no build tool."""
    library = build_dir / f"{NAME}{LIBRARY_SUFFIX}"
    return library if _unverified(build_dir, library) is None else None


def compile_into(build_dir: Path, with_cuda: bool, verbose: bool = False) -> Path:
    """Compile (or bring up to date) the library in build_dir, load it and return its path.

    A library that does not match its manifest is deleted first, so it is rebuilt instead of
    loaded; a fresh build is announced on stderr. Whatever library the call leaves (a fresh build,
    or one ninja relinked because the build command changed) is recorded in the manifest.
    """
    with quiet_build_tools() if not verbose else contextlib.nullcontext():
        return _compile_into(build_dir, with_cuda, verbose)


def _compile_into(build_dir: Path, with_cuda: bool, verbose: bool) -> Path:
    from torch.utils.cpp_extension import load

    with build_lock(build_dir):
        library = build_dir / f"{NAME}{LIBRARY_SUFFIX}"
        problem = _unverified(build_dir, library)
        if problem is not None:
            if library.exists():
                warnings.warn(f"lintf: {problem}; rebuilding it", stacklevel=2)
                library.unlink()
        with build_progress(BUILD_NOTICE, build_dir.parent) if problem is not None else contextlib.nullcontext():
            built = Path(load(
                name=NAME,
                sources=[str(p) for p in sources(with_cuda)],
                extra_include_paths=[str(source_dir())],
                extra_cflags=cflags(),
                extra_ldflags=openmp_flags(),
                extra_cuda_cflags=["-O3"],
                build_directory=str(build_dir),
                with_cuda=with_cuda,
                is_python_module=False,
                verbose=verbose,
            ))
        # ninja relinks on its own when the build's command changed (the same sources checked out at
        # another path): record whatever this call left, so the next process does not distrust it
        if problem is not None or _unverified(build_dir, built) is not None:
            _record(build_dir, built, with_cuda)
    return built


def _record(directory: Path, library: Path, with_cuda: bool) -> None:
    """Write the manifest of library: this torch (and CUDA, when built with it), its size, sha256 and source key."""
    write_manifest(directory, library, torch=torch.__version__, cuda=torch.version.cuda if with_cuda else None,
                   key=build_key(with_cuda))


def jit_build_dir(with_cuda: bool) -> Path:
    """Where the just-in-time build for these sources, flags and torch lives."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions"))
    return root / "lintf" / build_key(with_cuda)


def writable_directory(output: Path) -> Path:
    """``output`` as an absolute directory that exists (created if missing) and can be written.

    Raises:
        ValueError: ``output`` is a file, cannot be created or cannot be written, naming the reason.
    """
    directory = output.resolve()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--output {output} is a file, not a directory: give a directory for the library "
                         "(created if missing)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()  # the permission bits do not tell (root, read-only mounts)
    except OSError as error:
        raise ValueError(f"--output {output} is not a writable directory ({error.strerror or error}): give one "
                         "this user may write, e.g. --output ~/lintf-ops") from None
    return directory


def build(output: Path = DEFAULT_PREBUILT_DIR, cuda: bool | None = None) -> Path:
    """Build the compiled ops (the causal product and the others) ahead of time, for a cluster or a read-only install.

    Builds csrc/ into a directory (default lintf/ops/_prebuilt/) and records the torch version
    there; lintf loads it from that default, or from $LINTF_EXTENSION_DIR. On a CUDA cluster build
    once on a GPU node (--cuda). Set LINTF_CPU_ARCH (e.g. x86-64-v3) when the build machine's CPU
    differs from the runners'.

    Args:
        output: build directory.
        cuda: include the CUDA kernels (--cuda) or build the CPU kernels only (--no-cuda); by default, include them
            when a GPU and the CUDA toolkit are found.

    Returns:
        the built library.
    """
    with_cuda = cuda_wanted() if cuda is None else cuda
    directory = writable_directory(output)
    library = compile_into(directory, with_cuda, verbose=True)
    _record(directory, library, with_cuda)  # also after an incremental rebuild of changed sources
    print(f"built {library} (cuda={with_cuda}); lintf loads it from there"
          + ("" if directory == DEFAULT_PREBUILT_DIR.resolve() else f" when LINTF_EXTENSION_DIR={directory}"))
    return library
