"""Build and load the compiled causal-product op from ``csrc/``, or say why PyTorch runs instead.

Just in time (the default): the first causal product builds ``csrc/`` with
``torch.utils.cpp_extension`` and ninja into ``$TORCH_EXTENSIONS_DIR/lintf/<key>`` (default
``~/.cache/torch_extensions/lintf/<key>``; the key hashes the sources, flags and torch version),
about 15 s once per machine and torch version; later processes only load it. CUDA sources are
added when torch sees a GPU and a CUDA toolkit.

Ahead of time (CUDA clusters, read-only installs, containers)::

    python -m lintf.ops.build                      # into lintf/ops/_prebuilt/
    python -m lintf.ops.build --output DIR --cuda  # then export LINTF_EXTENSION_DIR=DIR

Every build writes a manifest beside the library (``lintf_causal_product.json``: torch version,
the library's size and sha256) and every load verifies it first: loading a truncated library
would kill the process (SIGBUS). A JIT library that fails the check is deleted and rebuilt; an
AOT build that fails it, was made for another torch or has an unreadable manifest is ignored
with a warning naming the file (and the JIT path is used).

The CPU kernel is compiled once per vector path (AVX-512, AVX2+FMA, and a portable one: SSE2 on
x86-64, NEON on aarch64), each in its own translation unit with its own target, while the rest of
the library keeps the compiler's baseline ISA: one build, JIT or AOT, runs on any CPU of its
architecture, and every call takes the widest path the CPU reports (cpuid). ``LINTF_CPU_PATH=avx512|
avx2|portable`` forces one (a ValueError if this CPU cannot run it); ``cpu_vector_path()`` says
which path runs.

Other environment variables: ``LINTF_EXTENSION=off`` always uses the pure-PyTorch path;
``LINTF_CPU_ARCH`` adds ``-march=<value>`` to every translation unit (default: none, portable).
``lintf.ops.check_environment()`` validates all of them (``environment.py``) without building.

Concurrency (``locks.py``): builders serialise on a ``filelock.FileLock`` (released by the OS if a
builder dies), so DDP ranks starting together build once and never write the same files at the
same time; the one that builds says so on stderr. Torch's own build lock (``<build dir>/lock``)
is waited for while a process holds it and taken over when nobody does (a file torch 2.14 leaves
after every build, or a torch <= 2.13 baton left by a killed build); one still held after the
timeout is named in a BuildLockError. Without a C++ compiler (or ninja) one warning is issued and
the pure-PyTorch path is used.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import shutil
import sys
import warnings
from pathlib import Path

import torch

from lintf.ops.environment import extension_disabled
from lintf.ops.locks import BuildLockError, build_lock  # BuildLockError: re-exported for the CLI
from lintf.ops.manifest import ManifestError, library_problem, read_manifest, write_manifest

NAME = "lintf_causal_product"
BUILD_NOTICE = "lintf: building the C++ causal-product op (once per machine and torch version, ~20 s)..."
_CSRC_CANDIDATES = (Path(__file__).parent / "csrc", Path(__file__).parents[2] / "csrc")
DEFAULT_PREBUILT_DIR = Path(__file__).parent / "_prebuilt"
# entry points and registration, run-time path choice, then one translation unit per vector path;
# the same for the decayed causal product; the cache of the CPU ops' large outputs
CPU_SOURCES = ("causal_product.cpp", "causal_product_cpu_path.cpp", "causal_product_cpu_portable.cpp",
               "causal_product_cpu_avx2.cpp", "causal_product_cpu_avx512.cpp", "decayed_product.cpp",
               "decayed_product_portable.cpp", "decayed_product_avx2.cpp", "decayed_product_avx512.cpp",
               "cpu_output_cache.cpp")


def source_dir() -> Path | None:
    """The directory holding causal_product.cpp, or None in an install without sources."""
    return next((d for d in _CSRC_CANDIDATES if (d / "causal_product.cpp").is_file()), None)


def sources(with_cuda: bool) -> list[Path]:
    """C++ (and optionally CUDA) translation units of the op."""
    root = source_dir()
    if root is None:
        raise FileNotFoundError(f"lintf: csrc/causal_product.cpp not found in {[str(d) for d in _CSRC_CANDIDATES]}")
    return [root / name for name in CPU_SOURCES] + ([root / "causal_product.cu"] if with_cuda else [])


def openmp_flags() -> list[str]:
    """``-fopenmp`` where torch's intra-op threads are OpenMP's (Linux builds), else nothing.

    ``at::parallel_for`` is a header template: compiled without ``-fopenmp`` it runs its whole range
    on the calling thread, so the op would ignore ``torch.set_num_threads``. The op's parallel regions
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
    """Whether a build should include the CUDA kernel: a visible GPU and a toolkit."""
    from torch.utils.cpp_extension import CUDA_HOME

    return torch.cuda.is_available() and CUDA_HOME is not None


def build_key(with_cuda: bool) -> str:
    """Hash of everything that changes the binary: sources, headers, flags, torch, CUDA."""
    digest = hashlib.sha256()
    root = source_dir()
    for path in sorted(root.glob("*")) if root else []:
        digest.update(path.name.encode() + path.read_bytes())
    digest.update(" ".join(cflags() + [torch.__version__, str(torch.version.cuda), str(with_cuda)]).encode())
    return digest.hexdigest()[:16]


def compiler_problem() -> str | None:
    """Why nothing can be compiled here (missing C++ compiler or ninja), or None."""
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


def compile_into(build_dir: Path, with_cuda: bool, verbose: bool = False) -> Path:
    """Compile (or bring up to date) the op library in build_dir, load it and return its path.

    A library that does not match its manifest is deleted first, so it is rebuilt instead of
    loaded; a fresh build is announced on stderr. Whatever library the call leaves (a fresh build,
    or one ninja relinked because the build command changed) is recorded in the manifest.
    """
    from torch.utils.cpp_extension import LIB_EXT, load

    with build_lock(build_dir):
        library = build_dir / f"{NAME}{LIB_EXT}"
        problem = _unverified(build_dir, library)
        if problem is not None:
            if library.exists():
                warnings.warn(f"lintf: {problem}; rebuilding it", stacklevel=2)
                library.unlink()
            print(BUILD_NOTICE, file=sys.stderr, flush=True)
        built = Path(load(
            name=NAME,
            sources=[str(p) for p in sources(with_cuda)],
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


def build_ahead_of_time(output_dir: Path, with_cuda: bool, verbose: bool = True) -> Path:
    """Build into output_dir and record the build (torch version, size, sha256) in a manifest beside it."""
    library = compile_into(output_dir, with_cuda, verbose)
    _record(output_dir, library, with_cuda)  # also after an incremental rebuild of changed sources
    return library


def _record(directory: Path, library: Path, with_cuda: bool) -> None:
    write_manifest(directory, library, torch=torch.__version__, cuda=torch.version.cuda if with_cuda else None,
                   key=build_key(with_cuda))


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
            f"{manifest['torch']}, this is torch {torch.__version__}; rebuild with "
            f"`python -m lintf.ops.build` ({fallback})",
            stacklevel=3,
        )
        return None
    problem = library_problem(directory, manifest)
    if problem is not None:
        warnings.warn(
            f"lintf: ignoring the ahead-of-time build in {directory}: {problem}; rebuild with "
            f"`python -m lintf.ops.build` ({fallback})",
            stacklevel=3,
        )
        return None
    return directory / manifest["library"]


def jit_build_dir(with_cuda: bool) -> Path:
    """Where the just-in-time build for these sources, flags and torch lives."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions"))
    return root / "lintf" / build_key(with_cuda)


def op_has_kernel(device_type: str) -> bool:
    """Whether lintf::causal_product is loaded with a kernel for device_type ("cpu", "cuda")."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("lintf::causal_product", device_type.upper())
    except RuntimeError:  # the operator is not defined (library not loaded)
        return False


@functools.cache
def load_extension() -> bool:
    """Load the compiled op once per process; False (after one warning) means pure PyTorch."""
    if extension_disabled():
        return False
    prebuilt_dir = Path(os.environ.get("LINTF_EXTENSION_DIR", DEFAULT_PREBUILT_DIR))
    if not (op_has_kernel("cpu") or _load(prebuilt_library(prebuilt_dir)) or _load(_jit_library())):
        return False
    importlib.import_module("lintf.ops.causal_product").register_python_parts()
    return True


@functools.cache
def serves(device_type: str) -> bool:
    """Whether the compiled op runs tensors on device_type; warns once if CUDA was left out."""
    if not load_extension():
        return False
    if op_has_kernel(device_type):
        return True
    if device_type == "cuda":
        warnings.warn(
            "lintf: the loaded causal-product op has no CUDA kernel (built without a GPU/CUDA toolkit, or "
            "AOT-built without --cuda); CUDA tensors use the slower pure-PyTorch path",
            stacklevel=4,
        )
    return False


def cpu_vector_path() -> str | None:
    """The vector path CPU calls of the compiled op run now ("avx512", "avx2", "portable"), None without the op.

    The widest the CPU supports unless ``LINTF_CPU_PATH`` forces one; read on every call, like the op does.
    Raises ValueError when ``LINTF_CPU_PATH`` names a path this CPU cannot run.
    """
    return str(torch.ops.lintf.cpu_vector_path()) if load_extension() else None


def cpu_vector_paths() -> list[str]:
    """The vector paths this CPU can run, widest first; empty without the compiled op."""
    return list(torch.ops.lintf.cpu_vector_paths()) if load_extension() else []


OUTPUT_CACHE_FIELDS = ("cached_bytes", "in_use_bytes", "reused", "allocated", "limit_bytes", "peak_bytes", "evicted")


def cpu_output_cache_stats() -> dict[str, int] | None:
    """The CPU output cache's counters, None without the compiled op.

    Outputs of the CPU op from 4 MB on reuse the buffers of freed outputs (``csrc/cpu_output_cache.h``).
    By default the cache holds, free and in use together, at most the most bytes of live outputs the
    process has had at once plus one largest buffer: a loop at one shape reuses every buffer from its
    second step on, and outputs of ever new sizes (mixed sequence lengths) evict the oldest free buffers
    instead of accumulating. ``LINTF_CPU_OUTPUT_CACHE_MB`` replaces that bound with a fixed cap on the
    free bytes (0 turns the cache off).

    Returns:
        ``cached_bytes``: free buffers kept for reuse; ``in_use_bytes``: buffers held by live tensors;
        ``reused`` / ``allocated`` / ``evicted``: buffers taken from the cache / allocated afresh /
        unmapped to stay within the bound; ``peak_bytes``: the most bytes in use at once (since start
        or the last ``empty_cpu_output_cache``); ``limit_bytes``: the cap when
        ``LINTF_CPU_OUTPUT_CACHE_MB`` is set, else the default bound, ``peak_bytes`` plus the largest buffer.
    """
    if not load_extension():
        return None
    return dict(zip(OUTPUT_CACHE_FIELDS, (int(x) for x in torch.ops.lintf.cpu_output_cache_stats())))


def empty_cpu_output_cache() -> None:
    """Unmap the CPU output cache's free buffers, returning their memory to the system (resident memory drops).

    Like ``torch.cuda.empty_cache``: buffers held by live tensors stay. The default bound restarts from
    the bytes in use now, so a run whose outputs shrank (after a larger evaluation, say) keeps less.
    """
    if load_extension():
        torch.ops.lintf.empty_cpu_output_cache()


def _load(library: Path | None) -> bool:
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except OSError as error:
        warnings.warn(f"lintf: could not load {library} ({error}); trying the next option", stacklevel=4)
        return False
    return True


def _jit_library() -> Path | None:
    problem = compiler_problem() or (None if source_dir() else "the csrc/ sources are not installed")
    if problem is not None:
        warnings.warn(f"lintf: {problem}; causal products run on the slower pure-PyTorch path", stacklevel=4)
        return None
    with_cuda = cuda_wanted()
    try:
        return compile_into(jit_build_dir(with_cuda), with_cuda)
    except BuildLockError:
        raise
    except (OSError, RuntimeError) as error:  # torch reports compiler failures as RuntimeError
        warnings.warn(
            f"lintf: building the causal-product op failed ({str(error).strip()[-500:]}); "
            "causal products run on the slower pure-PyTorch path",
            stacklevel=4,
        )
        return None

