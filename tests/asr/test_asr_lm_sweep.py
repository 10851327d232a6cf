"""`lintf asr lm-sweep` decodes a checkpoint's outputs with and without the character LM."""

import json
import subprocess
import sys
from pathlib import Path

import torch
from lightning.pytorch import Trainer

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.model.task import ASRTask
from lintf.models.encoder_config import EncoderConfig

LM_SWEEP = [sys.executable, "-m", "lintf.run.cli", "asr", "lm-sweep"]


def test_sweep_table_and_zero_weight_matches_plain_beam(corpus, tmp_path):
    torch.manual_seed(0)
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=3, hop_ms=5.0)
    task = ASRTask(data.vocab_size, data.max_length, EncoderConfig(d_model=16, n_layers=1, n_heads=2), conv_channels=4,
                   depthwise_blocks=1, depthwise_kernel=3)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(task, datamodule=data)
    trainer.save_checkpoint(tmp_path / "asr.ckpt")
    out = tmp_path / "out"
    subprocess.run([*LM_SWEEP, "--ckpt", str(tmp_path / "asr.ckpt"),
                    "--manifest", str(corpus["val"]), "--train-manifest", str(corpus["train"]), "--orders", "0", "3",
                    "--weights", "0", "0.5", "--bonuses", "0", "--limit", "4", "--out", str(out)],
                   check=True, capture_output=True, cwd=tmp_path)
    rows = json.loads((out / "asr_lm_sweep.json").read_text())["results"]
    assert [(r["order"], r["weight"]) for r in rows] == [(0, 0.0), (3, 0.0), (3, 0.5)]
    assert rows[1]["cer"] == rows[0]["cer"] and rows[1]["wer"] == rows[0]["wer"]  # weight 0, bonus 0: no change
    assert "| 3 | 0.5 | 0 |" in (out / "asr_lm_sweep.md").read_text()
    (tmp_path / "lm.txt").write_text("dab cab\n")
    subprocess.run([*LM_SWEEP, "--ckpt", str(tmp_path / "asr.ckpt"),
                    "--manifest", str(corpus["val"]), "--train-manifest", str(corpus["train"]), "--lm-text", "lm.txt",
                    "--orders", "3", "--weights", "0.5", "--bonuses", "0", "--limit", "2", "--out", str(out)],
                   check=True, capture_output=True, cwd=tmp_path)
    assert "LM text `lm.txt`" in (out / "asr_lm_sweep.md").read_text()
    failed = subprocess.run([*LM_SWEEP, "--ckpt", "x.ckpt",
                             "--orders", "-1"], capture_output=True, text=True, cwd=tmp_path)
    assert failed.returncode == 2 and "orders must be >= 0" in failed.stderr
    warped = subprocess.run([*LM_SWEEP, "--ckpt", "x.ckpt",
                            "--test-warp", "2"], capture_output=True, text=True, cwd=tmp_path)
    assert warped.returncode == 2 and "--test-warp must lie in [0.7, 1.3]" in warped.stderr
    missing = subprocess.run([*LM_SWEEP, "--ckpt", "missing.ckpt"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode == 2 and "--ckpt missing.ckpt is not a file" in missing.stderr
