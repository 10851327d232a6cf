"""JSON-lines manifests (NeMo/ESPnet convention): one utterance per line with
``audio_filepath``, ``duration`` (seconds) and ``text``. Relative paths are relative to the manifest.

Every line is checked when a manifest is read, and every malformed line is reported at once,
each as ``manifest:line: what is wrong, what is expected``: one run of ``read_manifest`` shows
everything to fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED = ("audio_filepath", "duration", "text")
ROW_FORMAT = ('a JSON object with "audio_filepath" (a path), "duration" (seconds, a number > 0) '
              'and "text" (the transcript, a string)')
ROW_SHAPE = 'a JSON object {"audio_filepath": ..., "duration": ..., "text": ...}'
MAX_REPORTED = 20
"""Problems listed in full by ``problem_report``; the rest are counted."""


class ManifestError(ValueError):
    """A manifest with malformed lines; ``problems`` holds every one as ``manifest:line: why``.

    Args:
        path: the manifest.
        problems: one ``manifest:line: why`` per malformed line.
        lines: the manifest's non-blank lines.
    """

    def __init__(self, path: Path, problems: list[str], lines: int) -> None:
        self.problems = problems
        headline = f"{path}: {len(problems)} of {lines} lines are malformed; each line must be {ROW_FORMAT}"
        super().__init__(problem_report(headline, problems))


def problem_report(headline: str, problems: Sequence[str], limit: int = MAX_REPORTED) -> str:
    """``headline``, then the first ``limit`` problems one per line, then how many more there are.

    Args:
        headline: what is wrong overall and what is expected.
        problems: one line each (``file:line: why``).
        limit: how many to list; the rest are counted.
    """
    shown = [f"  {problem}" for problem in problems[:limit]]
    if len(problems) > limit:
        shown.append(f"  ... and {len(problems) - limit} more")
    return "\n".join([headline + ":", *shown])


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


def _shown(value: Any) -> str:
    """A JSON value as the manifest spells it, cut to a readable length.

    Args:
        value: a parsed JSON value.
    """
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def field_problems(row: dict[str, Any]) -> list[str]:
    """What is wrong with the required fields of a parsed manifest row (empty if nothing).

    Args:
        row: one parsed manifest line.
    """
    missing = [f'"{key}"' for key in REQUIRED if key not in row]
    if missing:
        return [f"missing {', '.join(missing)}, expected {ROW_SHAPE}"]
    problems = []
    path, duration, text = (row[key] for key in REQUIRED)
    if not isinstance(path, str) or not path.strip():
        problems.append(f'"audio_filepath" is {_shown(path)}, expected a non-empty string (a path)')
    number = isinstance(duration, (int, float)) and not isinstance(duration, bool)
    if not number or not math.isfinite(duration) or duration <= 0:
        problems.append(f'"duration" is {_shown(duration)}, expected a number of seconds > 0')
    if not isinstance(text, str):
        problems.append(f'"text" is {_shown(text)}, expected a string (the transcript)')
    return problems


def parse_line(raw: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """One manifest line -> (its row, []) or (None, what is wrong with it).

    Args:
        raw: the line's bytes, without the line break.
    """
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        return None, [f"not UTF-8 text (byte {raw[error.start]:#04x} at column {error.start + 1})"]
    except json.JSONDecodeError as error:
        return None, [f"not valid JSON ({error.msg} at column {error.colno}), expected {ROW_SHAPE}"]
    if not isinstance(row, dict):
        return None, [f"{_shown(row)} is not an object, expected {ROW_SHAPE}"]
    problems = field_problems(row)
    return (None if problems else row), problems


def read_manifest(path: str | Path) -> list[ManifestEntry]:
    """Parse a manifest.

    Args:
        path: the JSON-lines file; blank lines are skipped.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ManifestError: some lines are malformed; it lists every one with its line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest not found: {path}")
    entries, problems, lines = [], [], 0
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        lines += 1
        row, wrong = parse_line(raw)
        if wrong:
            problems.append(f"{path}:{number}: {'; '.join(wrong)}")
        if row is not None:
            audio = Path(row["audio_filepath"])
            audio = audio if audio.is_absolute() else path.parent / audio
            entries.append(ManifestEntry(audio, float(row["duration"]), row["text"], path, number))
    if problems:
        raise ManifestError(path, problems, lines)
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
