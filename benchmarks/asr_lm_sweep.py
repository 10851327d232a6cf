"""Tune the character language model of CTC beam search: CER/WER for each (order, weight, bonus).

The acoustic model runs once over the manifest; every setting then only re-decodes its
log-probabilities. Tune on the validation manifest, then test the chosen setting once:

    python -m benchmarks.asr_lm_sweep --ckpt CKPT --manifest data/speech/synth/val.jsonl
    lintf test --config configs/asr_synth.yaml --ckpt_path CKPT --model.init_args.lm_order 6 ...

The language model is built from ``--lm-text`` (one sentence per line, e.g. the corpus's lm.txt) or
else the transcripts of ``--train-manifest`` (the model's training text); the features (``hop_ms``,
``n_mels``) are those saved with the checkpoint's data module.
Writes ``asr_lm_sweep.md`` and ``.json`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch
from torchmetrics.functional.text import char_error_rate, word_error_rate

from lintf.data.speech import SpeechData
from lintf.speech.char_lm import CharNGram, LanguageModelScorer, read_lm_text
from lintf.speech.decoding import prefix_beam_search
from lintf.speech.text import CharVocabulary
from lintf.tasks.asr import ASRTask

from benchmarks.asr_checkpoint import load_asr_checkpoint, require_checkpoint
from benchmarks.measure import write_report


def acoustic_scores(task: ASRTask, data: SpeechData, limit: int | None) -> tuple[list[torch.Tensor], list[str]]:
    """Per-utterance (T', V) log-probabilities of the ``test`` split (its first ``limit``) and the references."""
    scores, references = [], []
    with torch.no_grad():
        for batch in data.test_dataloader():
            log_probs, lengths = task(batch["features"], batch["feature_lengths"])
            scores += [lp[:n] for lp, n in zip(log_probs, lengths.tolist())]
            references += batch["text"]
            if limit is not None and len(scores) >= limit:
                break
    return scores[:limit], references[:limit]


def sweep(args: argparse.Namespace) -> list[dict]:
    task, features = load_asr_checkpoint(args.ckpt)
    characters = task.vocabulary.characters
    data = SpeechData(args.train_manifest, test_manifest=args.manifest, vocabulary=characters,
                      batch_size=args.batch_size, test_warp=args.test_warp, **features)
    scores, references = acoustic_scores(task, data, args.limit)
    text = read_lm_text(args.lm_text, characters) if args.lm_text else data.transcripts("train")
    rows = []
    for order in args.orders:
        lm = CharNGram(text, order, characters) if order else None
        settings = itertools.product(args.weights, args.bonuses) if order else [(0.0, 0.0)]
        for weight, bonus in settings:
            scorer = LanguageModelScorer(lm, characters, weight, bonus) if lm else None
            labels = [prefix_beam_search(s, args.beam_width, CharVocabulary.BLANK, scorer=scorer) for s in scores]
            hypotheses = [task.vocabulary.decode(ids) for ids in labels]
            row = {"order": order, "weight": weight, "bonus": bonus,
                   "cer": float(char_error_rate(hypotheses, references)),
                   "wer": float(word_error_rate(hypotheses, references))}
            print(row, flush=True)
            rows.append(row)
    return rows


def write_results(rows: list[dict], args: argparse.Namespace) -> None:
    lines = [f"# CTC beam search ({args.beam_width} prefixes) with a character n-gram LM", "",
             f"`{args.manifest}` (filterbank warp {args.test_warp:g}), checkpoint `{args.ckpt}`; LM text "
             f"`{args.lm_text or args.train_manifest + ' transcripts'}`; order 0 = no language model.", "",
             "| order | weight | bonus | CER | WER |", "|---:|---:|---:|---:|---:|"]
    best = min(rows, key=lambda r: r["cer"])
    for r in rows:
        mark = " **(best CER)**" if r is best else ""
        lines.append(f"| {r['order']} | {r['weight']:g} | {r['bonus']:g} | {r['cer']:.3f}{mark} | {r['wer']:.3f} |")
    write_report(args.out, "asr_lm_sweep", lines, {"settings": vars(args), "results": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="ASRTask checkpoint")
    parser.add_argument("--manifest", default="data/speech/synth/val.jsonl", help="manifest decoded (tune on val)")
    parser.add_argument("--train-manifest", default="data/speech/synth/train.jsonl", help="text of the LM")
    parser.add_argument("--lm-text", default=None, help="text of the LM, one sentence per line (default: the "
                        "training transcripts)")
    parser.add_argument("--orders", type=int, nargs="+", default=[0, 4, 6, 8])
    parser.add_argument("--weights", type=float, nargs="+", default=[0.3, 0.5, 0.8])
    parser.add_argument("--bonuses", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    parser.add_argument("--beam-width", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=None, help="decode only the first N utterances")
    parser.add_argument("--test-warp", type=float, default=1.0, help="filterbank warp of the speaker (asr_vtln.py)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    if any(o < 0 for o in args.orders) or args.beam_width < 1:
        parser.error("orders must be >= 0 and --beam-width >= 1")
    if not 0.7 <= args.test_warp <= 1.3:
        parser.error(f"--test-warp must lie in [0.7, 1.3] (1 is no warp), got {args.test_warp}")
    require_checkpoint(parser, args.ckpt)
    write_results(sweep(args), args)


if __name__ == "__main__":
    main()
