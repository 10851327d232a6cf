"""Choose a speaker's test-time VTLN warp: the filterbank warp under which the model is most confident.

All utterances of ``--manifest`` should be one speaker (a held-out voice). For each warp of the grid,
the model scores the speaker's audio (the best CTC path's mean log-probability per frame) and the
highest score is chosen; transcripts are not used for the choice. The greedy CER/WER of each warp
are printed alongside, so the criterion can be checked on a voice whose transcripts may be looked
at (the dev voice) before it is applied to the test voice:

    python -m benchmarks.asr_vtln --ckpt CKPT --manifest data/speech/synth/dev.jsonl
    python -m benchmarks.asr_vtln --ckpt CKPT --manifest data/speech/synth/test.jsonl --out ...
    lintf test --config configs/asr_synth.yaml --ckpt_path CKPT --data.init_args.test_warp W

The features (``hop_ms``, ``n_mels``) are those saved with the checkpoint's data module.
Writes ``asr_vtln.md`` and ``.json`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torchmetrics.functional.text import char_error_rate, word_error_rate

from lintf.data.speech import SpeechData
from lintf.speech.vtln import best_path_log_prob, choose_warp
from lintf.tasks.asr import ASRTask

from benchmarks.asr_checkpoint import load_asr_checkpoint, require_checkpoint
from benchmarks.measure import write_report


def score_warp(task: ASRTask, data: SpeechData) -> dict[str, float]:
    """Mean best-path log-probability per frame (mean over utterances) and greedy CER/WER of ``data``'s test split."""
    scores, hypotheses, references = [], [], []
    with torch.no_grad():
        for batch in data.test_dataloader():
            log_probs, lengths = task(batch["features"], batch["feature_lengths"])
            scores += best_path_log_prob(log_probs, lengths).tolist()
            hypotheses += task.transcribe(log_probs, lengths, "greedy")
            references += batch["text"]
    return {"score": sum(scores) / len(scores), "cer": float(char_error_rate(hypotheses, references)),
            "wer": float(word_error_rate(hypotheses, references))}


def sweep(args: argparse.Namespace) -> tuple[list[dict], float]:
    task, features = load_asr_checkpoint(args.ckpt)
    rows = []
    for warp in args.warps:
        data = SpeechData(test_manifest=args.manifest, vocabulary=task.vocabulary.characters,
                          batch_size=args.batch_size, test_warp=warp, limit=args.limit, **features)
        rows.append({"warp": warp, **score_warp(task, data)})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="ASRTask checkpoint")
    parser.add_argument("--manifest", default="data/speech/synth/dev.jsonl", help="one speaker's utterances")
    parser.add_argument("--warps", type=float, nargs="+", default=[0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=None, help="score only the first N utterances")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    if not all(0.7 <= warp <= 1.3 for warp in args.warps):
        parser.error(f"--warps must lie in [0.7, 1.3], got {args.warps}")
    require_checkpoint(parser, args.ckpt)
    write_results(*sweep(args), args)


if __name__ == "__main__":
    main()
