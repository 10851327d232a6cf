"""Test-time VTLN: the best-path score, the choice of warp, and `lintf asr vtln` end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.adaptation.warp_search import best_path_log_prob, choose_warp
from lintf.asr.model.task import ASRTask
from lintf.models.encoder_config import EncoderConfig

REPO = Path(__file__).resolve().parents[2]


def test_best_path_log_prob_averages_each_frames_top_label_over_valid_frames():
    probs = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.25, 0.25]],
                          [[0.2, 0.3, 0.5], [0.9, 0.05, 0.05], [1 / 3, 1 / 3, 1 / 3]]])  # (B=2, T=3, V=3)
    scores = best_path_log_prob(probs.log(), torch.tensor([3, 1]))  # the second utterance has one valid frame
    expected = [(math.log(0.7) + math.log(0.6) + math.log(0.5)) / 3, math.log(0.5)]
    torch.testing.assert_close(scores, torch.tensor(expected))


def test_choose_warp_takes_the_highest_score_and_the_warp_nearest_one_on_ties():
    assert choose_warp({0.9: -0.2, 1.0: -0.15, 1.1: -0.12}) == 1.1
    assert choose_warp({0.9: -0.1, 1.0: -0.2, 1.1: -0.1}) in (0.9, 1.1)
    assert choose_warp({0.95: -0.1, 1.0: -0.1, 1.2: -0.1}) == 1.0
    with pytest.raises(ValueError, match="at least one warp"):
        choose_warp({})


def test_asr_vtln_scores_each_warp_and_chooses_the_best_score(corpus, tmp_path):
    torch.manual_seed(0)
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=3, hop_ms=5.0)
    task = ASRTask(data.vocab_size, data.max_length, EncoderConfig(d_model=16, n_layers=1, n_heads=2), conv_channels=4)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(task, datamodule=data)
    trainer.save_checkpoint(tmp_path / "asr.ckpt")
    script = [sys.executable, "-m", "lintf.run.cli", "asr", "vtln"]
    out = tmp_path / "out"
    subprocess.run([*script, "--ckpt", str(tmp_path / "asr.ckpt"), "--manifest", str(corpus["test"]),
                    "--warps", "0.9", "1.0", "1.2", "--out", str(out)], check=True, capture_output=True, cwd=tmp_path)
    result = json.loads((out / "asr_vtln.json").read_text())
    scores = {row["warp"]: row["score"] for row in result["results"]}
    assert list(scores) == [0.9, 1.0, 1.2] and len(set(scores.values())) == 3  # the warp changes the model's input
    assert result["chosen"] == max(scores, key=scores.get)
    assert f"test_warp {result['chosen']:g}" in (out / "asr_vtln.md").read_text()
    failed = subprocess.run([*script, "--ckpt", "x.ckpt", "--warps", "1.5"], capture_output=True, text=True, cwd=tmp_path)
    assert failed.returncode == 2 and "--warps must lie in [0.7, 1.3]" in failed.stderr
