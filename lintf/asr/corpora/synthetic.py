"""Build an English speech corpus with exact transcripts by synthesising sentences.

Voices are flite's, festival's and espeak-ng's (accents x voice variants; see ``lintf.asr.corpora.voices``).
Training and validation use the training voices with random speaking rate and pitch; the test
set is spoken by a held-out voice, and the dev set by a second held-out voice (for choices that
must hold for unseen voices), each on sentences that appear in no other split. Every file is
written as 16 kHz mono wav, listed in ``train.jsonl``, ``val.jsonl``, ``test.jsonl`` and ``dev.jsonl``.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lintf.asr.features.audio import load_audio, write_wav
from lintf.asr.corpora.manifest import write_manifest
from lintf.asr.features.resample import resample
from lintf.asr.corpora.sentences import clauses, language_model_text, split_sentences
from lintf.asr.corpora.system_tools import kjv_path, require_path, require_program
from lintf.asr.corpora.voices import FESTIVAL_VOICES, PACKAGES, PROGRAMS, Voice, command, concrete_voice, parse_voice

SAMPLE_RATE = 16_000
LM_TEXT = "lm.txt"  # the language-model text written beside the manifests


@dataclass(frozen=True)
class Utterance:
    """One sentence to synthesise and how."""

    text: str
    voice: Voice  # concrete: no "*"
    slowness: float  # > 1 speaks slower
    pitch: float  # in [0, 1], mapped to each synthesiser's pitch range (some flite voices ignore it)
    path: Path


def synthesize(utterance: Utterance, programs: dict[str, str]) -> dict:
    """Synthesise one utterance, resample to 16 kHz, write the wav; returns its manifest row."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as raw:
        program = programs[utterance.voice.engine]
        arguments = command(program, utterance.voice, utterance.text, raw.name, utterance.slowness, utterance.pitch)
        subprocess.run(arguments, input=utterance.text.encode(), check=True, capture_output=True)
        waveform, rate = load_audio(raw.name)
    waveform = resample(waveform, rate, SAMPLE_RATE)
    write_wav(utterance.path, waveform, SAMPLE_RATE)
    return {"audio_filepath": f"{utterance.path.parent.name}/{utterance.path.name}",
            "duration": round(waveform.numel() / SAMPLE_RATE, 3), "text": utterance.text,
            "voice": utterance.voice.name if utterance.voice.engine == "flite" else utterance.voice.spec}


def plan(sentences: list[str], voices: list[Voice], split: str, out: Path, rng: random.Random,
         slowness: tuple[float, float], excluded_variants: Collection[str] = ()) -> list[Utterance]:
    """One utterance per sentence, voices in turn, slowness (uniform in ``slowness``) and pitch drawn
    from ``rng``."""
    return [
        Utterance(text, concrete_voice(voices[i % len(voices)], rng, excluded_variants),
                  rng.uniform(*slowness), rng.random(), out / split / f"{split}-{i:06d}.wav")
        for i, text in enumerate(sentences)
    ]


def check_held_out(voices: list[Voice], test: Voice, dev: Voice | None) -> None:
    """ValueError unless the test (and dev) voice is one concrete voice, not a training voice, and they differ."""
    for name, voice in (("test_voice", test), ("dev_voice", dev)):
        if voice is not None and voice.name == "*":
            raise ValueError(f"{name} must be one voice, not 'espeak:*'")
        if voice in voices:
            raise ValueError(f"{name} {voice.spec!r} must be held out, but it is among train_voices "
                             f"{[v.spec for v in voices]}")
    if dev == test:
        raise ValueError(f"dev_voice and test_voice must differ, both are {test.spec!r}")


def required_programs(voices: list[Voice]) -> dict[str, str]:
    """Engine -> program path for ``voices``; RuntimeError naming the Debian package of a missing program or voice."""
    programs = {voice.engine: require_program(PROGRAMS[voice.engine], PACKAGES[voice.engine]) for voice in voices}
    for voice in {v for v in voices if v.engine == "festival"}:
        require_path(FESTIVAL_VOICES[voice.name][2], FESTIVAL_VOICES[voice.name][1])
    return programs


def build_synth_corpus(
    out: str | Path,
    train_size: int = 8000,
    val_size: int = 200,
    test_size: int = 200,
    train_voices: tuple[str, ...] = ("awb", "kal16", "kal", "slt", "espeak:*", "espeak:*", "espeak:*", "espeak:*"),
    test_voice: str = "rms",
    dev_voice: str | None = "festival:ked",
    dev_size: int = 200,
    train_slowness: tuple[float, float] = (0.85, 1.3),
    test_slowness: tuple[float, float] = (0.85, 1.3),
    min_words: int = 3,
    max_words: int = 14,
    seed: int = 0,
    workers: int = 2,
) -> dict[str, Path]:
    """Synthesise the corpus into ``out``; returns the manifest path of each split.

    Also writes ``out/lm.txt``, the text of a language model (``ASRTask(lm_text=...)``): every
    clause of the KJV except those of the verses the val, test and dev sentences were cut from.

    Args:
        out: output directory (created; existing files are overwritten).
        train_size: training utterances (training voices).
        val_size: validation utterances (training voices, held-out sentences).
        test_size: test utterances (the held-out voice, held-out sentences).
        train_voices: voices of train and val, taken in turn: flite voices (awb, kal, kal16,
            rms, slt), festival voices (``festival:ked``), ``espeak:<accent>+<variant>``, or
            ``espeak:*`` (a random espeak-ng accent and variant per utterance).
        test_voice: the one voice of the test set; must not be a training voice (an espeak
            test voice's variant is also left out of the ``espeak:*`` draws).
        dev_voice: a second held-out voice, for choices that must hold for unseen voices (model
            selection, decoding options) without looking at the test voice; its ``dev.jsonl``
            has ``dev_size`` new sentences. None (or dev_size 0) writes no dev split.
        dev_size: dev utterances (the dev voice, held-out sentences).
        train_slowness: range of the speaking-time stretch of train and val utterances (> 1 is slower).
        test_slowness: the same for the test and dev voices' utterances.
        min_words: shortest sentence in words.
        max_words: longest sentence in words.
        seed: seed of the sentence draw, voices, rates and pitches.
        workers: synthesiser processes run in parallel.
    """
    voices, held_out = [parse_voice(spec) for spec in train_voices], parse_voice(test_voice)
    dev = parse_voice(dev_voice) if dev_voice is not None and dev_size > 0 else None
    check_held_out(voices, held_out, dev)
    for name, (low, high) in {"train_slowness": train_slowness, "test_slowness": test_slowness}.items():
        if not 0.5 <= low <= high <= 2.0:
            raise ValueError(f"{name} must be (low, high) with 0.5 <= low <= high <= 2.0, got {(low, high)}")
    programs = required_programs([*voices, held_out] + ([dev] if dev else []))
    out = Path(out)
    counts = {"train": train_size, "val": val_size, "test": test_size} | ({"dev": dev_size} if dev else {})
    sentences = split_sentences(clauses(kjv_path(), min_words, max_words), counts, seed)
    held_out_voices = {"test": held_out, "dev": dev}
    excluded = [v.name.partition("+")[2] for v in (held_out, dev) if v is not None]  # espeak variants kept out
    rng = random.Random(seed + 1)
    manifests = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for split, texts in sentences.items():
            (out / split).mkdir(parents=True, exist_ok=True)
            speakers, slowness = ([held_out_voices[split]], test_slowness) if split in held_out_voices else \
                (voices, train_slowness)
            utterances = plan(texts, speakers, split, out, rng, slowness, excluded)
            rows = list(pool.map(lambda u: synthesize(u, programs), utterances))
            manifests[split] = out / f"{split}.jsonl"
            write_manifest(manifests[split], rows)
    held_out_sentences = [text for split, texts in sentences.items() if split != "train" for text in texts]
    (out / LM_TEXT).write_text("\n".join(language_model_text(kjv_path(), held_out_sentences)) + "\n", encoding="utf-8")
    return manifests
