"""``lintf fit --help`` says where the model's and the data's options are before the trainer's 700 lines."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.helpers import REPO


@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_help_of_a_run_names_the_model_and_data_help(subcommand):
    done = subprocess.run([sys.executable, "-m", "lintf.run.cli", subcommand, "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())  # the help is wrapped to the terminal's width
    assert f"lintf {subcommand} --model.help CopyTask" in text and f"lintf {subcommand} --data.help CopyData" in text
    assert text.index("--model.help CopyTask") < text.index("--trainer.max_steps MAX_STEPS Stop"), \
        "the hint must come before the trainer's options"
    shown = subprocess.run([sys.executable, "-m", "lintf.run.cli", subcommand, "--model.help", "CopyTask"],
                           capture_output=True, text=True, cwd=REPO, timeout=300)
    assert shown.returncode == 0 and "--model.encoder.attention" in shown.stdout
