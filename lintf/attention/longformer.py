"""Longformer: a sliding window, optionally dilated, plus global tokens that attend to and are attended by all."""

from __future__ import annotations

import torch

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention


def check_global_tokens(owner: str, n_global: int, n_keys: int, causal: bool) -> None:
    """Raise a ValueError if a non-causal call has fewer key positions than global tokens."""
    if not causal and n_global > n_keys:
        raise ValueError(f"{owner}: n_global={n_global} global tokens need at least as many key positions, got "
                         f"S={n_keys}; use n_global <= {n_keys} or a longer sequence (a causal sequence may be "
                         "shorter: its first positions are global as they come)")


def global_rows(start: int, n_queries: int, n_keys: int, n_global: int, device: torch.device) -> list[KeyGroups]:
    """The part in which the call's global queries (positions < n_global) attend every key; none if it has none."""
    n_rows = min(n_global - start, n_queries)
    if n_rows <= 0:
        return []
    return [KeyGroups(torch.arange(n_rows, device=device)[None], torch.arange(n_keys, device=device)[None, None])]


@register_attention("longformer")
class LongformerAttention(PatternAttention):
    """Softmax over a dilated sliding window plus ``n_global`` global tokens (Beltagy et al. 2020).

    Query i attends keys i + m d with |m| < ``window`` = w and d = ``dilation`` (causal: i, i - d,
    ..., i - (w - 1) d), and the global tokens, the first g = ``n_global`` positions; a global
    query attends every key (causal: every key up to it). Keys per query: w + g (2w - 1 + g
    non-causal), so the cost is O(N (w + g)) plus O(g N) for the global rows. A non-causal call
    needs S >= g (a ValueError says so); a causal sequence's first g positions are global as they
    come. Forward attends by index (``lintf.attention.indexed_keys``): queries in blocks of w rows
    of one residue mod d over 2w (3w) gathered keys and the global ones; the state is a
    ``KVCache`` (every key: global rows see all of them) and ``step`` equals the causal forward.

    Args:
        head_dim: D.
        window: w, keys on each side of the query (itself included).
        dilation: d, positions between two window keys.
        n_global: g, global tokens at the start of the sequence (0: none).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(
        self, head_dim: int, window: int = 32, dilation: int = 1, n_global: int = 1, scale: float | None = None
    ) -> None:
        super().__init__(head_dim, scale)
        self.window = positive_int("longformer", "window", window)
        self.dilation = positive_int("longformer", "dilation", dilation)
        if isinstance(n_global, bool) or not isinstance(n_global, int) or n_global < 0:
            raise ValueError(f"longformer: n_global must be an int >= 0 (0: no global token), got {n_global!r}")
        self.n_global = n_global

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        check_global_tokens("longformer", self.n_global, n_keys, causal)
        w, d, g = self.window, self.dilation, self.n_global
        windows = grid_groups(start, n_queries, d, w, device)
        rows = windows.block[:, None] * w + torch.arange(-w, w if causal else 2 * w, device=device)  # (G, 2w|3w)
        near = rows * d + windows.residue[:, None]
        in_window = ((windows.positions // d)[:, :, None] - rows[:, None, :]).abs() < w  # (G, Lq, K)
        keys = torch.cat([near, torch.arange(g, device=device).expand(len(near), g)], dim=1)  # (G, K + g)
        window_keys = in_window & (near >= g)[:, None, :]  # a global key is attended once, as a global key
        global_keys = torch.ones(*in_window.shape[:2], g, dtype=torch.bool, device=device)
        allowed = torch.cat([window_keys, global_keys], dim=2) & (windows.positions >= g)[:, :, None]  # (G, Lq, K + g)
        window_part = KeyGroups(windows.queries, keys[None], allowed[None])
        return [window_part, *global_rows(start, n_queries, n_keys, g, device)]
