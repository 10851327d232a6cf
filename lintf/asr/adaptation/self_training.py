"""Unsupervised speaker adaptation by self-training (iterative pseudo-labelling).

The model transcribes a new speaker's utterances (beam search with the language model), is
fine-tuned on those transcripts as if they were references, and transcribes them again; a few
rounds. No reference transcript is read. Each fine-tuning batch stream mixes the pseudo-labelled
utterances with labelled training utterances, so the model keeps what it knew while it learns the
new voice, and the language model's corrections of the first pass become acoustic training targets.
This is first-pass-transcript adaptation (as unsupervised MLLR in HMM systems) done by gradient
steps, as in iterative pseudo-labelling for CTC (Xu et al., 2020).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.corpora.manifest import ManifestEntry, write_manifest
from lintf.asr.model.task import ASRTask


@dataclass(frozen=True)
class AdaptationSettings:
    """How a model is adapted to one speaker.

    Args:
        rounds: transcribe-then-fine-tune rounds.
        steps: optimizer steps per round.
        lr: AdamW learning rate of the fine-tuning (constant).
        repeat: each pseudo-labelled utterance appears this many times per pass over the mixed manifest.
        labelled: labelled training utterances drawn (once) into the mixed manifest.
        seed: seed of the labelled draw and of the batch order.
    """

    rounds: int = 3
    steps: int = 300
    lr: float = 2e-4
    repeat: int = 4
    labelled: int = 800
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.steps < 1 or self.repeat < 1 or self.labelled < 0 or not 0 < self.lr < 0.01:
            raise ValueError(f"adaptation needs rounds, steps, repeat >= 1, labelled >= 0 and 0 < lr < 0.01; got {self}")


def transcribe_all(task: ASRTask, loader: DataLoader) -> dict[str, str]:
    """The task's decoder's transcript of every utterance of ``loader``, keyed by audio path."""
    task.eval()
    transcripts = {}
    with torch.no_grad():
        for batch in loader:
            log_probs, lengths = task(batch["features"], batch["feature_lengths"])
            transcripts.update(zip(batch["audio_filepath"], task.transcribe(log_probs, lengths)))
    return transcripts


def mixed_rows(speaker: Sequence[ManifestEntry], transcripts: dict[str, str], labelled: Sequence[ManifestEntry],
               repeat: int) -> list[dict]:
    """Manifest rows: the speaker's utterances with their pseudo-transcripts ``repeat`` times, then ``labelled``.

    Utterances transcribed as empty are left out (they would teach the model silence).
    """
    def row(entry: ManifestEntry, text: str) -> dict:
        return {"audio_filepath": str(entry.audio_filepath.resolve()), "duration": entry.duration, "text": text}

    pseudo = [row(e, transcripts[str(e.audio_filepath)]) for e in speaker if transcripts[str(e.audio_filepath)].strip()]
    return pseudo * repeat + [row(e, e.text) for e in labelled]


def fine_tune(task: ASRTask, loader: DataLoader, steps: int, lr: float) -> None:
    """``steps`` AdamW updates on CTC loss over ``loader`` (cycled); leaves ``task`` in eval mode."""
    task.train()
    optimizer = torch.optim.AdamW(task.parameters(), lr=lr, weight_decay=0.01)
    done = 0
    while done < steps:
        for batch in loader:
            loss, _, _ = task.ctc_loss(batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(task.parameters(), 1.0)
            optimizer.step()
            done += 1
            if done == steps:
                break
    task.eval()


def adapt_to_speaker(
    task: ASRTask,
    speaker: SpeechData,
    labelled: Sequence[ManifestEntry],
    training_data: Callable[[str], SpeechData],
    settings: AdaptationSettings,
    workdir: Path,
    on_round: Callable[[int, dict[str, str]], None] | None = None,
) -> dict[str, str]:
    """Adapt ``task`` in place to the speaker of ``speaker``'s test split; its final transcripts.

    Args:
        task: the model, with its decoder (and language model scorer) set up.
        speaker: data whose ``test`` split is the speaker's utterances; the first transcripts use
            its ``test_warp``, the later ones none (the fine-tuning sees the speaker unwarped).
        labelled: training utterances; ``settings.labelled`` of them are mixed in.
        training_data: builds the fine-tuning data (with the training augmentation) from a manifest path.
        settings: rounds, steps, learning rate, mixing.
        workdir: where the mixed manifest of each round is written.
        on_round: called with (round, transcripts) after the first pass (round 0) and every round.
    """
    if len(labelled) < settings.labelled:
        raise ValueError(f"adaptation mixes in {settings.labelled} labelled utterances but only {len(labelled)} are given")
    drawn = random.Random(settings.seed).sample(list(labelled), settings.labelled)
    entries = speaker.split_entries("test")
    transcripts = transcribe_all(task, speaker.loader("test"))
    unwarped = SpeechData(**{**speaker.hparams, "vocabulary": speaker.vocabulary.characters, "test_warp": 1.0})
    if on_round:
        on_round(0, transcripts)
    workdir.mkdir(parents=True, exist_ok=True)
    for round_ in range(1, settings.rounds + 1):
        manifest = workdir / f"adapt_round{round_}.jsonl"
        write_manifest(manifest, mixed_rows(entries, transcripts, drawn, settings.repeat))
        torch.manual_seed(settings.seed + round_)
        fine_tune(task, training_data(str(manifest)).loader("train"), settings.steps, settings.lr)
        transcripts = transcribe_all(task, unwarped.loader("test"))
        if on_round:
            on_round(round_, transcripts)
    return transcripts
