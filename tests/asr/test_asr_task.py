"""ASRTask: shapes, padding invariance, CTC training, vocabulary in checkpoints, the CLI config."""

import json
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer

from lintf.asr.checkpoint import load_asr_checkpoint
from lintf.run.checkpoint_files import load_checkpoint_file
from lintf.run.cli import LintfCLI
from lintf.asr.data.speech_data import SpeechData
from lintf.asr.text import CharVocabulary
from lintf.asr.model.task import ASRTask
from lintf.asr.decoding.options import CTCDecoding
from lintf.models.encoder_config import EncoderConfig

REPO = Path(__file__).resolve().parents[2]
TINY = {"encoder": EncoderConfig(d_model=32, n_layers=1, n_heads=2, dropout=0.0), "n_mels": 80, "conv_channels": 8}


@pytest.mark.parametrize("attention,depthwise_blocks", [("linear", 0), ("softmax", 0), ("linear", 2)])
def test_padding_does_not_change_outputs(attention, depthwise_blocks):
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=32, n_layers=1, n_heads=2, dropout=0.0, attention=attention)
    task = ASRTask(vocab_size=6, max_length=50, encoder=encoder, depthwise_blocks=depthwise_blocks, n_mels=80,
                   conv_channels=8).eval()
    long, short = torch.randn(1, 120, 80), torch.randn(1, 60, 80)
    padded = torch.zeros(2, 120, 80)
    padded[0], padded[1, :60] = long[0], short[0]
    log_probs, lengths = task(padded, torch.tensor([120, 60]))
    alone, alone_length = task(short, torch.tensor([60]))
    assert log_probs.shape == (2, 29, 6) and lengths.tolist() == [29, 14] and alone_length.tolist() == [14]
    torch.testing.assert_close(log_probs[1, :14], alone[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 29))


def test_longer_than_max_length_still_runs():
    task = ASRTask(vocab_size=6, max_length=4, **TINY).eval()
    log_probs, _ = task(torch.randn(1, 100, 80), torch.tensor([100]))
    assert log_probs.shape[1] == 24


def test_errors():
    with pytest.raises(ValueError, match="vocab_size"):
        ASRTask(vocab_size=1, max_length=4)
    task = ASRTask(vocab_size=6, max_length=4, **TINY)  # bidirectional: no recurrent form to call
    assert not hasattr(task, "step") and not hasattr(task, "init_state")


def test_training_lowers_ctc_loss_and_checkpoint_keeps_vocabulary(corpus, tmp_path):
    torch.manual_seed(0)
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=6, spec_augment=False)
    task = ASRTask(data.vocab_size, data.max_length, **TINY,
                   optimizer=lambda params: torch.optim.Adam(params, lr=3e-3))
    batch = next(iter(data.train_dataloader()))
    trainer = Trainer(max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, default_root_dir=tmp_path)
    before = float(task.ctc_loss(batch)[0].detach())
    trainer.fit(task, datamodule=data)
    after = float(task.ctc_loss(batch)[0].detach())
    assert after < 0.7 * before
    trainer.save_checkpoint(tmp_path / "asr.ckpt")
    checkpoint = load_checkpoint_file(tmp_path / "asr.ckpt")  # tensors and plain data only
    assert checkpoint["lintf_vocabulary"] == data.vocabulary.characters
    restored = load_asr_checkpoint(str(tmp_path / "asr.ckpt")).task
    assert restored.vocabulary == data.vocabulary and not restored.training
    torch.testing.assert_close(restored.ctc_loss(batch)[0], task.eval().ctc_loss(batch)[0])
    restored.vocabulary = None
    restored.on_load_checkpoint(checkpoint)
    assert restored.vocabulary == data.vocabulary
    restored.vocabulary = CharVocabulary(" abcdz")
    with pytest.raises(ValueError, match="trained on characters"):
        restored.on_load_checkpoint(checkpoint)


def test_language_model_comes_from_training_transcripts(corpus, tmp_path):
    data = SpeechData(str(corpus["train"]), str(corpus["val"]), str(corpus["test"]), batch_size=3)
    task = ASRTask(data.vocab_size, data.max_length, **TINY)
    task.use_decoding(CTCDecoding("beam", lm_order=4, lm_weight=0.8))
    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_test_batches=1,
                      default_root_dir=tmp_path)
    trainer.test(task, datamodule=data)
    lm = task.scorer.lm
    sentence = data.transcripts("train")[0]
    assert task.scorer.weight == 0.8 and lm.order == 4
    assert lm.sentence_log_prob(sentence) > lm.sentence_log_prob(sentence[::-1]) + 5
    with pytest.raises(ValueError, match="builds the language model from lm_text or the training manifest"):
        task.language_model(SpeechData(vocabulary=data.vocabulary.characters))
    (tmp_path / "lm.txt").write_text("bad cab\n" * 5)
    task.decoding.lm_text = str(tmp_path / "lm.txt")  # a text file instead: no training manifest needed
    lm = task.language_model(SpeechData(vocabulary=data.vocabulary.characters)).lm
    assert lm.sentence_log_prob("bad cab") > lm.sentence_log_prob(sentence) + 5
    with pytest.raises(ValueError, match="lm_order and lm_weight must be >= 0"):
        CTCDecoding(lm_order=-1)


def asr_args(config: str, corpus, root: Path) -> list[str]:
    lm_text = root / "lm.txt"  # the configs' lm_text is the synthetic corpus's; these tests use the tone corpus
    lm_text.write_text("".join(json.loads(line)["text"] + "\n" for line in corpus["train"].read_text().splitlines()))
    return [
        "--config", str(REPO / "configs" / config),
        "--data.init_args.train_manifest", str(corpus["train"]), "--data.init_args.val_manifest", str(corpus["val"]),
        "--data.init_args.test_manifest", str(corpus["test"]), "--data.init_args.dev_manifest", str(corpus["test"]),
        "--data.init_args.batch_size", "3", "--decoding.init_args.lm_text", str(lm_text),
        "--data.init_args.num_workers", "0",
        "--model.init_args.encoder.d_model", "16", "--model.init_args.encoder.n_layers", "1",
        "--model.init_args.encoder.n_heads", "2",
        "--model.init_args.conv_channels", "4",
        "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]


@pytest.mark.parametrize("config", ["asr_synth.yaml", "asr_paper.yaml"])
def test_config_fast_dev_run_and_predict(config, corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = LintfCLI(args=["fit", *asr_args(config, corpus, tmp_path), "--trainer.fast_dev_run", "2"])
    assert cli.trainer.state.finished
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size
    cli = LintfCLI(args=["predict", *asr_args(config, corpus, tmp_path), "--trainer.fast_dev_run", "1",
                         "--predictions.output_dir", str(tmp_path / "out")])
    lines = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"reference"' in lines[0] and '"cer"' in lines[0]


def test_checkpoint_gives_the_architecture_and_the_command_line_the_decoder(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fitted = LintfCLI(args=["fit", *asr_args("asr_synth.yaml", corpus, tmp_path), "--trainer.max_epochs", "1"])
    assert fitted.model.scorer is None  # fit validates greedily: the language model is built for test/predict only
    metrics = fitted.trainer.callback_metrics  # the dev manifest (a second validation loader) under its own names
    assert {"val/cer", "val/wer", "dev/cer", "dev/wer"} <= set(metrics) and not any("dataloader" in k for k in metrics)
    checkpoint = next(tmp_path.glob("lightning_logs/*/version_*/checkpoints/last.ckpt"))
    test_args = ["test", *asr_args("asr_synth.yaml", corpus, tmp_path), "--ckpt_path", str(checkpoint),
                 "--model.init_args.encoder.d_model", "24"]
    cli = LintfCLI(args=[*test_args, "--decoding.init_args.decoder", "greedy", "--decoding.init_args.lm_order", "0"])
    assert cli.model.hparams.encoder["d_model"] == 16  # from the checkpoint: its weights need it
    assert cli.model.decoding.decoder == "greedy" and cli.model.decoding.lm_order == 0 and cli.model.scorer is None
    cli = LintfCLI(args=[*test_args, "--decoding.init_args.lm_order", "3", "--decoding.init_args.lm_weight", "0.7"])
    assert cli.model.decoding.decoder == "beam" and cli.model.scorer.lm.order == 3 and cli.model.scorer.weight == 0.7
    other_text = tmp_path / "other.txt"
    other_text.write_text("dab dab dab\n")
    cli = LintfCLI(args=[*test_args, "--decoding.init_args.lm_text", str(other_text)])  # the command line's, not the fit's
    assert cli.model.decoding.lm_text == str(other_text) and cli.model.scorer.lm.totals[""] == len("dab dab dab") + 1
