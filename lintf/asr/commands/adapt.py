"""``lintf asr adapt``: unsupervised speaker adaptation, fine-tuning a checkpoint on its own transcripts of one speaker."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml
from torchmetrics.functional.text import char_error_rate, word_error_rate

from lintf.asr.adaptation.self_training import AdaptationSettings, adapt_to_speaker
from lintf.asr.checkpoint import AUGMENTATION_SETTINGS, FEATURE_SETTINGS, ASRCheckpoint, read_asr_checkpoint
from lintf.asr.commands.report import default_out, write_report
from lintf.asr.data.speech_data import SpeechData
from lintf.asr.decoding.options import CTCDecoding
from lintf.asr.text import normalize_text
from lintf.run.checkpoint_files import VerifiedCheckpointIO
from lintf.run.commands import CommandError


def decoding_of(config: str) -> CTCDecoding:
    """The ``decoding:`` options of a ``lintf`` config file (greedy if it has none)."""
    section = (yaml.safe_load(Path(config).read_text()) or {}).get("decoding") or {}
    return CTCDecoding(**(section.get("init_args") or {}))


def adapt(args: argparse.Namespace, settings: AdaptationSettings, checkpoint: ASRCheckpoint) -> list[dict]:
    """Self-train ``checkpoint``'s task on the speaker of ``args.manifest``; the CER/WER of every round."""
    task, saved = checkpoint.task, checkpoint.data_settings
    task.use_decoding(decoding_of(args.config))
    characters = task.vocabulary.characters
    features = {key: saved[key] for key in FEATURE_SETTINGS if key in saved}
    speaker = SpeechData(args.train_manifest, test_manifest=args.manifest, vocabulary=characters,
                         batch_size=args.batch_size, test_warp=args.warp, limit=args.limit, **features)
    if task.decoding.uses_language_model:
        task.scorer = task.language_model(speaker)
    references = {str(e.audio_filepath): normalize_text(e.text, speaker.hparams.keep_accents)
                  for e in speaker.split_entries("test")}
    rows, start = [], time.time()

    def report(round_: int, transcripts: dict[str, str]) -> None:
        paths = list(references)
        hypotheses, truths = [transcripts[p] for p in paths], [references[p] for p in paths]
        rows.append({"round": round_, "cer": float(char_error_rate(hypotheses, truths)),
                     "wer": float(word_error_rate(hypotheses, truths)), "seconds": round(time.time() - start)})
        print(rows[-1], flush=True)

    def training_data(manifest: str) -> SpeechData:
        return SpeechData(manifest, vocabulary=characters, batch_size=args.batch_size, seed=args.seed, **saved)

    with tempfile.TemporaryDirectory() as workdir:
        adapt_to_speaker(task, speaker, speaker.split_entries("train"), training_data, settings, Path(workdir), report)
    return rows


def save_adapted(checkpoint: ASRCheckpoint, args: argparse.Namespace) -> None:
    """The original checkpoint with the adapted weights and a note of how they were adapted.

    Written atomically with a sha256 sidecar (``VerifiedCheckpointIO``), so ``lintf test`` verifies it.
    """
    adapted = dict(checkpoint.contents)
    adapted["state_dict"] = checkpoint.task.state_dict()
    adapted["lintf_adaptation"] = {"speaker_manifest": args.manifest, "settings": vars(args)}
    Path(args.adapted).parent.mkdir(parents=True, exist_ok=True)
    VerifiedCheckpointIO().save_checkpoint(adapted, args.adapted)


def write_results(rows: list[dict], args: argparse.Namespace) -> None:
    lines = ["# Unsupervised speaker adaptation (self-training on the model's own transcripts)", "",
             f"`{args.manifest}`, checkpoint `{args.ckpt}`, decoding of `{args.config}`; first transcripts at "
             f"warp {args.warp:g}. {args.rounds} rounds of {args.steps} steps at lr {args.lr:g}, each utterance "
             f"{args.repeat}x with {args.labelled} labelled training utterances. Round 0 = before adaptation. "
             "References only score the rounds; the adaptation never reads them.", "",
             "| round | CER | WER | seconds |", "|---:|---:|---:|---:|"]
    lines += [f"| {r['round']} | {r['cer']:.3f} | {r['wer']:.3f} | {r['seconds']} |" for r in rows]
    write_report(args.out, "asr_adapt", lines, {"settings": vars(args), "results": rows})


DEFAULTS = AdaptationSettings()


def adapt_command(ckpt: str, manifest: str = "data/speech/synth/dev.jsonl", config: str = "configs/asr_synth.yaml",
                  train_manifest: str = "data/speech/synth/train.jsonl", warp: float = 1.0,
                  rounds: int = DEFAULTS.rounds, steps: int = DEFAULTS.steps, lr: float = DEFAULTS.lr,
                  repeat: int = DEFAULTS.repeat, labelled: int = DEFAULTS.labelled, seed: int = DEFAULTS.seed,
                  batch_size: int = 16, limit: int | None = None, adapted: str | None = None,
                  out: str | None = None) -> None:
    """Adapt a checkpoint to one speaker (self-training).

    Unsupervised: the checkpoint is fine-tuned on its own transcripts of the speaker. All utterances of --manifest should be one speaker (a held-out voice). The model transcribes them
    with the decoding of --config (its decoding: section: beam search + LM), is fine-tuned on those
    transcripts mixed with labelled training utterances, and transcribes again, for --rounds rounds
    (lintf.asr.adaptation.self_training). The adaptation reads no reference transcript; the CER/WER of
    every round are printed only to report it. Choose settings on the dev voice, then apply them to the
    test voice once; the adapted checkpoint is then scored by lintf test like any other:

        lintf asr adapt --ckpt CKPT --manifest data/speech/synth/dev.jsonl --warp 1.05
        lintf asr adapt --ckpt CKPT --manifest data/speech/synth/test.jsonl --warp W --adapted adapted_rms.ckpt
        lintf test --config configs/asr_synth.yaml --ckpt_path adapted_rms.ckpt   # no test_warp: adapted unwarped

    --warp is the speaker's VTLN warp (lintf asr vtln) for the first transcripts only. The
    fine-tuning uses the features and training augmentation saved with the checkpoint's data module.

    Args:
        ckpt: ASRTask checkpoint.
        manifest: one speaker's utterances.
        config: lintf config whose decoding: is used.
        train_manifest: labelled utterances mixed in.
        warp: VTLN warp of the first transcripts (lintf asr vtln), in [0.7, 1.3].
        rounds: transcribe-then-fine-tune rounds.
        steps: optimizer steps per round.
        lr: AdamW learning rate of the fine-tuning (constant).
        repeat: copies of each pseudo-labelled utterance.
        labelled: labelled training utterances mixed in.
        seed: seed of the labelled draw and of the batch order.
        batch_size: utterances per batch.
        limit: adapt on the first N utterances only.
        adapted: write the adapted checkpoint here.
        out: directory of asr_adapt.md/.json (default: <run>/asr_adapt).
    """
    args = argparse.Namespace(**locals())  # the command's settings, saved with its report
    if not 0.7 <= args.warp <= 1.3:
        raise CommandError(f"--warp must lie in [0.7, 1.3] (1 is no warp), got {args.warp}")
    if not Path(args.config).is_file():
        raise CommandError(f"--config {args.config} is not a file")
    settings = AdaptationSettings(args.rounds, args.steps, args.lr, args.repeat, args.labelled, args.seed)
    checkpoint = read_asr_checkpoint(args.ckpt, FEATURE_SETTINGS + AUGMENTATION_SETTINGS)
    args.out = args.out or str(default_out(args.ckpt, "asr_adapt"))
    rows = adapt(args, settings, checkpoint)
    if args.adapted:
        save_adapted(checkpoint, args)
    write_results(rows, args)
