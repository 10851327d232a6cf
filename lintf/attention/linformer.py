"""Linformer (Wang et al. 2020): keys and values projected along the sequence to a fixed number of rows.

Two learned matrices E, F (k x N_max) turn the S keys and values into k rows each, ``E K`` and
``F V``, and queries attend with softmax to those k rows: O(N k) time and memory. Each projected
row mixes every position, later ones included, so there is no causal form.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lintf.attention.arguments import positive_int
from lintf.attention.base import Attention, State
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


@register_attention("linformer")
class LinformerAttention(Attention):
    """softmax(scale * q (E k)^T) (F v) with learned sequence projections E, F (non-causal only).

    E and F are parameters of shape (k, max_length), shared by the heads, drawn from N(0, 1/k)
    as in the paper's random-projection argument. Keys of a sequence shorter than ``max_length``
    use the first S columns; a longer one is refused. Padded keys and values are zeros before the
    projection, so they add nothing (a sequence of padding only gives zeros).

    Args:
        head_dim: D.
        max_length: N_max, the longest key sequence the projections cover.
        projected_length: k, the rows keys and values are projected to.
        scale: logit scale; None uses 1/sqrt(D).
    """

    supports_causal = False
    step_matches_forward = False

    def __init__(
        self, head_dim: int, max_length: int = 1024, projected_length: int = 64, scale: float | None = None
    ) -> None:
        super().__init__(head_dim)
        name = self.display_name()
        self.max_length = positive_int(name, "max_length", max_length)
        self.projected_length = positive_int(name, "projected_length", projected_length)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.key_projection = nn.Parameter(torch.randn(projected_length, max_length) * projected_length**-0.5)
        self.value_projection = nn.Parameter(torch.randn(projected_length, max_length) * projected_length**-0.5)

    def require_causal(self, what: str) -> None:
        """Refuse causal use, saying why: each projected key and value mixes every position."""
        super().require_causal(f"{what} (each of its k projected keys and values is a weighted sum over all S "
                               "positions, the future included, so no query can be kept from later keys)")

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, None]:
        n_keys = k.shape[2]
        if n_keys > self.max_length:
            raise ValueError(
                f"linformer: {n_keys} keys exceed max_length = {self.max_length}, the length its projections E, F "
                f"({self.projected_length} x {self.max_length}) cover; build it with max_length >= {n_keys} (e.g. "
                f"attention_kwargs {{max_length: {n_keys}}}) or give at most {self.max_length} keys"
            )
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):  # projections and softmax as in fp32
            q, keys, values = q.to(acc), k.to(acc), v.to(acc)
            if key_padding_mask is not None:
                hidden = key_padding_mask[:, None, :, None]  # (B, 1, S, 1)
                keys, values = keys.masked_fill(hidden, 0.0), values.masked_fill(hidden, 0.0)
            projected_keys = self.key_projection[:, :n_keys].to(acc) @ keys  # (B, H, k, D)
            projected_values = self.value_projection[:, :n_keys].to(acc) @ values  # (B, H, k, M)
            weights = torch.softmax((q @ projected_keys.transpose(-1, -2)) * self.scale, dim=-1)  # (B, H, N, k)
            out = weights @ projected_values
        return out.to(v.dtype), None
