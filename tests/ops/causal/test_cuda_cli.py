"""`lintf fit` trains the copy task on a GPU in mixed precision through the chunked CUDA kernel.

Runs the command a user types (in a subprocess), then reads the logged training loss: it must fall.
Skipped without a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lintf.ops import compiled_op_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REPO = Path(__file__).resolve().parents[3]
STEPS = 400


def lintf_command() -> list[str]:
    """The installed console script, or the same entry point through this interpreter."""
    script = shutil.which("lintf")
    return [script] if script else [sys.executable, "-m", "lintf.run.cli"]


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_copy_task_trains_on_gpu(tmp_path, precision):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    assert compiled_op_available("cuda"), "the op was built without its CUDA kernel"
    command = [
        *lintf_command(), "fit", "--config", str(REPO / "configs" / "copy.yaml"),
        "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.precision", precision,
        "--trainer.max_steps", str(STEPS), "--trainer.default_root_dir", str(tmp_path),
        "--trainer.val_check_interval", str(STEPS), "--trainer.limit_val_batches", "2",
        "--trainer.log_every_n_steps", "10", "--trainer.enable_progress_bar", "false",
    ]
    env = {**os.environ, "LINTF_CUDA_KERNEL": "chunked"}  # the kernel under test, whatever auto would pick
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    events = event_accumulator.EventAccumulator(str(next((tmp_path / "lightning_logs").glob("*/version_*"))))
    events.Reload()
    losses = [event.value for event in events.Scalars("train/loss")]
    assert len(losses) >= 20 and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.85 * first, f"{precision}: training loss {first:.3f} -> {last:.3f} over {STEPS} steps"
