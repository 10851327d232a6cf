"""A run's checkpoint is enough: ``test`` and ``predict`` read the run's config.yaml, and every command that
loads the checkpoint of a run trained with a local plugin names the ``--plugins`` it needs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lintf.run.cli import main
from tests.cli.helpers import REPO, tiny

PLUGIN = '''
import torch.nn.functional as F
from lintf import register_feature_map
from lintf.feature_maps import FeatureMap

@register_feature_map("my_softplus")
class SoftplusFeatureMap(FeatureMap):
    """phi(x) = softplus(x)."""
    def forward(self, x):
        return F.softplus(x)
'''


def lintf_command(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lintf.run.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})


def test_test_and_predict_need_only_the_checkpoint(tmp_path, monkeypatch, capsys):
    main(tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
              "--data.n_symbols", "7"))  # a setting copy.yaml does not have: test must take it from the run
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    main(["test", "--ckpt_path", "last"])
    run = tmp_path / "lightning_logs" / "copy-linear" / "version_0"
    captured = capsys.readouterr()
    assert f"settings from {run / 'config.yaml'}" in captured.err
    assert "test/loss" in captured.out
    main(["predict", "--ckpt_path", "best"])
    assert (run / "predictions" / "predictions.jsonl").read_text().count("\n") == 16


@pytest.mark.slow
def test_generate_test_and_resume_of_a_plugin_run_name_the_plugin(tmp_path):
    (tmp_path / "my_fm.py").write_text(PLUGIN)
    trained = lintf_command(tmp_path, *tiny(tmp_path, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
                                            "--plugins", "my_fm.py", "--model.encoder.feature_map", "my_softplus"))
    assert trained.returncode == 0, trained.stderr[-2000:]
    for command in (["generate", "--ckpt_path", "last", "--prompt", "1 2 3", "--temperature", "0"],
                    ["test", "--ckpt_path", "last"]):
        refused = lintf_command(tmp_path, *command)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "trained with the plugin my_fm.py" in refused.stderr and "add --plugins my_fm.py" in refused.stderr
        assert "Traceback" not in refused.stderr
    generated = lintf_command(tmp_path, "generate", "--ckpt_path", "last", "--prompt", "1 2 3", "--temperature", "0",
                              "--plugins", "my_fm.py")
    assert generated.returncode == 0, generated.stderr[-2000:]
    assert generated.stdout.startswith("1 2 3") and generated.stderr.startswith("checkpoint: ")
