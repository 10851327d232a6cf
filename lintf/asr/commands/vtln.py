"""``lintf asr vtln``: a speaker's test-time VTLN warp, the filterbank warp under which the model is most confident."""

from __future__ import annotations

import argparse

import torch
from torchmetrics.functional.text import char_error_rate, word_error_rate
from tqdm import tqdm

from lintf.asr.adaptation.warp_search import best_path_log_prob, choose_warp
from lintf.asr.checkpoint import ASRCheckpoint, read_asr_checkpoint
from lintf.asr.commands.report import default_out, write_report
from lintf.asr.data.speech_data import SpeechData
from lintf.asr.decoding.options import CTCDecoding
from lintf.asr.model.task import ASRTask
from lintf.run.commands import CommandError

WARPS = [0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2]


def score_warp(task: ASRTask, data: SpeechData, warp: float) -> dict[str, float]:
    """Mean best-path log-probability per frame (mean over utterances) and greedy CER/WER of ``data``'s test split."""
    scores, hypotheses, references = [], [], []
    with torch.no_grad():
        for batch in tqdm(data.test_dataloader(), desc=f"warp {warp:g}", unit="batch", leave=False):
            log_probs, lengths = task(batch["features"], batch["feature_lengths"])
            scores += best_path_log_prob(log_probs, lengths).tolist()
            hypotheses += task.transcribe(log_probs, lengths, CTCDecoding("greedy"))
            references += batch["text"]
    return {"score": sum(scores) / len(scores), "cer": float(char_error_rate(hypotheses, references)),
            "wer": float(word_error_rate(hypotheses, references))}


def sweep(args: argparse.Namespace, checkpoint: ASRCheckpoint) -> tuple[list[dict], float]:
    task, features = checkpoint.task, checkpoint.data_settings
    rows = []
    for warp in args.warps:
        data = SpeechData(test_manifest=args.manifest, vocabulary=task.vocabulary.characters,
                          batch_size=args.batch_size, test_warp=warp, limit=args.limit, **features)
        rows.append({"warp": warp, **score_warp(task, data, warp)})
        print(rows[-1], flush=True)
    return rows, choose_warp({row["warp"]: row["score"] for row in rows})


def write_results(rows: list[dict], chosen: float, args: argparse.Namespace) -> None:
    lines = ["# Test-time VTLN: filterbank warp of one speaker", "",
             f"`{args.manifest}`, checkpoint `{args.ckpt}`. Score: the best CTC path's mean log-probability per",
             "frame (no transcripts); the highest is chosen. CER/WER: greedy, shown to check the criterion.", "",
             "| warp | score | CER | WER |", "|---:|---:|---:|---:|"]
    for r in rows:
        mark = " **(chosen)**" if r["warp"] == chosen else ""
        lines.append(f"| {r['warp']:g}{mark} | {r['score']:.4f} | {r['cer']:.3f} | {r['wer']:.3f} |")
    lines += ["", f"chosen warp: {chosen:g}; decode with `--data.init_args.test_warp {chosen:g}`"]
    write_report(args.out, "asr_vtln", lines, {"settings": vars(args), "results": rows, "chosen": chosen})


def vtln(ckpt: str, manifest: str = "data/speech/synth/dev.jsonl", warps: list[float] = WARPS, batch_size: int = 16,
         limit: int | None = None, out: str | None = None) -> None:
    """Choose a speaker's test-time VTLN warp.

    The filterbank warp under which the model is most confident. All utterances of --manifest should be one speaker (a held-out voice). For each warp of the grid,
    the model scores the speaker's audio (the best CTC path's mean log-probability per frame) and the
    highest score is chosen; transcripts are not used for the choice. The greedy CER/WER of each warp
    are printed alongside, so the criterion can be checked on a voice whose transcripts may be looked
    at (the dev voice) before it is applied to the test voice:

        lintf asr vtln --ckpt CKPT --manifest data/speech/synth/dev.jsonl
        lintf asr vtln --ckpt CKPT --manifest data/speech/synth/test.jsonl
        lintf test --config configs/asr_synth.yaml --ckpt_path CKPT --data.init_args.test_warp W

    The features (hop_ms, n_mels) are those saved with the checkpoint's data module.

    Args:
        ckpt: ASRTask checkpoint.
        manifest: one speaker's utterances.
        warps: filterbank warps to score, each in [0.7, 1.3] (1 is no warp).
        batch_size: utterances per batch.
        limit: score only the first N utterances.
        out: directory of asr_vtln.md/.json (default: <run>/asr_vtln).
    """
    args = argparse.Namespace(**locals())  # the command's settings, saved with its report
    if not all(0.7 <= warp <= 1.3 for warp in args.warps):
        raise CommandError(f"--warps must lie in [0.7, 1.3], got {args.warps}")
    checkpoint = read_asr_checkpoint(args.ckpt)
    args.out = args.out or str(default_out(args.ckpt, "asr_vtln"))
    write_results(*sweep(args, checkpoint), args)
