"""The first fit on a machine builds the compiled ops before training starts, with a line of its own that
says what to expect, and then how long it took; the next build quotes that time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lintf.ops.extension.build import BUILD_NOTICE
from lintf.ops.extension.environment import extension_disabled
from tests.cli.helpers import REPO, tiny


@pytest.mark.slow
@pytest.mark.skipif(extension_disabled(), reason="LINTF_EXTENSION turns the compiled op off")
def test_the_first_fit_builds_before_the_run_starts_and_says_how_long(tmp_path):
    env = {**os.environ, "LINTF_EXTENSION": "", "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", *tiny(tmp_path, "--trainer.max_steps", "1",
                                                                       "--trainer.limit_val_batches", "1")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:]
    out = done.stdout
    assert BUILD_NOTICE in out and "(20 s to 3 min" in out
    built = out.index("lintf: built the compiled ops in ")
    assert built < out.index("run directory:"), "the build ended after the run had started"
    recorded = float((tmp_path / "extensions" / "lintf" / "last_build_seconds").read_text())
    assert recorded > 0
    from lintf.ops.extension.progress import duration_text, estimate
    assert estimate(tmp_path / "extensions" / "lintf") == f"the last build here took {duration_text(recorded)}"
