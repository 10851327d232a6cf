"""The layout version of lintf checkpoints: what a task records when it saves, what a reader compares.

A task writes ``lintf_format`` (this ``FORMAT``) and ``lintf_task`` (its class path) into each
checkpoint; ``lintf.run.checkpoint_format`` says what each version holds and upgrades older ones.
"""

from __future__ import annotations

from typing import Any

FORMAT = 2


def format_of(checkpoint: dict[str, Any]) -> int:
    """The layout version of a lintf checkpoint (1 before versions were recorded)."""
    return int(checkpoint.get("lintf_format", 1))
