"""The lock every build of the compiled op holds, and how it treats torch's own build lock.

Builders serialise on ``<build dir>/lintf_build.lock``, a ``filelock.FileLock`` (an OS lock: released
when its holder dies), so DDP ranks starting together build once and never write the same files at
the same time.

Inside that lock ``torch.utils.cpp_extension.load`` takes torch's lock ``<build dir>/lock``, whose
meaning depends on the torch release:

- up to torch 2.13 a ``FileBaton``: the file's existence is the lock (``O_CREAT | O_EXCL``), and
  torch waits as long as the file exists, so a build that was killed leaves a file that blocks
  every later build forever;
- from torch 2.14 a ``filelock.FileLock`` (``flock``): the file stays after every build, and only a
  live holder blocks.

So an existing ``lock`` is stale only if nobody holds it. ``build_lock`` first waits (within the same
timeout) until it can take the OS lock on that file; a process that holds it is waited for, never
robbed. Once taken, a file that torch treats as a baton by its existence is removed: it cannot
belong to a build in progress, because every lintf build runs under ``lintf_build.lock``, which
this process holds. A lock that stays held past the timeout is a BuildLockError naming the file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

LOCK_TIMEOUT_S = 1800.0
LINTF_LOCK = "lintf_build.lock"
TORCH_LOCK = "lock"


class BuildLockError(RuntimeError):
    """A build lock stayed held past the timeout: another builder hangs, or never finishes."""


def torch_lock_is_existence_based() -> bool:
    """Whether this torch's JIT builds lock by the existence of ``<build dir>/lock`` (FileBaton, torch <= 2.13)."""
    from torch.utils import cpp_extension

    return getattr(cpp_extension, "FileBaton", None) is not None


def _acquire(lock: filelock.FileLock, timeout_s: float, problem: str) -> None:
    try:
        lock.acquire(timeout=max(timeout_s, 0.0))
    except filelock.Timeout:
        raise BuildLockError(f"lintf: waited {timeout_s:.1f} s for {problem}") from None


def clear_torch_lock(build_dir: Path, timeout_s: float) -> None:
    """Wait until nobody holds torch's lock in build_dir; remove it if this torch treats its existence as held.

    Call only while holding ``lintf_build.lock`` of build_dir (see the module's docstring).

    Args:
        build_dir: the build directory.
        timeout_s: how long to wait for a holder of torch's lock.

    Raises:
        BuildLockError: the lock was still held after timeout_s.
    """
    path = build_dir / TORCH_LOCK
    if not path.exists():
        return
    probe = filelock.FileLock(str(path))
    _acquire(probe, timeout_s, f"the torch build lock {path}, held by another process (a build that hangs?)")
    try:
        if torch_lock_is_existence_based():
            # nobody holds it as an OS lock, and no lintf build can be running (this process holds
            # lintf_build.lock): the file is a killed build's FileBaton, which torch would wait on forever
            path.unlink(missing_ok=True)
    finally:
        probe.release()


@contextlib.contextmanager
def build_lock(build_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive inter-process build lock of build_dir, with torch's lock there free to take.

    Args:
        build_dir: the build directory (created if missing).
        timeout_s: how long to wait in all, for another lintf builder and then for a holder of torch's lock.

    Raises:
        BuildLockError: either lock stayed held past the timeout.
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    lock_path = build_dir / LINTF_LOCK
    lock = filelock.FileLock(str(lock_path))
    _acquire(lock, timeout_s,
             f"the extension build lock {lock_path}; another process is still building (or hangs) there")
    try:
        clear_torch_lock(build_dir, deadline - time.monotonic())
        yield
    finally:
        lock.release()
