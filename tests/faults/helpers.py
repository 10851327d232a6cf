"""What the fault tests share: the ``lintf`` console script in a subprocess, one-paragraph errors, read-only places."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lintf.run.cli import main
from tests.cli.helpers import REPO

CONSOLE_SCRIPT = "import sys; from lintf.run.cli import main; sys.exit(main())"
"""What pip's ``lintf`` wrapper runs: whatever ``main`` returns becomes the exit status."""


def lintf_process(args: list[str], cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``lintf ARGS`` as a user's shell runs it, with lintf from this tree and the compiled op off (fast start)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "LINTF_EXTENSION": "0", **env}
    return subprocess.run([sys.executable, "-c", CONSOLE_SCRIPT, *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def one_paragraph(args: list[str], capsys, prefix: str, code: int = 2) -> str:
    """The one ``<prefix>...`` line of a command that fails with exit ``code`` and no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, err
    return lines[0]


@contextlib.contextmanager
def read_only_directory(path: Path) -> Iterator[Path]:
    """``path`` as a directory this process cannot write: its mode bits, or for root (whom they do not stop) a
    read-only tmpfs mounted there; skips the test where neither can be had."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o555)
    mounted = False
    try:
        if os.access(path, os.W_OK):
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a read-only directory here: {done.stderr.strip()}")
            mounted = True
        yield path
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)
        path.chmod(0o755)
