"""``lintf asr lm-sweep``: tune the character language model of CTC beam search."""

from __future__ import annotations

import argparse
import itertools

import torch
from torchmetrics.functional.text import char_error_rate, word_error_rate
from tqdm import tqdm

from lintf.asr.checkpoint import ASRCheckpoint, read_asr_checkpoint
from lintf.asr.commands.report import default_out, write_report
from lintf.asr.data.speech_data import SpeechData
from lintf.asr.decoding.char_ngram import CharNGram, LanguageModelScorer, read_lm_text
from lintf.asr.decoding.ctc import prefix_beam_search
from lintf.asr.model.task import ASRTask
from lintf.asr.text import CharVocabulary
from lintf.run.commands import CommandError


def acoustic_scores(task: ASRTask, data: SpeechData, limit: int | None) -> tuple[list[torch.Tensor], list[str]]:
    """Per-utterance (T', V) log-probabilities of the ``test`` split (its first ``limit``) and the references."""
    scores, references = [], []
    with torch.no_grad():
        for batch in tqdm(data.test_dataloader(), desc="acoustic model", unit="batch", leave=False):
            log_probs, lengths = task(batch["features"], batch["feature_lengths"])
            scores += [lp[:n] for lp, n in zip(log_probs, lengths.tolist())]
            references += batch["text"]
            if limit is not None and len(scores) >= limit:
                break
    return scores[:limit], references[:limit]


def sweep(args: argparse.Namespace, checkpoint: ASRCheckpoint) -> list[dict]:
    task, features = checkpoint.task, checkpoint.data_settings
    characters = task.vocabulary.characters
    data = SpeechData(args.train_manifest, test_manifest=args.manifest, vocabulary=characters,
                      batch_size=args.batch_size, test_warp=args.test_warp, **features)
    scores, references = acoustic_scores(task, data, args.limit)
    text = read_lm_text(args.lm_text, characters) if args.lm_text else data.transcripts("train")
    rows = []
    for order in args.orders:
        lm = CharNGram(text, order, characters) if order else None
        settings = list(itertools.product(args.weights, args.bonuses)) if order else [(0.0, 0.0)]
        for weight, bonus in settings:
            scorer = LanguageModelScorer(lm, characters, weight, bonus) if lm else None
            labels = [prefix_beam_search(s, args.beam_width, CharVocabulary.BLANK, scorer=scorer)
                      for s in tqdm(scores, desc=f"order {order}, weight {weight:g}, bonus {bonus:g}", leave=False)]
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


def lm_sweep(ckpt: str, manifest: str = "data/speech/synth/val.jsonl",
             train_manifest: str = "data/speech/synth/train.jsonl", lm_text: str | None = None,
             orders: list[int] = [0, 4, 6, 8], weights: list[float] = [0.3, 0.5, 0.8],  # noqa: B006  (never mutated)
             bonuses: list[float] = [0.0, 1.0, 2.0], beam_width: int = 8, batch_size: int = 16,  # noqa: B006
             limit: int | None = None, test_warp: float = 1.0, out: str | None = None) -> None:
    """Tune the character LM of CTC beam search.

    CER/WER for each (order, weight, bonus).
    The acoustic model runs once over the manifest; every setting then only re-decodes its
    log-probabilities. Tune on a held-out manifest (the dev voice), then test the chosen setting once:

        lintf asr lm-sweep --ckpt CKPT --manifest data/speech/synth/dev.jsonl --lm-text data/speech/synth/lm.txt
        lintf test --config configs/asr_synth.yaml --ckpt_path CKPT --decoding.lm_weight 1.0 --decoding.lm_bonus 2

    The language model is built from --lm-text (one sentence per line, e.g. the corpus's lm.txt) or
    else the transcripts of --train-manifest (the model's training text); the features (hop_ms,
    n_mels) are those saved with the checkpoint's data module.

    Args:
        ckpt: ASRTask checkpoint.
        manifest: manifest decoded (tune on val or dev).
        train_manifest: its transcripts are the text of the LM when lm_text is not given.
        lm_text: text of the LM, one sentence per line (default: the training transcripts).
        orders: orders of the character n-gram; 0 is no language model.
        weights: weights of the LM's log-probabilities.
        bonuses: scores added per emitted character.
        beam_width: prefixes kept by the beam search.
        batch_size: utterances per batch of the acoustic model.
        limit: decode only the first N utterances.
        test_warp: filterbank warp of the speaker (lintf asr vtln), in [0.7, 1.3].
        out: directory of asr_lm_sweep.md/.json (default: <run>/asr_lm_sweep).
    """
    args = argparse.Namespace(**locals())  # the command's settings, saved with its report
    if any(o < 0 for o in args.orders) or args.beam_width < 1:
        raise CommandError("orders must be >= 0 and --beam-width >= 1")
    if not 0.7 <= args.test_warp <= 1.3:
        raise CommandError(f"--test-warp must lie in [0.7, 1.3] (1 is no warp), got {args.test_warp}")
    checkpoint = read_asr_checkpoint(args.ckpt)
    args.out = args.out or str(default_out(args.ckpt, "asr_lm_sweep"))
    write_results(sweep(args, checkpoint), args)
