"""``lintf data <command>``: build speech corpora (the options are the builders' arguments).

    lintf data synth-speech --out data/speech/synth       # flite, festival and espeak-ng voices reading the KJV
    lintf data librivox --out data/speech/librivox.jsonl  # 5 real LibriVox clips (pocketsphinx-testdata)
    lintf data czech-dialogue --out data/speech/czech    # ~1.7 h real Czech (fillets-ng-data{,-cs})

Each prints the utterances and hours of every manifest it wrote.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lintf.asr.corpora.czech_dialogue import build_czech_dialogue_corpus
from lintf.asr.corpora.librivox import build_librivox_manifest
from lintf.asr.corpora.manifest import read_manifest
from lintf.asr.corpora.synthetic import build_synth_corpus
from lintf.run.commands import CommandError


def describe(manifests: dict[str, Path] | Path, seconds: float) -> str:
    """One line per manifest: utterances and hours of audio."""
    items = manifests.items() if isinstance(manifests, dict) else [(manifests.stem, manifests)]
    lines = []
    for name, path in items:
        entries = read_manifest(path)
        hours = sum(e.duration for e in entries) / 3600
        lines.append(f"{name}: {len(entries)} utterances, {hours:.2f} h -> {path}")
    return "\n".join(lines + [f"built in {seconds:.0f} s"])


def reported(builder: Callable[..., Any]) -> Callable[..., Any]:
    """``builder`` as a command: its arguments and docstring, then a summary of what it wrote.

    A missing system package (the builders' RuntimeError, naming what to install) is a mistake of the
    input, reported in one paragraph like a bad option.
    """

    @functools.wraps(builder)
    def command(*args: Any, **kwargs: Any) -> None:
        start = time.time()
        try:
            manifests = builder(*args, **kwargs)
        except RuntimeError as error:
            raise CommandError(str(error)) from error
        print(describe(manifests, time.time() - start))

    return command


COMMANDS = {"synth-speech": reported(build_synth_corpus), "librivox": reported(build_librivox_manifest),
            "czech-dialogue": reported(build_czech_dialogue_corpus)}
"""``lintf data <name>``."""
