"""Speech recognition data from manifests: audio -> 16 kHz -> normalised log-mel, characters -> CTC labels.

Any corpus with a JSON-lines manifest (``audio_filepath``, ``duration``, ``text``) works:
``lintf data synth-speech`` and ``lintf data librivox`` write them; LibriSpeech or WSJ
manifests made by NeMo/ESPnet scripts load the same way.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler

from lintf.asr.data.batches import BucketBatchSampler, pad_batch
from lintf.data.splits import SplitDataModule
from lintf.asr.features.audio import READABLE, AudioError, audio_problem, load_audio
from lintf.asr.features.log_mel import LogMel, normalize_utterance
from lintf.asr.corpora.manifest import ManifestEntry, problem_report, read_manifest
from lintf.asr.features.resample import resample
from lintf.asr.features.spec_augment import spec_augment
from lintf.asr.features.speed_perturbation import change_speed
from lintf.asr.model.frontend import subsampled_lengths
from lintf.asr.text import CharVocabulary, normalize_text

SAMPLE_RATE = 16_000
STAGE_SPLITS = {"fit": ("train", "val", "dev"), "validate": ("val", "dev"), "test": ("test",), "predict": ("predict",)}
"""The manifests each Lightning stage reads."""


def random_factor(spread: float) -> float:
    """A factor drawn uniformly from [1 - spread, 1 + spread] (torch's global generator)."""
    return 1.0 + spread * (2 * float(torch.rand(())) - 1)


class Utterances(Dataset):
    """Manifest entries as ``{"features": (T, n_mels), "targets": (S,), "text", "audio_filepath"}``.

    Args:
        entries: utterances to serve.
        vocabulary: maps normalised transcripts to label ids.
        features: the log-mel extractor (16 kHz input).
        augment: SpecAugment arguments (freq_masks, freq_width, time_masks, time_width), or None.
        keep_accents: keep non-ASCII letters in transcripts (see ``normalize_text``).
        vtlp: each utterance's filterbank is warped by a factor drawn from [1 - vtlp, 1 + vtlp]; 0 never.
        warp: the filterbank warp of every utterance when ``vtlp`` is 0 (1: none).
        speed_perturb: each utterance is played faster or slower by a factor drawn from
            [1 - speed_perturb, 1 + speed_perturb]; 0 never.
    """

    def __init__(
        self, entries: list[ManifestEntry], vocabulary: CharVocabulary, features: LogMel,
        augment: tuple[int, int, int, int] | None = None, keep_accents: bool = False, vtlp: float = 0.0,
        speed_perturb: float = 0.0, warp: float = 1.0,
    ) -> None:
        self.entries, self.vocabulary, self.features, self.augment = entries, vocabulary, features, augment
        self.keep_accents, self.vtlp, self.speed_perturb, self.warp = keep_accents, vtlp, speed_perturb, warp

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> dict[str, Tensor | str]:
        entry = self.entries[index]
        try:
            waveform, rate = load_audio(entry.audio_filepath)
        except AudioError as error:
            raise AudioError(f"{entry.where}: {error}") from None
        with torch.no_grad():
            waveform = resample(waveform, rate, SAMPLE_RATE)
            if self.speed_perturb:
                waveform = change_speed(waveform, SAMPLE_RATE, random_factor(self.speed_perturb))
            warp = random_factor(self.vtlp) if self.vtlp else self.warp
            features = normalize_utterance(self.features(waveform, warp))
        if self.augment is not None:
            features = spec_augment(features, *self.augment)
        text = normalize_text(entry.text, self.keep_accents)
        return {"features": features, "targets": torch.tensor(self.vocabulary.encode(text), dtype=torch.long),
                "text": text, "audio_filepath": str(entry.audio_filepath)}


class SpeechData(SplitDataModule):
    """CTC speech data from JSON-lines manifests, in length-bucketed padded batches.

    Transcripts are normalised (lower case, letters, digits, apostrophes, spaces). The character
    vocabulary is the training manifest's (or ``vocabulary``); the task stores it in checkpoints.

    Args:
        train_manifest: training manifest (also defines the vocabulary unless ``vocabulary`` is set).
        val_manifest: validation manifest.
        test_manifest: test manifest.
        predict_manifest: manifest transcribed by ``lintf predict``; None uses ``test_manifest``.
        dev_manifest: a second validation manifest, evaluated after ``val_manifest`` at every
            validation and logged as ``dev/*`` (e.g. a held-out voice: ``data/speech/synth/dev.jsonl``);
            None evaluates only ``val_manifest``.
        vocabulary: the characters of the CTC labels; None takes those of the training manifest.
        keep_accents: keep non-ASCII letters in transcripts (Czech, ...); by default they are
            reduced to ASCII (``é`` -> ``e``).
        max_duration: training utterances longer than this many seconds are skipped.
        batch_size: utterances per batch.
        n_mels: log-mel bins.
        hop_ms: frame shift of the log-mel features in milliseconds (25 ms windows). The model
            subsamples frames 4x, so 10 ms gives 40 ms per CTC output and 5 ms gives 20 ms.
        vtlp: vocal tract length perturbation of training features: the filterbank of each
            utterance is warped by a random factor in [1 - vtlp, 1 + vtlp]; 0 disables it.
        speed_perturb: speed perturbation of training audio: each utterance is resampled to play
            faster or slower (tempo and pitch together) by a random factor in
            [1 - speed_perturb, 1 + speed_perturb]; 0 disables it.
        test_warp: test-time vocal tract length normalisation: the filterbank of every test and
            predict utterance is warped by this factor (1: none). Choose it per speaker with
            ``lintf asr vtln``, which needs no transcripts.
        spec_augment: mask random frequency bands and time spans of training features.
        freq_masks: SpecAugment frequency masks per utterance.
        freq_width: widest frequency mask in mel bins.
        time_masks: SpecAugment time masks per utterance.
        time_width: widest time mask in frames (at most a fifth of the utterance).
        limit: use only the first ``limit`` utterances of every manifest (quick runs); None uses all.
        seed: seed of the batch order.
        num_workers: DataLoader processes decoding audio and computing features.
    """

    def __init__(
        self,
        train_manifest: str | None = None,
        val_manifest: str | None = None,
        test_manifest: str | None = None,
        predict_manifest: str | None = None,
        dev_manifest: str | None = None,
        vocabulary: str | None = None,
        keep_accents: bool = False,
        max_duration: float = 20.0,
        batch_size: int = 16,
        n_mels: int = 80,
        hop_ms: float = 10.0,
        vtlp: float = 0.0,
        speed_perturb: float = 0.0,
        test_warp: float = 1.0,
        spec_augment: bool = True,
        freq_masks: int = 2,
        freq_width: int = 15,
        time_masks: int = 2,
        time_width: int = 40,
        limit: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if train_manifest is None and vocabulary is None:
            raise ValueError("SpeechData: give train_manifest or vocabulary (the characters the model outputs)")
        if max_duration <= 0 or batch_size < 1 or n_mels < 8 or not 1.0 <= hop_ms <= 25.0:
            raise ValueError(f"SpeechData: need max_duration > 0, batch_size >= 1, n_mels >= 8, 1 <= hop_ms <= 25 "
                             f"(the window is 25 ms); got {max_duration}, {batch_size}, {n_mels}, {hop_ms}")
        if limit is not None and limit < 1:
            raise ValueError(f"SpeechData: limit must be >= 1 or None, got {limit}")
        if not 0.0 <= vtlp <= 0.3:
            raise ValueError(f"SpeechData: vtlp must be in [0, 0.3] (0.1 is usual), got {vtlp}")
        if not 0.0 <= speed_perturb <= 0.3:
            raise ValueError(f"SpeechData: speed_perturb must be in [0, 0.3] (0.1 is usual), got {speed_perturb}")
        if not 0.7 <= test_warp <= 1.3:
            raise ValueError(f"SpeechData: test_warp must be in [0.7, 1.3] (1 is no warp), got {test_warp}")
        self.save_hyperparameters()
        self.manifests = {"train": train_manifest, "val": val_manifest, "dev": dev_manifest, "test": test_manifest,
                          "predict": predict_manifest or test_manifest}
        self.features = LogMel(SAMPLE_RATE, n_mels, hop_ms=hop_ms)
        self.augment = (freq_masks, freq_width, time_masks, time_width) if spec_augment else None
        self._vocabulary = CharVocabulary(vocabulary) if vocabulary is not None else None
        self.entries: dict[str, list[ManifestEntry]] = {}

    @property
    def vocabulary(self) -> CharVocabulary:
        """The CTC alphabet (built from the training manifest on first use)."""
        if self._vocabulary is None:
            self.split_entries("train")  # reading the training manifest sets it
        return self._vocabulary

    @property
    def vocab_size(self) -> int:
        """Characters plus the CTC blank; linked to the model's ``vocab_size``."""
        return len(self.vocabulary)

    @property
    def max_length(self) -> int:
        """Encoder positions (4x subsampled ``hop_ms`` frames) of a ``max_duration`` utterance; linked to the model."""
        frames = self.features.frames(int(self.hparams.max_duration * SAMPLE_RATE))
        return int(subsampled_lengths(torch.tensor(frames)))

    def transcripts(self, split: str) -> list[str]:
        """The normalised transcripts of ``split`` (e.g. the training text of a language model)."""
        return [normalize_text(e.text, self.hparams.keep_accents) for e in self.split_entries(split)]

    def split_entries(self, split: str) -> list[ManifestEntry]:
        """Checked entries of ``split``: lines well formed, audio headers readable, characters in the vocabulary."""
        if split not in self.entries:
            path = self.manifests[split]
            if path is None:
                raise ValueError(f"SpeechData: no {split}_manifest given; set --data.init_args.{split}_manifest")
            if not Path(path).is_file():
                raise ValueError(f"SpeechData: {split}_manifest {path} does not exist; build a corpus with "
                                 "`lintf data synth-speech --out data/speech/synth` (or `lintf data --help`)")
            entries = read_manifest(path)[: self.hparams.limit]
            if not entries:
                raise ValueError(f"SpeechData: {path} lists no utterances")
            if split == "train" and self._vocabulary is None:
                vocabulary = CharVocabulary.from_texts(normalize_text(e.text, self.hparams.keep_accents)
                                                       for e in entries)
            else:
                vocabulary = self.vocabulary
            self.entries[split] = self._checked(split, entries, vocabulary)  # kept only once it passed
            self._vocabulary = vocabulary
        return self.entries[split]

    def _checked(self, split: str, entries: list[ManifestEntry], vocabulary: CharVocabulary) -> list[ManifestEntry]:
        """``entries`` once their audio headers and characters passed (every problem is reported with its
        manifest line); training entries longer than ``max_duration`` left out."""
        path = self.manifests[split]
        audio = [f"{e.where}: {e.audio_filepath}: {why}" for e in entries
                 if (why := audio_problem(e.audio_filepath, e.duration))]
        if audio:
            raise AudioError(problem_report(f"{path}: {len(audio)} of {len(entries)} audio files cannot be used; "
                                            f"each must be {READABLE}", audio))
        unknown = [f"{e.where}: characters {chars}" for e in entries
                   if (chars := vocabulary.unknown(normalize_text(e.text, self.hparams.keep_accents)))]
        if unknown:
            raise ValueError(problem_report(f"{path}: {len(unknown)} transcripts have characters outside the "
                                            f"vocabulary {vocabulary.characters!r}", unknown))
        if split != "train":
            return entries
        kept = [e for e in entries if e.duration <= self.hparams.max_duration]
        if len(kept) < len(entries):
            rank_zero_warn(f"SpeechData: skipped {len(entries) - len(kept)} training utterances longer than "
                           f"max_duration={self.hparams.max_duration} s")
        return kept

    def setup(self, stage: str | None = None) -> None:
        """Read and check the manifests of ``stage`` now, so a bad line stops the run before its first batch."""
        splits = STAGE_SPLITS.get(stage or "", tuple(self.manifests))
        for split in splits:
            if self.manifests[split] is not None:
                self.split_entries(split)

    def dataset(self, split: str) -> Utterances:
        """The utterances of ``split`` ("train", "val", "test" or "predict")."""
        augment = self.augment if split == "train" else None
        train = split == "train"
        warp = self.hparams.test_warp if split in ("test", "predict") else 1.0
        return Utterances(self.split_entries(split), self.vocabulary, self.features, augment, self.hparams.keep_accents,
                          self.hparams.vtlp if train else 0.0, self.hparams.speed_perturb if train else 0.0, warp)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """The validation loader, and the dev manifest's loader after it if one is given."""
        return self.loader("val") if self.manifests["dev"] is None else [self.loader("val"), self.loader("dev")]

    def loader(self, split: str) -> DataLoader:
        dataset = self.dataset(split)
        # Random order for training tells Lightning to shard it with shuffling under DDP.
        indices = RandomSampler(dataset) if split == "train" else SequentialSampler(dataset)
        sampler = BucketBatchSampler(indices, self.hparams.batch_size, durations=[e.duration for e in dataset.entries],
                                     shuffle=split == "train", seed=self.hparams.seed)
        workers = self.hparams.num_workers
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=pad_batch, num_workers=workers,
                          persistent_workers=workers > 0)
