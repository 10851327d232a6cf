"""Synthetic voices of the speech corpus: a flite voice, a festival voice or an espeak-ng accent + variant.

A voice is named by a spec string:
  ``awb`` or ``flite:awb``          a flite voice (awb, kal, kal16, rms, slt)
  ``festival:ked``                  a festival voice (ked: a US male diphone voice, festvox-kdlpc16k)
  ``espeak:en-us+m3``               an espeak-ng accent with a voice variant (formants, pitch range)
  ``espeak:*``                      a random espeak-ng accent and variant for every utterance
Each synthesiser is given a speaking rate and pitch drawn per utterance; ``command`` builds the
program's argument list that writes one sentence to a wav file.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

FLITE_VOICES = ("awb", "kal", "kal16", "rms", "slt")
ESPEAK_ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
                  "en-029", "en-us-nyc")
ESPEAK_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5",
                   "klatt", "klatt2", "klatt3", "klatt4", "Alex", "Andy", "adam", "anika", "belinda",
                   "benjamin", "david", "edward", "john", "linda", "max", "michel", "paul", "steph")
# festival voice -> (its voice function, its Debian package, its directory)
FESTIVAL_VOICES = {"ked": ("voice_ked_diphone", "festvox-kdlpc16k", "/usr/share/festival/voices/english/ked_diphone")}
PROGRAMS = {"flite": "flite", "espeak": "espeak-ng", "festival": "text2wave"}  # engine -> program
PACKAGES = {"flite": "flite", "espeak": "espeak-ng", "festival": "festival"}  # engine -> its Debian package


@dataclass(frozen=True)
class Voice:
    """A parsed voice spec: ``engine`` is "flite" or "espeak"; ``name`` "*" draws per utterance."""

    engine: str
    name: str

    @property
    def spec(self) -> str:
        return f"{self.engine}:{self.name}"


def parse_voice(spec: str) -> Voice:
    """``awb`` / ``flite:awb`` / ``espeak:en-us+m3`` / ``espeak:*`` -> Voice; ValueError otherwise."""
    engine, _, name = spec.rpartition(":")
    engine = engine or "flite"
    if engine == "flite" and name in FLITE_VOICES:
        return Voice("flite", name)
    if engine == "festival":
        if name in FESTIVAL_VOICES:
            return Voice("festival", name)
        raise ValueError(f"unknown festival voice {name!r}: use one of {', '.join(FESTIVAL_VOICES)}")
    if engine == "espeak":
        accent, _, variant = name.partition("+")
        if name == "*" or (accent in ESPEAK_ACCENTS and variant in ("", *ESPEAK_VARIANTS)):
            return Voice("espeak", name)
        raise ValueError(f"unknown espeak voice {name!r}: use '*' or <accent>[+<variant>] with accent one of "
                         f"{', '.join(ESPEAK_ACCENTS)} and variant one of {', '.join(ESPEAK_VARIANTS)}")
    raise ValueError(f"unknown voice {spec!r}: use a flite voice ({', '.join(FLITE_VOICES)}), 'festival:<voice>' "
                     f"({', '.join(FESTIVAL_VOICES)}), 'espeak:<accent>+<variant>' or 'espeak:*'")


def concrete_voice(voice: Voice, rng: random.Random, excluded_variants: Collection[str] = ()) -> Voice:
    """``espeak:*`` -> a random accent+variant drawn from ``rng`` (never one of ``excluded_variants``);
    other voices unchanged."""
    if voice.engine == "espeak" and voice.name == "*":
        variants = [variant for variant in ESPEAK_VARIANTS if variant not in excluded_variants]
        return Voice("espeak", f"{rng.choice(ESPEAK_ACCENTS)}+{rng.choice(variants)}")
    return voice


def command(program: str, voice: Voice, text: str, wav_path: str, slowness: float, pitch: float) -> list[str]:
    """Argument list that makes ``program`` speak ``text`` into ``wav_path`` (festival's text2wave
    reads ``text`` from its standard input).

    Args:
        program: path of flite or espeak-ng.
        voice: a concrete voice (no "*").
        text: the sentence.
        wav_path: output file.
        slowness: speaking-time stretch, > 1 speaks slower (flite duration_stretch; espeak-ng
            gets 175 / slowness words per minute).
        pitch: in [0, 1]: flite and festival mean F0 from 90 to 190 Hz; espeak-ng pitch 20 to 80 (of 0-99).
    """
    if voice.engine == "festival":  # target F0 set as in ked's own voice definition, with its model statistics
        f0 = f"(set! int_lr_params '((target_f0_mean {90 + 100 * pitch:.1f}) (target_f0_std 15) " \
             "(model_f0_mean 170) (model_f0_std 34)))"
        return [program, "-eval", f"({FESTIVAL_VOICES[voice.name][0]})", "-eval", f0,
                "-eval", f"(Parameter.set 'Duration_Stretch {slowness:.3f})", "-o", wav_path]
    if voice.engine == "flite":
        return [program, "-voice", voice.name, "-t", text, "-o", wav_path,
                "--setf", f"duration_stretch={slowness:.3f}", "--setf", f"int_f0_target_mean={90 + 100 * pitch:.1f}"]
    return [program, "-v", voice.name, "-s", str(round(175 / slowness)), "-p", str(round(20 + 60 * pitch)),
            "-w", wav_path, "--", text]
