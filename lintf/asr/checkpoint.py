"""What the ``lintf asr`` workflows need from a trained checkpoint: the model, and the features it was trained on."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from lintf.asr.model.task import ASRTask

FEATURE_SETTINGS = ("hop_ms", "n_mels", "keep_accents")  # SpeechData arguments the model's input depends on
AUGMENTATION_SETTINGS = ("vtlp", "speed_perturb", "spec_augment", "freq_masks", "freq_width", "time_masks",
                         "time_width", "max_duration")  # how the model was trained, for fine-tuning it alike


def require_checkpoint(parser: argparse.ArgumentParser, path: str) -> None:
    """A usage error (exit 2) naming ``path`` unless it is a file."""
    if not Path(path).is_file():
        parser.error(f"--ckpt {path} is not a file (give an ASRTask checkpoint, e.g. lightning_logs/version_N/"
                     "checkpoints/best.ckpt)")


def load_asr_checkpoint(path: str, settings: tuple[str, ...] = FEATURE_SETTINGS) -> tuple[ASRTask, dict[str, Any]]:
    """The ASRTask of ``path`` in eval mode, and the SpeechData ``settings`` saved with it (the features')."""
    task = ASRTask.load_from_checkpoint(path, map_location="cpu", weights_only=False).eval()
    if task.vocabulary is None:
        raise SystemExit(f"{path} holds no vocabulary: is it an ASRTask checkpoint?")
    # Lightning's loader does not return the data module's hyperparameters, so they are read separately.
    saved = torch.load(path, map_location="cpu", weights_only=False).get("datamodule_hyper_parameters", {})
    return task, {key: saved[key] for key in settings if key in saved}
