"""The LINTF_* environment variables the ops read, checked together before any work starts.

The ops read them late: ``LINTF_CPU_OUTPUT_CACHE_MB`` at the first large output, ``LINTF_CPU_PATH``
at every call, ``LINTF_CPU_ARCH`` when a build runs. ``check_environment`` validates all of them
at once, without building or loading the compiled op, so a typo is reported at start-up rather
than after training started (or, for ``LINTF_CPU_ARCH``, as a silent fall-back to PyTorch).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

EXTENSION_OFF = ("0", "off", "false", "no")
EXTENSION_ON = ("1", "on", "true", "yes")
CPU_PATHS = ("avx512", "avx2", "portable")
CUDA_KERNELS = ("auto", "chunked", "scan")  # as csrc/causal/cuda/causal_product_cuda.cu reads them
CACHE_MB_LIMIT = 1 << 40
CACHE_KIB_LIMIT = 1 << 30  # 1 TiB, as csrc/common/cpu/caches.cpp
# the flags /proc/cpuinfo lists for each x86-64 path (the op asks cpuid for the same features)
_X86_FLAGS = {"avx512": ("avx512f", "avx2", "fma"), "avx2": ("avx2", "fma")}
_MARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_WHOLE_NUMBER = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")  # what the op's strtoll takes in full


def _value(name: str) -> str | None:
    """The variable's value, None when it is unset or empty (both mean the default)."""
    return os.environ.get(name) or None


def extension_disabled() -> bool:
    """Whether ``LINTF_EXTENSION`` turns the compiled op off (0, off, false, no; any case)."""
    return os.environ.get("LINTF_EXTENSION", "").lower() in EXTENSION_OFF


def _refuse(name: str, value: str, allowed: str) -> NoReturn:
    raise ValueError(f"{name}={value!r} is not valid: {allowed}")


def check_extension() -> None:
    """LINTF_EXTENSION: unset or one of 0/off/false/no (pure PyTorch), 1/on/true/yes (the compiled op)."""
    value = _value("LINTF_EXTENSION")
    if value is not None and value.lower() not in EXTENSION_OFF + EXTENSION_ON:
        _refuse("LINTF_EXTENSION", value, f"use one of {', '.join(EXTENSION_OFF + EXTENSION_ON)} (any case), or unset it")


def cpu_flags() -> set[str] | None:
    """The CPU feature flags Linux reports in /proc/cpuinfo, None where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith(("flags", "Features"))), None)
    return set(line.split(":", 1)[1].split()) if line else None


def check_cpu_path() -> None:
    """LINTF_CPU_PATH: unset, or a vector path (avx512, avx2, portable) this CPU runs."""
    value = _value("LINTF_CPU_PATH")
    if value is None:
        return
    if value not in CPU_PATHS:
        _refuse("LINTF_CPU_PATH", value, f"use one of {', '.join(CPU_PATHS)}, or unset it for the widest this CPU runs")
    if value == "portable":
        return
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        _refuse("LINTF_CPU_PATH", value, f"{value} is an x86-64 path; on {machine} only portable runs")
    flags = cpu_flags()
    if flags is not None and not set(_X86_FLAGS[value]) <= flags:
        runs = [path for path in CPU_PATHS if path == "portable" or set(_X86_FLAGS[path]) <= flags]
        _refuse("LINTF_CPU_PATH", value, f"this CPU cannot run {value}; it runs {', '.join(runs)}")


def check_output_cache_mb() -> None:
    """LINTF_CPU_OUTPUT_CACHE_MB: unset, or a whole number of MB >= 0 and below 2^40 (0 turns the cache off)."""
    value = _value("LINTF_CPU_OUTPUT_CACHE_MB")
    if value is not None and not (_WHOLE_NUMBER.fullmatch(value) and 0 <= int(value) < CACHE_MB_LIMIT):
        _refuse("LINTF_CPU_OUTPUT_CACHE_MB", value,
                "use a whole number of MB >= 0 and below 2^40 (0 turns the output cache off), or unset it")


def check_cpu_arch() -> None:
    """LINTF_CPU_ARCH: unset, or a -march value the C++ compiler accepts (checked when a compiler is found)."""
    value = _value("LINTF_CPU_ARCH")
    if value is None:
        return
    if not _MARCH.fullmatch(value):
        _refuse("LINTF_CPU_ARCH", value, "use a -march value such as native, x86-64-v3 or armv8.2-a, or unset it")
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        return  # nothing will be built here either
    try:
        probe = subprocess.run([compiler, f"-march={value}", "-x", "c++", "-fsyntax-only", os.devnull],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return  # the build will report a compiler that does not run
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["rejected"])[0]
        _refuse("LINTF_CPU_ARCH", value, f"{compiler} does not take -march={value} ({reason})")


def check_extension_dir() -> None:
    """LINTF_EXTENSION_DIR: unset, or an existing directory (of a ``lintf build`` build)."""
    value = os.environ.get("LINTF_EXTENSION_DIR")  # empty: the current directory, as for the loader
    if value is not None and not Path(value).is_dir():
        _refuse("LINTF_EXTENSION_DIR", value, "it must name an existing directory (where `lintf build --output DIR` "
                "wrote the op), or be unset")


def check_cpu_backward() -> None:
    """LINTF_CPU_BACKWARD: unset, or recompute, stored or auto (how the CPU ops' backward gets chunk states)."""
    from lintf.ops.common.backward_mode import cpu_backward_mode

    cpu_backward_mode()


def check_cuda_kernel() -> None:
    """LINTF_CUDA_KERNEL: unset, or auto, chunked or scan (the causal product's CUDA kernel; read by the op itself)."""
    value = _value("LINTF_CUDA_KERNEL")
    if value is not None and value not in CUDA_KERNELS:
        _refuse("LINTF_CUDA_KERNEL", value, f"use one of {', '.join(CUDA_KERNELS)}, or unset it (auto)")


def _cache_kb_problem(value: str) -> str | None:
    """Why ``LINTF_CPU_CACHE_KB=value`` is malformed, by the rules of csrc/common/cpu/caches.cpp; None if it is not."""
    fields = (value[:-1] if value.endswith(",") else value).split(",")
    kib = []
    for field in fields:
        field = field.strip(" ")
        if not field:
            return "has an empty field"
        if not re.fullmatch("[0-9]{1,12}", field):
            return f"has a field that is not a whole number ({field})"
        kib.append(int(field))
    if len(kib) != 3 or value.endswith(","):
        return "does not have three fields"
    if kib[0] < 1 or kib[1] < 1:
        return "gives an L1d or L2 of 0 KiB"
    if max(kib) > CACHE_KIB_LIMIT:
        return "gives a cache over 1 TiB"
    return "gives an L1d larger than the L2" if kib[0] > kib[1] else None


def check_cpu_cache_kb() -> None:
    """LINTF_CPU_CACHE_KB: unset, or l1d,l2,l3 in whole KiB (the caches the CPU tuning pretends; read by the op)."""
    value = _value("LINTF_CPU_CACHE_KB")
    problem = None if value is None else _cache_kb_problem(value)
    if problem is not None:
        _refuse("LINTF_CPU_CACHE_KB", value, f"it {problem}; give three whole numbers of KiB, l1d,l2,l3 (e.g. "
                f"48,2048,32768; l3 may be 0 for none, l1d and l2 from 1 to {CACHE_KIB_LIMIT}), or unset it for the "
                "sizes this CPU reports")


def check_environment() -> None:
    """Validate every LINTF_* variable the ops read; cheap (never builds or loads the compiled op).

    Checks ``LINTF_EXTENSION``, ``LINTF_CPU_PATH`` (also against this CPU's features on Linux x86-64),
    ``LINTF_CPU_OUTPUT_CACHE_MB``, ``LINTF_CPU_CACHE_KB``, ``LINTF_CPU_BACKWARD``, ``LINTF_CPU_ARCH`` (also with the
    C++ compiler, when one is found), ``LINTF_EXTENSION_DIR`` and ``LINTF_CUDA_KERNEL``. Unset or empty variables mean
    their defaults.

    Raises:
        ValueError: naming the first invalid variable, its value and what is allowed.
    """
    for check in (check_extension, check_cpu_path, check_output_cache_mb, check_cpu_cache_kb, check_cpu_backward,
                  check_cpu_arch, check_extension_dir, check_cuda_kernel):
        check()
