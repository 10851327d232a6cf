"""The decayed causal product's chunked recurrence in PyTorch, on validated inputs of one dtype.

Shared by ``product.py`` (the PyTorch path) and ``compiled.py`` (the compiled op's differentiable
backward for second derivatives). The chunked form is explained in ``product.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

DEFAULT_CHUNK_SIZE = 64


def decayed_product_chunked(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, chunk: int, initial_state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The chunked recurrence on validated inputs of one dtype; returns out (B, H, N, M) and S_N (B, H, C, M)."""
    batch, heads, length, features = q.shape
    state = q.new_zeros(batch, heads, features, v.shape[-1]) if initial_state is None else initial_state
    if length == 0:
        return v.new_zeros(batch, heads, 0, v.shape[-1]), state
    padding = (-length) % chunk
    n_chunks = (length + padding) // chunk
    # padded positions have k = 0 and log_decay = 0: they add nothing and decay nothing
    q_c, k_c, v_c = (
        F.pad(t, (0, 0, 0, padding)).reshape(batch, heads, n_chunks, chunk, t.shape[-1]) for t in (q, k, v)
    )  # (B, H, nc, L, C|M)
    within = F.pad(log_decay, (0, padding)).reshape(batch, heads, n_chunks, chunk).cumsum(-1)  # b_t: (B, H, nc, L)
    whole = within[..., -1]  # (B, H, nc): log-decay across each chunk
    below = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    relative = (within.unsqueeze(-1) - within.unsqueeze(-2)).masked_fill(~below, float("-inf")).exp()  # (.., L, L)
    out = ((q_c @ k_c.transpose(-1, -2)) * relative) @ v_c  # (B, H, nc, L, M): within-chunk terms
    keys_to_end = k_c * torch.exp(whole.unsqueeze(-1) - within).unsqueeze(-1)  # (B, H, nc, L, C)
    added = keys_to_end.transpose(-1, -2) @ v_c  # (B, H, nc, C, M): what each chunk adds to the state
    entering = []
    # unbind, not indexing in the loop: the backward of x[:, :, c] writes a zero tensor of x's whole size
    for decay, chunk_added in zip(torch.exp(whole)[..., None, None].unbind(2), added.unbind(2)):
        entering.append(state)
        state = decay * state + chunk_added
    earlier = torch.stack(entering, dim=2)  # (B, H, nc, C, M): state entering each chunk
    out = out + (q_c * torch.exp(within).unsqueeze(-1)) @ earlier
    return out.reshape(batch, heads, n_chunks * chunk, v.shape[-1])[:, :, :length], state
