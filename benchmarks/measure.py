"""Timing and peak-memory helpers shared by the benchmark scripts, and their report writer.

Peak memory on the CPU has no allocator counters, so it is read from the kernel: the
high-water mark of resident memory (VmHWM, reset through /proc/self/clear_refs before the
measured call) minus the resident size just before it (inputs already allocated). Processes
run with MALLOC_MMAP_THRESHOLD_ lowered and the CPU op's output cache off
(LINTF_CPU_OUTPUT_CACHE_MB=0), so that freed tensors go back to the kernel at once and resident
memory tracks live tensors instead of glibc's free lists or reusable output buffers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Callable


def resident_mb() -> float:
    """Current resident set size of this process in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_resident_mb() -> float:
    """High-water mark of this process's resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


REPO = Path(__file__).resolve().parents[1]
# The environment under which resident memory tracks live tensors (see the module docstring).
MEMORY_TRACKING_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "LINTF_CPU_OUTPUT_CACHE_MB": "0"}


def module_environment(**extra: str) -> dict[str, str]:
    """The environment of a child ``python -m benchmarks.<name>``: the repository on its import path."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


@contextlib.contextmanager
def environment_variable(name: str, value: str | None) -> Iterator[None]:
    """Run the block with environment variable `name` set to `value` (None: unset), then restore it.
    For the op's switches that it reads on every call (LINTF_CPU_PATH, LINTF_EXTENSION, ...)."""
    before = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if before is not None:
            os.environ[name] = before


def release_freed_memory_eagerly() -> None:
    """Re-execute this benchmark module under MEMORY_TRACKING_ENV (call first thing in main())."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        module = sys.modules["__main__"].__spec__.name
        command = [sys.executable, "-m", module, *sys.argv[1:]]
        os.execve(sys.executable, command, module_environment(**MEMORY_TRACKING_ENV))


def peak_extra_mb(fn: Callable[[], Any]) -> float:
    """Peak resident MiB while running ``fn`` once, above what was resident before it."""
    base = resident_mb()
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the high-water mark to the current resident size
    fn()
    with open("/proc/self/status") as status:
        peak_kib = int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1))
    return peak_kib / 1024 - base


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1, slow_seconds: float | None = None) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after ``warmup`` untimed calls.

    With ``slow_seconds``, a function whose last warm-up call took longer is timed over one call.
    """
    warmup_seconds = 0.0
    for _ in range(warmup):
        start = time.perf_counter()
        fn()
        warmup_seconds = time.perf_counter() - start
    if slow_seconds is not None and warmup_seconds > slow_seconds:
        repeats = 1
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_isolated(module: str, *args: str, timeout: float | None = 1800) -> dict[str, Any]:
    """Run ``python -m module args`` in a fresh process; it must print one JSON object as its last line.

    The process returns freed memory to the kernel at once (see the module docstring). On failure
    the result is ``{"error": <last line of stderr>}``; ``timeout=None`` waits without limit.
    """
    env = module_environment(**MEMORY_TRACKING_ENV)
    done = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_report(out: str | Path, name: str, lines: list[str], payload: dict[str, Any]) -> None:
    """Write ``out/name.md`` (the markdown ``lines``) and ``out/name.json`` (``payload``), and print the markdown."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_whole(out / f"{name}.md", "\n".join(lines) + "\n")
    write_whole(out / f"{name}.json", json.dumps(payload, indent=2))
    print("\n".join(lines))


def write_whole(path: Path, text: str) -> None:
    """Write text to path at once: a run beside this one that reads path (a benchmark's ``--add``) never reads
    half a file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


def seconds_per_thread_count(fn: Callable[[], Any], threads: list[int], repeats: int = 7,
                             statistic: Callable[[list[float]], float] = statistics.median) -> dict[int, float]:
    """Median (or `statistic`) wall seconds of `fn` per torch thread count. The counts take turns call
    by call (after one warm-up call each), so a change in the machine's load during the measurement
    weighs on all of them alike; 3 rounds instead of `repeats` when a call takes over half a second."""
    import torch

    slow = False
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        start = time.perf_counter()
        fn()
        slow |= time.perf_counter() - start > 0.5
    times: dict[int, list[float]] = {t: [] for t in threads}
    for _ in range(3 if slow else repeats):
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            start = time.perf_counter()
            fn()
            times[n_threads].append(time.perf_counter() - start)
    return {t: statistic(v) for t, v in times.items()}


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (a length, a count of calls or threads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: give a whole number of at least 1")
    return value
