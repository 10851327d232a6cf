"""Builds a Python module that runs CUDA kernels of csrc/ on the CPU under cuda_emulation.h (tests only).

Each op's emulated module is one C++ file beside its tests (``tests/ops/<op>/...``) that includes
cuda_emulation.h, the kernels' host code, and binds them; the stand-in headers of this directory are
shared by all of them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import ModuleType

import pytest

from lintf.ops.extension.build import compiler_problem

EMULATION = Path(__file__).parent
CSRC = Path(__file__).resolve().parents[4] / "csrc"


def load_emulated(name: str, source: Path, headers: list[Path]) -> ModuleType:
    """Compile and import the emulated module of source, once per content of it, the harness and headers.

    Args:
        name: the module's name prefix (a hash of the contents is appended; ninja does not see header changes).
        source: the C++ file that binds the kernels.
        headers: the csrc/ files its kernels are built from.

    Returns:
        the imported module; the test is skipped where the emulation cannot run (no POSIX fibers, no compiler).
    """
    if os.name != "posix":
        pytest.skip("the emulation runs threads as POSIX ucontext fibers")
    problem = compiler_problem()
    if problem is not None:
        pytest.skip(problem)
    from torch.utils.cpp_extension import load

    files = sorted(p for p in EMULATION.iterdir() if p.suffix in {".h", ".cpp"}) + [source, *headers]
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files if p.is_file())).hexdigest()
    return load(
        name=f"{name}_{digest[:12]}",
        sources=[str(source)],
        extra_include_paths=[str(EMULATION), str(CSRC)],
        extra_cflags=["-O2", "-Wno-unknown-pragmas"],
    )


def cuda_headers(*directories: str) -> list[Path]:
    """The .cuh and .h files of the given csrc/ directories (e.g. "common/cuda"), in path order."""
    return [p for d in directories for p in sorted((CSRC / d).iterdir()) if p.suffix in {".cuh", ".h"}]
