"""Real Czech speech: the voiced dialogue of a puzzle game's data packages (Debian ``fillets-ng-data`` +
``fillets-ng-data-cs``, the game Fish Fillets NG).

``sound/<level>/cs/<id>.ogg`` is spoken line ``<id>``; its transcript is the ``dialogStr("...")``
following ``dialogId("<id>", ...)`` in ``script/<level>/dialogs_cs.lua``. About 1.7 hours, two
main speakers (the small and the big fish) and a few others. Levels are split, not lines, so test
sentences come from scenes never heard in training. Transcripts keep Czech diacritics: train
with ``--data.init_args.keep_accents true``.
"""

from __future__ import annotations

import re
from pathlib import Path

from lintf.asr.corpora.manifest import write_manifest
from lintf.asr.corpora.system_tools import require_path
from lintf.asr.text import normalize_text

GAME_DATA_DIR = "/usr/share/games/fillets-ng"
_STRING = r'"(?:[^"\\]|\\.)*"'
_DIALOG = re.compile(
    rf'dialogId\(\s*"(?P<id>[^"]+)"(?:\s*,\s*{_STRING})*\s*\)\s*dialogStr\(\s*"(?P<text>(?:[^"\\]|\\.)*)"\s*\)'
)


def transcripts(script: Path) -> dict[str, str]:
    """``dialog id -> Czech line`` of one ``dialogs_cs.lua``."""
    return {m["id"]: m["text"].replace('\\"', '"') for m in _DIALOG.finditer(script.read_text(encoding="utf-8"))}


def build_czech_dialogue_corpus(out: str | Path, source: str | Path = GAME_DATA_DIR, every: int = 10) -> dict[str, Path]:
    """Write train/val/test manifests of the Czech voice lines (audio stays where Debian put it).

    Args:
        out: directory for ``train.jsonl``, ``val.jsonl`` and ``test.jsonl``.
        source: the game data directory (``/usr/share/games/fillets-ng`` from the Debian packages).
        every: of the levels in sorted order, every ``every``-th goes to test and the one after it
            to validation; the rest train.
    """
    import soundfile

    source = require_path(source, "fillets-ng-data fillets-ng-data-cs")
    if every < 3:
        raise ValueError(f"every must be >= 3 so that some levels train, got {every}")
    levels = sorted(p.parent.name for p in (source / "sound").glob("*/cs"))
    if not levels:
        raise RuntimeError(f"no Czech speech under {source / 'sound'}; install it with: sudo apt-get install -y fillets-ng-data-cs")
    rows: dict[str, list[dict]] = {"train": [], "val": [], "test": []}
    for index, level in enumerate(levels):
        script = source / "script" / level / "dialogs_cs.lua"
        lines = transcripts(script) if script.is_file() else {}
        split = "test" if index % every == 0 else "val" if index % every == 1 else "train"
        for audio in sorted((source / "sound" / level / "cs").glob("*.ogg")):
            text = normalize_text(lines.get(audio.stem, ""), keep_accents=True)
            if text:
                rows[split].append({"audio_filepath": str(audio), "duration": round(soundfile.info(str(audio)).duration, 3),
                                    "text": text, "speaker": audio.stem.split("-")[1] if "-" in audio.stem else ""})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifests = {split: out / f"{split}.jsonl" for split in rows}
    for split, path in manifests.items():
        write_manifest(path, rows[split])
    return manifests
