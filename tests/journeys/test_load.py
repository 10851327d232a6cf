"""From a checkpoint to text in Python: ``lintf.load(CKPT).generate(prompt)``, as ``lintf generate`` prints it."""

from __future__ import annotations

import subprocess
import sys

import lintf
from lintf.run.cli import main
from tests.cli.helpers import REPO, tiny


def test_load_generates_what_the_command_prints(tmp_path):
    main(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1"))
    checkpoint = tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "checkpoints" / "last.ckpt"
    model = lintf.load(str(checkpoint))
    assert type(model.task).__name__ == "CopyTask" and not model.task.training
    text = model.generate("3 1 4 1", temperature=0)
    printed = subprocess.run([sys.executable, "-m", "lintf.run.cli", "generate", "--ckpt_path", str(checkpoint),
                              "--prompt", "3 1 4 1", "--temperature", "0"], capture_output=True, text=True,
                             cwd=REPO, timeout=600)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert text == printed.stdout.strip() and text.startswith("3 1 4 1 SEP")
    assert model.generate("3 1 4 1", temperature=1.0, seed=5) == model.generate("3 1 4 1", temperature=1.0, seed=5)


def test_import_lintf_stays_light():
    done = subprocess.run([sys.executable, "-c", "import sys, lintf\n"
                           "print(sorted(m for m in sys.modules if m.startswith(('lightning', "
                           "'lintf.generation', 'torch.utils.cpp_extension'))))\nassert callable(lintf.load)"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", "import lintf loaded the run or generation machinery"
