"""What the ``lintf asr`` workflows need from a trained checkpoint: the model, and the features it was trained on.

The checkpoint is read once, by ``lintf.run.checkpoint_files.load_checkpoint_file`` (its sha256 sidecar
verified, then tensors and plain data only: nothing in the file runs), and the ASRTask is built from
its ``hyper_parameters`` and ``state_dict``. A checkpoint that is damaged, holds objects, was written
by another task or in an older layout is refused with one paragraph saying why.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lintf.asr.model.task import ASRTask
from lintf.layout.checkpoint_version import FORMAT, format_of
from lintf.run.checkpoint_files import CheckpointFileError, load_checkpoint_file
from lintf.run.checkpoint_format import UPGRADE_COMMAND, task_name
from lintf.run.commands import CommandError

FEATURE_SETTINGS = ("hop_ms", "n_mels", "keep_accents")  # SpeechData arguments the model's input depends on
AUGMENTATION_SETTINGS = ("vtlp", "speed_perturb", "spec_augment", "freq_masks", "freq_width", "time_masks",
                         "time_width", "max_duration")  # how the model was trained, for fine-tuning it alike
ASR_TASK = f"{ASRTask.__module__}.{ASRTask.__qualname__}"
NOT_ARGUMENTS = ("self", "optimizer", "lr_scheduler")  # never saved: the task is rebuilt for inference


@dataclass
class ASRCheckpoint:
    """A checkpoint of ``lintf.asr.ASRTask``, read once.

    Args:
        task: the model, in eval mode, with the checkpoint's weights and vocabulary.
        data_settings: the SpeechData arguments saved with it (those asked for, where saved).
        contents: the checkpoint dict as read (to write an adapted copy of it).
    """

    task: ASRTask
    data_settings: dict[str, Any]
    contents: dict[str, Any]


def require_checkpoint(path: str) -> None:
    """CommandError naming ``path`` unless it is a file."""
    if not Path(path).is_file():
        raise CommandError(f"--ckpt {path} is not a file (give an ASRTask checkpoint, e.g. "
                           "lightning_logs/asr-linear-synth/version_0/checkpoints/best.ckpt)")


def check_written_by_asr(path: str, checkpoint: dict[str, Any]) -> None:
    """CheckpointFileError unless ``checkpoint`` was written by ASRTask in the current layout.

    Args:
        path: where ``checkpoint`` was read (for the message).
        checkpoint: the dict ``load_checkpoint_file`` returned.
    """
    if format_of(checkpoint) < FORMAT:
        raise CheckpointFileError(
            f"checkpoint {path} was written by an older lintf (checkpoint format {format_of(checkpoint)}, this lintf "
            f"reads format {FORMAT}). Write an upgraded copy with `{UPGRADE_COMMAND} {path}` (the "
            "original is kept) and give that to --ckpt."
        )
    written_by = task_name(checkpoint)
    if written_by != ASR_TASK:
        origin = f"task {written_by}" if written_by else "something other than a lintf task"
        raise CheckpointFileError(
            f"checkpoint {path} was written by {origin}, not by {ASR_TASK}; --ckpt takes the checkpoint of a speech "
            "recognition run (lintf fit --config configs/asr_synth.yaml), e.g. <run>/checkpoints/best.ckpt."
        )


def build_task(path: str, checkpoint: dict[str, Any]) -> ASRTask:
    """The ASRTask of ``checkpoint``'s hyperparameters, with its weights and vocabulary, in eval mode.

    Args:
        path: where ``checkpoint`` was read (for the message).
        checkpoint: a dict that passed ``check_written_by_asr``.
    """
    hparams = checkpoint.get("hyper_parameters") or {}
    names = [name for name in inspect.signature(ASRTask.__init__).parameters if name not in NOT_ARGUMENTS]
    try:
        task = ASRTask(**{name: hparams[name] for name in names if name in hparams})
        task.on_load_checkpoint(checkpoint)
        task.load_state_dict(checkpoint["state_dict"])
    except (TypeError, ValueError, KeyError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointFileError(
            f"checkpoint {path} does not rebuild its ASRTask ({type(error).__name__}: {reason}); its hyper_parameters "
            "and state_dict must be those a lintf ASRTask run saved."
        ) from None
    if task.vocabulary is None:
        raise CheckpointFileError(f"checkpoint {path} holds no vocabulary (lintf_vocabulary); an ASRTask checkpoint "
                                  "written by a lintf run that read SpeechData holds one.")
    return task.eval()


def load_asr_checkpoint(path: str, settings: tuple[str, ...] = FEATURE_SETTINGS) -> ASRCheckpoint:
    """The ASRTask of ``path`` in eval mode, and the SpeechData ``settings`` saved with it (the features').

    Args:
        path: an ASRTask checkpoint.
        settings: the SpeechData arguments to return, where the checkpoint saved them.

    Raises:
        CheckpointFileError: ``path`` is damaged (sha256 mismatch), holds objects whose loading would run
            code, or is not a current-format ASRTask checkpoint; the message names it.
    """
    checkpoint = load_checkpoint_file(path)
    check_written_by_asr(path, checkpoint)
    task = build_task(path, checkpoint)
    saved = checkpoint.get("datamodule_hyper_parameters") or {}
    return ASRCheckpoint(task, {key: saved[key] for key in settings if key in saved}, checkpoint)


def read_asr_checkpoint(path: str, settings: tuple[str, ...] = FEATURE_SETTINGS) -> ASRCheckpoint:
    """``load_asr_checkpoint`` of the ``--ckpt`` of a ``lintf asr`` command, which reports a refusal in one paragraph.

    Args:
        path: the ``--ckpt`` argument.
        settings: the SpeechData arguments to return.

    Raises:
        CommandError: ``path`` is not a file.
        CheckpointFileError: as ``load_asr_checkpoint``.
    """
    require_checkpoint(path)
    return load_asr_checkpoint(path, settings)
