"""Unsupervised speaker adaptation: the mixed manifest, fine-tuning, no reference read, the script end to end."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.adaptation.self_training import AdaptationSettings, adapt_to_speaker, fine_tune, mixed_rows, transcribe_all
from lintf.asr.corpora.manifest import read_manifest
from lintf.asr.checkpoint import load_asr_checkpoint
from lintf.asr.model.task import ASRTask
from lintf.run.checkpoint_files import load_checkpoint_file, sidecar_of
from lintf.models.encoder_config import EncoderConfig

REPO = Path(__file__).resolve().parents[2]
TINY = {"encoder": EncoderConfig(d_model=16, n_layers=1, n_heads=2), "conv_channels": 4}


def tiny_task(data: SpeechData) -> ASRTask:
    torch.manual_seed(0)
    task = ASRTask(data.vocab_size, data.max_length, **TINY).eval()
    task.vocabulary = data.vocabulary
    return task


def test_mixed_rows_repeat_pseudo_transcripts_skip_empty_ones_and_keep_labelled_references(corpus):
    speaker, labelled = read_manifest(corpus["test"])[:3], read_manifest(corpus["train"])[:2]
    transcripts = {str(speaker[0].audio_filepath): "ab", str(speaker[1].audio_filepath): " ",
                   str(speaker[2].audio_filepath): "cad"}
    rows = mixed_rows(speaker, transcripts, labelled, repeat=2)
    assert [r["text"] for r in rows] == ["ab", "cad", "ab", "cad", labelled[0].text, labelled[1].text]
    assert all(Path(r["audio_filepath"]).is_absolute() for r in rows)
    assert rows[1]["duration"] == speaker[2].duration


def test_fine_tune_fits_the_given_transcripts(corpus):
    data = SpeechData(str(corpus["train"]), batch_size=6, spec_augment=False)
    task = tiny_task(data)
    batch = next(iter(data.loader("train")))
    before = float(task.ctc_loss(batch)[0].detach())
    fine_tune(task, data.loader("train"), steps=30, lr=3e-3)
    assert not task.training and float(task.ctc_loss(batch)[0].detach()) < 0.7 * before


def test_adaptation_never_reads_the_speakers_references(corpus, tmp_path):
    """Two copies of the speaker with different reference texts adapt to the same weights and transcripts."""
    wrong = tmp_path / "wrong.jsonl"
    rows = [json.loads(line) for line in corpus["test"].read_text().splitlines()]
    wrong.write_text("".join(json.dumps({**r, "audio_filepath": str(corpus["test"].parent / r["audio_filepath"]),
                                         "text": "dab"}) + "\n" for r in rows))
    settings = AdaptationSettings(rounds=2, steps=3, lr=1e-3, repeat=2, labelled=2)
    results, rounds = [], []
    for manifest in (corpus["test"], wrong):
        data = SpeechData(str(corpus["train"]), test_manifest=str(manifest), batch_size=3, test_warp=1.1)
        task = tiny_task(data)
        before = {k: v.clone() for k, v in task.state_dict().items()}
        transcripts = adapt_to_speaker(task, data, data.split_entries("train"),
                                       lambda m: SpeechData(m, vocabulary=data.vocabulary.characters, batch_size=3),
                                       settings, tmp_path / "work", lambda r, t: rounds.append(r))
        assert any(not torch.equal(before[k], v) for k, v in task.state_dict().items())  # it did adapt
        results.append((task.state_dict(), sorted(Path(p).name for p in transcripts), list(transcripts.values())))
    assert rounds == [0, 1, 2, 0, 1, 2]
    (first, names, texts), (second, names2, texts2) = results
    assert names == names2 and sorted(texts) == sorted(texts2)
    for key in first:
        torch.testing.assert_close(first[key], second[key])
    with pytest.raises(ValueError, match="mixes in 50 labelled utterances but only 6"):
        adapt_to_speaker(task, data, data.split_entries("train"), None, AdaptationSettings(labelled=50), tmp_path)
    with pytest.raises(ValueError, match="rounds, steps, repeat >= 1"):
        AdaptationSettings(rounds=0)


def test_transcribe_all_keys_every_utterance_by_its_file(corpus):
    data = SpeechData(str(corpus["train"]), test_manifest=str(corpus["test"]), batch_size=4)
    transcripts = transcribe_all(tiny_task(data), data.loader("test"))
    assert sorted(transcripts) == sorted(str(e.audio_filepath) for e in data.split_entries("test"))


def test_asr_adapt_script_writes_an_adapted_checkpoint_that_lintf_test_reads(corpus, tmp_path):
    torch.manual_seed(0)
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=3, hop_ms=5.0, vtlp=0.1)
    task = ASRTask(data.vocab_size, data.max_length, **TINY)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(task, datamodule=data)
    trainer.save_checkpoint(tmp_path / "asr.ckpt")
    config = tmp_path / "decode.yaml"
    config.write_text("decoding:\n  class_path: lintf.asr.CTCDecoding\n  init_args:\n    decoder: beam\n    beam_width: 4\n"
                      "    lm_order: 3\n    lm_weight: 0.5\n")
    script = [sys.executable, "-m", "lintf.run.cli", "asr", "adapt"]
    out, adapted = tmp_path / "out", tmp_path / "adapted.ckpt"
    subprocess.run([*script, "--ckpt", str(tmp_path / "asr.ckpt"), "--manifest", str(corpus["test"]),
                    "--config", str(config), "--train-manifest", str(corpus["train"]), "--rounds", "1", "--steps", "2",
                    "--labelled", "3", "--warp", "1.05", "--adapted", str(adapted), "--out", str(out)],
                   check=True, capture_output=True, cwd=tmp_path)
    result = json.loads((out / "asr_adapt.json").read_text())
    assert [r["round"] for r in result["results"]] == [0, 1] and "| 1 |" in (out / "asr_adapt.md").read_text()
    assert sidecar_of(adapted).read_text().split()[0] == hashlib.sha256(adapted.read_bytes()).hexdigest()
    original, changed = load_checkpoint_file(tmp_path / "asr.ckpt"), load_checkpoint_file(adapted)
    assert changed["lintf_vocabulary"] == original["lintf_vocabulary"] and "lintf_adaptation" in changed
    assert any(not torch.equal(original["state_dict"][k], v) for k, v in changed["state_dict"].items())
    restored = load_asr_checkpoint(str(adapted)).task
    assert restored.vocabulary == data.vocabulary
    failed = subprocess.run([*script, "--ckpt", "x.ckpt", "--lr", "0.5"], capture_output=True, text=True, cwd=REPO)
    assert failed.returncode == 2 and "0 < lr < 0.01" in failed.stderr
    warped = subprocess.run([*script, "--ckpt", "x.ckpt", "--warp", "1.5"], capture_output=True, text=True, cwd=REPO)
    assert warped.returncode == 2 and "--warp must lie in [0.7, 1.3]" in warped.stderr
    no_config = subprocess.run([*script, "--ckpt", "x.ckpt", "--config", "missing.yaml"], capture_output=True, text=True,
                               cwd=REPO)
    assert no_config.returncode == 2 and "--config missing.yaml is not a file" in no_config.stderr
    no_ckpt = subprocess.run([*script, "--ckpt", "missing.ckpt"], capture_output=True, text=True, cwd=REPO)
    assert no_ckpt.returncode == 2 and "--ckpt missing.ckpt is not a file" in no_ckpt.stderr
