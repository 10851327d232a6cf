"""The build lock: builders exclude each other, and torch's own build lock is waited for or cleared, never robbed."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import filelock
import pytest

from lintf.ops.extension import lock


def hold_torch_lock(build_dir: Path) -> subprocess.Popen:
    """A process holding torch >= 2.14's build lock (a filelock.FileLock on <build dir>/lock) until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import filelock, sys\nwith filelock.FileLock({str(build_dir / 'lock')!r}):\n"
         "    print('held', flush=True)\n    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_an_unheld_torch_lock_left_in_the_build_dir_does_not_block(tmp_path):
    """torch 2.14 leaves its lock file after every build; torch <= 2.13 a killed build's baton file."""
    (tmp_path / "lock").touch()
    with lock.build_lock(tmp_path, timeout_s=5):
        if lock.torch_lock_is_existence_based():
            assert not (tmp_path / "lock").exists(), "torch would wait on this baton forever"
        else:  # the file stays (waiters share its inode); torch can take it at once
            probe = filelock.FileLock(str(tmp_path / "lock"))
            probe.acquire(timeout=0)
            probe.release()


def test_a_held_torch_lock_is_reported_after_the_timeout_not_deleted(tmp_path):
    holder = hold_torch_lock(tmp_path)
    try:
        with pytest.raises(lock.BuildLockError, match=re.escape(f"torch build lock {tmp_path / 'lock'}, held by")):
            with lock.build_lock(tmp_path, timeout_s=0.5):
                pass
        assert (tmp_path / "lock").exists()
    finally:
        holder.communicate("")
    with lock.build_lock(tmp_path, timeout_s=0.5):  # the lintf lock was released with the error
        pass


def test_a_held_torch_lock_is_waited_for(tmp_path):
    holder = hold_torch_lock(tmp_path)
    entered = threading.Event()

    def build() -> None:
        with lock.build_lock(tmp_path, timeout_s=60):
            entered.set()

    builder = threading.Thread(target=build)
    builder.start()
    try:
        assert not entered.wait(1.0), "entered while another process held torch's lock"
    finally:
        holder.communicate("")  # the holder exits, releasing the lock
    builder.join(60)
    assert entered.is_set()


def test_a_busy_build_lock_times_out_naming_the_lock(tmp_path):
    with lock.build_lock(tmp_path):
        with pytest.raises(lock.BuildLockError, match=re.escape(str(tmp_path / "lintf_build.lock"))):
            with lock.build_lock(tmp_path, timeout_s=0.3):
                pass
    with lock.build_lock(tmp_path, timeout_s=0.3):  # released again
        pass


def test_the_build_lock_excludes_without_fcntl(tmp_path, monkeypatch):
    """filelock picks the platform's locking; the lock does not silently vanish where fcntl is missing."""
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` now raises ImportError
    with lock.build_lock(tmp_path):
        with pytest.raises(lock.BuildLockError, match=re.escape(str(tmp_path / "lintf_build.lock"))):
            with lock.build_lock(tmp_path, timeout_s=0.3):
                pass


def test_the_build_lock_excludes_another_process(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from lintf.ops.extension.lock import build_lock\nfrom pathlib import Path\nimport time\n"
         f"with build_lock(Path({str(tmp_path)!r})):\n    print('held', flush=True)\n    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(lock.BuildLockError, match="another process is still building"):
            with lock.build_lock(tmp_path, timeout_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    with lock.build_lock(tmp_path, timeout_s=5):  # the OS released the dead holder's lock
        pass
