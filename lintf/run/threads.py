"""The number of threads a ``lintf`` run computes with: the CPUs it may use that other processes leave free.

PyTorch starts with one intra-op thread per core. OpenMP's threads wait for each other at the end
of every parallel region, so when another process keeps one of those cores busy, the thread that
shares it holds all of them back: on 2 CPUs with one kept busy, 2 threads trained the copy config
several times slower than 1. ``use_default_threads`` runs once when the ``lintf`` command starts
and, for a command that computes (not ``--help``, ``lintf build`` or ``lintf checkpoint``), lowers
PyTorch's count to the CPUs this process may use (affinity, CPU quota), at most one per physical
core, minus those other processes keep busy (sampled from /proc/stat for 0.1 s). It never
raises the count, and leaves it alone where the user chose one: ``LINTF_THREADS=N`` sets it,
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` (read by PyTorch itself) keep PyTorch's, and code that runs
later (a plugin, Lightning's DDP, which divides the CPUs among its processes) may set its own.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from lintf.run.errors import ConfigError

THREADS_VARIABLE = "LINTF_THREADS"
PYTORCH_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
SAMPLE_SECONDS = 0.1
SPARE = 0.25
"""A CPU counts as free when other processes leave at least 1 - SPARE of it idle (daemons, a terminal)."""
CPU_DIR = Path("/sys/devices/system/cpu")
IDLE_COMMANDS = frozenset({"build", "checkpoint"})
"""lintf's own subcommands that run no model: their thread count does not matter."""
PRINTING_OPTIONS = ("-h", "--help", "--print_config")
"""Options after which a command prints and stops."""
_notice: str | None = None


class CpuFacts(NamedTuple):
    """What the thread count is chosen from.

    Args:
        usable: CPUs this process may run on (its affinity, capped by a CPU quota).
        cores: physical cores among them.
        busy: CPUs' worth of time other processes took while sampled (0 to ``usable``).
    """

    usable: int
    cores: int
    busy: float


def default_threads(facts: CpuFacts) -> int:
    """Threads for a run: one per free CPU, at most one per physical core, at least one."""
    free = facts.usable - facts.busy
    return max(1, min(facts.cores, math.floor(free + SPARE)))


def cpu_quota(cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs' worth of time a cgroup quota allows this process (a container's ``--cpus``), None without one."""
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            fields = (cgroup / quota_file).read_text().split()
            if period_file is not None:
                fields.append((cgroup / period_file).read_text().strip())
        except OSError:
            continue
        if len(fields) == 2 and fields[0] not in ("max", "-1"):
            return int(fields[0]) / int(fields[1])
        return None
    return None


def physical_cores(cpus: list[int], cpu_dir: Path = CPU_DIR) -> int:
    """Distinct physical cores among ``cpus`` (Linux sysfs topology); ``len(cpus)`` where it cannot be read."""
    cores = set()
    for cpu in cpus:
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def cpu_ticks(cpus: list[int], stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(busy, total) clock ticks of ``cpus`` since boot; idle and I/O wait are idle, steal is busy."""
    busy = total = 0
    wanted = {f"cpu{cpu}" for cpu in cpus}
    for line in stat.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] in wanted:
            ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
            busy += sum(ticks) - ticks[3] - ticks[4]
            total += sum(ticks)
    return busy, total


def own_ticks() -> int:
    """Clock ticks this process (all its threads) has run, user and system."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def busy_cpus(cpus: list[int], seconds: float = SAMPLE_SECONDS) -> float:
    """CPUs' worth of time other processes take on ``cpus``, over ``seconds``; 0.0 where /proc cannot be read."""
    try:
        (busy_before, total_before), mine_before = cpu_ticks(cpus), own_ticks()
        time.sleep(seconds)
        (busy_after, total_after), mine_after = cpu_ticks(cpus), own_ticks()
    except (OSError, ValueError, IndexError):
        return 0.0
    total = total_after - total_before
    if total <= 0:
        return 0.0
    others = (busy_after - busy_before) - (mine_after - mine_before)
    return min(max(others / total * len(cpus), 0.0), float(len(cpus)))


def cpu_facts() -> CpuFacts:
    """The usable CPUs, their physical cores and the load of other processes on them, now."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    quota = cpu_quota()
    usable = len(cpus) if quota is None else max(1, min(len(cpus), math.ceil(quota)))
    return CpuFacts(usable=usable, cores=min(usable, physical_cores(cpus)), busy=busy_cpus(cpus))


def requested_threads() -> int | None:
    """The count LINTF_THREADS asks for, None when it is unset or empty; a ConfigError when it is not a count."""
    value = os.environ.get(THREADS_VARIABLE) or None
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise ConfigError(f"{THREADS_VARIABLE}={value!r} is not valid: give a whole number of threads of at least 1, "
                          "or unset it to let lintf choose (one per CPU that other processes leave free, at most one "
                          "per physical core).")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if int(value) > cpus:  # each thread takes a stack and per-thread buffers: far more than CPUs exhausts memory
        raise ConfigError(f"{THREADS_VARIABLE}={value!r} is more than the {cpus} CPU{'s' if cpus > 1 else ''} this "
                          f"process may use: give a whole number from 1 to {cpus}, or unset it to let lintf choose.")
    return int(value)


def computes(argv: Sequence[str]) -> bool:
    """Whether ``lintf <argv>`` may run a model: fit, validate, test, predict, generate or an extension's command.

    False for ``lintf`` alone, ``build`` and ``checkpoint``, and a command line that asks only for
    help or the configuration (``--help``, ``-h``, ``--print_config``).
    """
    if not argv or argv[0] in IDLE_COMMANDS:
        return False
    return not any(arg.split("=", 1)[0] in PRINTING_OPTIONS for arg in argv)


def use_default_threads(argv: Sequence[str]) -> int:
    """Set PyTorch's intra-op thread count for ``lintf <argv>`` unless the user chose one; return the count in use.

    LINTF_THREADS sets it (and is refused here, on every command line, when it is not a count);
    with OMP_NUM_THREADS or MKL_NUM_THREADS set, or for a command line that runs no model
    (``computes``), PyTorch's own count stays. Otherwise the count is lowered (never raised) to
    ``default_threads(cpu_facts())``; when other processes' load is the reason,
    ``say_thread_notice`` says so once the run starts.

    Args:
        argv: the command line after ``lintf``.
    """
    requested = requested_threads()
    if requested is not None:
        torch.set_num_threads(requested)
        return requested
    if not computes(argv) or any(os.environ.get(name) for name in PYTORCH_VARIABLES):
        return torch.get_num_threads()
    current, facts = torch.get_num_threads(), cpu_facts()
    chosen = min(current, default_threads(facts))
    if chosen < current:
        torch.set_num_threads(chosen)
    global _notice
    if chosen < min(current, facts.cores):
        _notice = (f"lintf: computing on {chosen} thread{'s' if chosen > 1 else ''}: other processes keep "
                   f"{facts.busy:.1f} of the {facts.usable} CPUs busy ({THREADS_VARIABLE}=N chooses the count)")
    return chosen


def say_thread_notice() -> None:
    """Print, once, why ``use_default_threads`` lowered the count; called where a run starts its work.

    Not printed by ``use_default_threads`` itself: ``--help`` and a refused command stay free of it.
    """
    global _notice
    if _notice is not None:
        print(_notice, file=sys.stderr, flush=True)
        _notice = None
