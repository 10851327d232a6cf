"""Where the ``lintf asr`` workflows write their tables, and how."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def default_out(ckpt: str, name: str) -> Path:
    """``<run>/<name>`` for a checkpoint at ``<run>/checkpoints/x.ckpt``; else ``<ckpt dir>/<name>``."""
    directory = Path(ckpt).resolve().parent
    return (directory.parent if directory.name == "checkpoints" else directory) / name


def write_report(out: str | Path, name: str, lines: list[str], payload: dict[str, Any]) -> None:
    """Write ``out/name.md`` (the markdown ``lines``) and ``out/name.json`` (``payload``), and print the markdown."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    print("\n".join(lines))
