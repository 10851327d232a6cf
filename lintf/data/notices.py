"""One-line notices of the data modules on stderr (``lintf: ...``), printed by the first process only."""

from __future__ import annotations

import sys

from lightning.pytorch.utilities import rank_zero_only


@rank_zero_only
def notice(text: str) -> None:
    """Print ``lintf: <text>`` as one line on stderr.

    Args:
        text: what the user should know, in one line.
    """
    print(f"lintf: {text}", file=sys.stderr, flush=True)
