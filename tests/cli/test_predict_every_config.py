"""``lintf predict --ckpt_path last`` for every experiment in configs/: a one-step fit, then predictions.jsonl.

Each config runs as shipped except for sizes (a tiny model, few and short sequences) and its data, which
is generated here: the copy task draws its own, images and speech come from small local corpora,
text from a small file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.cli.helpers import REPO, TINY_DATA, TINY_MODEL, quiet_trainer, run

EXPERIMENTS = sorted(path.name for path in (REPO / "configs").glob("*.yaml")
                     if "class_path" in ((yaml.safe_load(path.read_text()) or {}).get("model") or {}))


def image_data(root: Path, config: str) -> list[str]:
    from tests.data.test_images import make_mnist_dir, write_cifar_dir

    if config.startswith("cifar"):
        write_cifar_dir(root / "images", np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3)).astype(np.uint8))
    else:
        make_mnist_dir(root / "images")
    return ["--data.init_args.source_dir", str(root / "images"), "--data.init_args.batch_size", "2",
            "--model.init_args.encoder.d_ff", "32"]


def speech_data(root: Path, config: str) -> list[str]:
    pytest.importorskip("soundfile")
    from tests.asr.conftest import tone_corpus

    corpus = tone_corpus(root / "corpus")
    lm_text = root / "lm.txt"
    lm_text.write_text("a cab\nbad abc\n")
    manifests = [arg for split in ("train", "val", "test", "dev")
                 for arg in (f"--data.init_args.{split}_manifest", str(corpus["test" if split == "dev" else split]))]
    return [*manifests, "--data.init_args.batch_size", "3", "--data.init_args.num_workers", "0",
            "--decoding.init_args.lm_text", str(lm_text), "--model.init_args.conv_channels", "4"]


def text_data(root: Path, config: str) -> list[str]:
    (root / "text.txt").write_text("in the beginning was the word, and the word was with god.\n" * 40)
    return ["--data.init_args.path", str(root / "text.txt"), "--data.init_args.batch_size", "2",
            "--data.init_args.eval_length", "64"]


def copy_data(root: Path, config: str) -> list[str]:
    return TINY_DATA


DATA = {"asr_": speech_data, "mnist": image_data, "cifar10": image_data, "stream_lm": text_data, "copy": copy_data,
        "associative_recall": copy_data}


def data_for(root: Path, config: str) -> list[str]:
    (make,) = [make for prefix, make in DATA.items() if config.startswith(prefix)]
    return make(root, config)


def tiny_model(config: str) -> list[str]:
    """TINY_MODEL, with as many layers as a hybrid stack's pattern has entries."""
    encoder = yaml.safe_load((REPO / "configs" / config).read_text())["model"].get("init_args", {}).get("encoder", {})
    pattern = encoder.get("attention")
    if not isinstance(pattern, list):
        return TINY_MODEL
    return [*TINY_MODEL[:2], "--model.encoder.n_layers", str(len(pattern)), *TINY_MODEL[4:]]


def test_every_experiment_has_data_here():
    assert "stream_lm.yaml" in EXPERIMENTS and "copy.yaml" in EXPERIMENTS
    assert all(sum(config.startswith(prefix) for prefix in DATA) == 1 for config in EXPERIMENTS)


@pytest.mark.slow
@pytest.mark.parametrize("config", EXPERIMENTS)
def test_predict_from_the_last_checkpoint_writes_predictions(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    base = ["--config", str(REPO / "configs" / config), *tiny_model(config), *data_for(tmp_path, config),
            *quiet_trainer(tmp_path), "--trainer.limit_val_batches", "1"]
    fitted = run(["fit", *base, "--trainer.max_steps", "1"])
    assert fitted.trainer.global_step == 1
    run(["predict", *base, "--ckpt_path", "last", "--trainer.limit_predict_batches", "1",
         "--predictions.output_dir", str(tmp_path / "out")])
    rows = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    metrics = json.loads((tmp_path / "out" / "prediction_metrics.json").read_text())
    assert rows and metrics["n"] == len(rows)
    assert all(name in rows[0] for name in metrics if name != "n")
