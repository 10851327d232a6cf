"""JSON-lines manifests (NeMo/ESPnet convention): one utterance per line with
``audio_filepath``, ``duration`` (seconds) and ``text``. Relative paths are relative to the manifest."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("audio_filepath", "duration", "text")


@dataclass(frozen=True)
class ManifestEntry:
    """One utterance and where it was listed (for error messages)."""

    audio_filepath: Path
    duration: float
    text: str
    manifest: Path
    line: int

    @property
    def where(self) -> str:
        """``manifest:line``, the place to fix a bad entry."""
        return f"{self.manifest}:{self.line}"


def read_manifest(path: str | Path) -> list[ManifestEntry]:
    """Parse a manifest; ValueError naming the file and line of a malformed entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest not found: {path}")
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        missing = [key for key in REQUIRED if key not in row]
        if not isinstance(row, dict) or missing:
            raise ValueError(f"{path}:{number}: missing {', '.join(missing)}; every line needs {', '.join(REQUIRED)}")
        audio = Path(row["audio_filepath"])
        audio = audio if audio.is_absolute() else path.parent / audio
        entries.append(ManifestEntry(audio, float(row["duration"]), str(row["text"]), path, number))
    return entries


def write_manifest(path: str | Path, rows: Iterable[dict]) -> int:
    """Write ``rows`` (dicts with at least the required keys) as JSON lines; returns the count."""
    count = 0
    with open(path, "w", encoding="utf-8") as file:
        for row in rows:
            missing = [key for key in REQUIRED if key not in row]
            if missing:
                raise ValueError(f"manifest row {row!r} lacks {', '.join(missing)}")
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
