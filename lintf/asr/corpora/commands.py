"""``lintf data ...``: commands that fetch or build corpora (arguments come from the builders' signatures).

    lintf data synth-speech --out data/speech/synth       # flite, festival and espeak-ng voices reading the KJV
    lintf data librivox --out data/speech/librivox.jsonl  # 5 real LibriVox clips (pocketsphinx-testdata)
    lintf data czech-dialogue --out data/speech/czech    # ~1.7 h real Czech (fillets-ng-data{,-cs})
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from jsonargparse import CLI

from lintf.asr.corpora.czech_dialogue import build_czech_dialogue_corpus
from lintf.asr.corpora.librivox import build_librivox_manifest
from lintf.asr.corpora.manifest import read_manifest
from lintf.asr.corpora.synthetic import build_synth_corpus


def describe(manifests: dict[str, Path] | Path, seconds: float) -> str:
    """One line per manifest: utterances and hours of audio."""
    items = manifests.items() if isinstance(manifests, dict) else [(manifests.stem, manifests)]
    lines = []
    for name, path in items:
        entries = read_manifest(path)
        hours = sum(e.duration for e in entries) / 3600
        lines.append(f"{name}: {len(entries)} utterances, {hours:.2f} h -> {path}")
    return "\n".join(lines + [f"built in {seconds:.0f} s"])


COMMANDS = {"synth-speech": build_synth_corpus, "librivox": build_librivox_manifest, "czech-dialogue": build_czech_dialogue_corpus}


def main(args: list[str] | None = None) -> None:
    """Run ``lintf data <command>``; ``args`` excludes ``lintf data``."""
    start = time.time()
    try:
        result = CLI(COMMANDS, args=args, as_positional=False, prog="lintf data")
    except (RuntimeError, ValueError) as error:  # missing system package, bad sizes: one line, no traceback
        print(f"lintf data: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(describe(result, time.time() - start))


if __name__ == "__main__":
    main()
