"""The progress line of a build: what is built, how long the last build on this machine took, and the time so far.

A build takes 20 s on an idle workstation and minutes on a busy 2-core machine, so a fixed estimate
misleads: each build records its duration in the build root, and the next one quotes it. On a
terminal the line counts the seconds as they pass; elsewhere (logs, pipes) one line starts the build
and one ends it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

DURATION_FILE = "last_build_seconds"
FIRST_ESTIMATE = "20 s to 3 min, longer on a busy machine"


def last_duration(root: Path) -> float | None:
    """Seconds the last recorded build under ``root`` took, or None."""
    try:
        return float((root / DURATION_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def duration_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def estimate(root: Path) -> str:
    """What to expect: the last build's duration here, or the range seen on other machines."""
    seconds = last_duration(root)
    return f"the last build here took {duration_text(seconds)}" if seconds is not None else FIRST_ESTIMATE


@contextlib.contextmanager
def build_progress(notice: str, root: Path) -> Iterator[None]:
    """Show ``notice`` with the estimate while the block builds; then the time it took, recorded under ``root``.

    Args:
        notice: what is built (printed first, on stderr).
        root: the directory of every build of this kind (its duration is kept there).
    """
    start, done = time.monotonic(), threading.Event()
    line = f"{notice} ({estimate(root)})"
    live = sys.stderr.isatty()
    print(line + ("" if live else "..."), file=sys.stderr, end="" if live else "\n", flush=True)

    def tick() -> None:
        while not done.wait(1.0):
            print(f"\r{line}: {duration_text(time.monotonic() - start)}", file=sys.stderr, end="", flush=True)

    ticker = threading.Thread(target=tick, daemon=True) if live else None
    if ticker is not None:
        ticker.start()
    try:
        yield
    finally:
        done.set()
        if ticker is not None:
            ticker.join()
            print(file=sys.stderr)
    seconds = time.monotonic() - start
    print(f"lintf: built the compiled ops in {duration_text(seconds)}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        (root / DURATION_FILE).write_text(f"{seconds:.1f}\n")
