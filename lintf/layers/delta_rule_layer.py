"""The layer recipe around the delta rule: projections, short convolutions, q/k norm, beta, gates, output norm.

For each position x_t (d_model) of a layer of Hk query/key heads of width Dk and Hv value heads of
width Dv (Hv a multiple of Hk: grouped value heads share a query/key head):

    q, k, v  = act(conv(W_q x)), act(conv(W_k x)), silu(conv(W_v x))   (causal depthwise, K positions)
    q, k    <- normalise(q), normalise(k)                               (per head: L2, or by their sum)
    beta_t   = sigmoid(W_b x_t)  (times 2 with negative eigenvalues)    (one per value head)
    S_t      = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = Dk^-1/2 S_t^T q_t
    y_t      = W_o [RMSNorm(o_t) * w (* silu(W_g x_t) with an output gate)]

as the DeltaNet and Gated DeltaNet layers of flash-linear-attention (``fla/layers``); alpha_t is 1 for
DeltaNet and the subclass's gate otherwise (``log_decay``). The recurrence is ``lintf.ops.delta_rule``.
The layer is causal; its state is the convolutions' last K - 1 inputs and the memory S.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.state import check_state
from lintf.layers.gated_rms_norm import GatedRMSNorm
from lintf.layers.short_conv import ShortConvolution
from lintf.ops import accumulation_dtype, delta_rule

QKActivation = Literal["silu", "relu", "elu", "identity"]
QK_ACTIVATIONS = {"silu": F.silu, "relu": F.relu, "elu": lambda x: F.elu(x) + 1.0, "identity": lambda x: x}


class DeltaLayerState(NamedTuple):
    """A delta-rule layer's decoding state.

    Args:
        q_conv: (B, Hk * Dk, K - 1) the last inputs of the query convolution (K = 1 without one).
        k_conv: (B, Hk * Dk, K - 1) the same for the keys.
        v_conv: (B, Hv * Dv, K - 1) the same for the values.
        memory: (B, Hv, Dk, Dv) the delta rule's state S, in the accumulation dtype.
    """

    q_conv: Tensor
    k_conv: Tensor
    v_conv: Tensor
    memory: Tensor


def positive_int(owner: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {key} must be a positive int, got {value!r}")
    return value


def width(owner: str, key: str, base: int, expand: float) -> int:
    """``base * expand`` if it is a positive whole number; ValueError otherwise."""
    size = base * expand
    if not expand > 0 or size != int(size):
        raise ValueError(f"{owner}: {key}={expand!r} times {base} must give a positive whole width, got {size}")
    return int(size)


class DeltaRuleLayer(nn.Module):
    """The shared recipe of ``delta_net`` and ``gated_delta_net`` layers; subclasses fix options and the gate.

    Args:
        d_model: model width, read and written.
        n_heads: Hk, query/key heads.
        key_dim: Dk, each query/key head's width.
        value_dim: Dv, each value head's width.
        n_value_heads: Hv, value heads; a multiple of n_heads (grouped value heads), None for n_heads.
        short_conv: K, the short convolution's kernel size; None: no convolution.
        conv_bias: a bias in the short convolutions.
        qk_activation: applied to q and k after the convolution.
        qk_norm: "l2" divides q and k by their norm, "sum" by their sum.
        learned_beta: beta from a projection of the input; False writes with beta 1.
        negative_eigenvalues: beta in (0, 2) instead of (0, 1).
        output_gate: gate the output norm by silu of a projection of the input.
        norm_eps: the output RMSNorm's epsilon.
    """

    def __init__(
        self, d_model: int, n_heads: int, key_dim: int, value_dim: int, n_value_heads: int | None,
        short_conv: int | None, conv_bias: bool, qk_activation: QKActivation, qk_norm: Literal["l2", "sum"],
        learned_beta: bool, negative_eigenvalues: bool, output_gate: bool, norm_eps: float,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.n_heads, self.key_dim, self.value_dim = positive_int(owner, "n_heads", n_heads), key_dim, value_dim
        self.n_value_heads = n_heads if n_value_heads is None else positive_int(owner, "n_value_heads",
                                                                                n_value_heads)
        if self.n_value_heads % n_heads:
            raise ValueError(f"{owner}: n_value_heads ({self.n_value_heads}) must be a multiple of n_heads ({n_heads})")
        if qk_activation not in QK_ACTIVATIONS:
            raise ValueError(f"{owner}: qk_activation must be one of {', '.join(QK_ACTIVATIONS)}, got {qk_activation!r}")
        if qk_norm not in ("l2", "sum"):
            raise ValueError(f"{owner}: qk_norm must be 'l2' or 'sum', got {qk_norm!r}")
        self.qk_activation, self.qk_norm, self.negative_eigenvalues = qk_activation, qk_norm, bool(negative_eigenvalues)
        qk_width, v_width = n_heads * key_dim, self.n_value_heads * value_dim
        self.q_proj, self.k_proj = nn.Linear(d_model, qk_width, bias=False), nn.Linear(d_model, qk_width, bias=False)
        self.v_proj = nn.Linear(d_model, v_width, bias=False)
        self.b_proj = nn.Linear(d_model, self.n_value_heads, bias=False) if learned_beta else None
        self.conv_window = 0 if short_conv is None else positive_int(owner, "short_conv", short_conv) - 1
        if short_conv is not None:
            self.q_conv1d = ShortConvolution(qk_width, short_conv, conv_bias, activation=None)
            self.k_conv1d = ShortConvolution(qk_width, short_conv, conv_bias, activation=None)
            self.v_conv1d = ShortConvolution(v_width, short_conv, conv_bias, activation="silu")
        self.g_proj = nn.Linear(d_model, v_width, bias=False) if output_gate else None
        self.o_norm = GatedRMSNorm(value_dim, eps=norm_eps)
        self.o_proj = nn.Linear(v_width, d_model, bias=False)

    def log_decay(self, x: Tensor) -> Tensor | None:
        """log alpha per position and value head: x (B, N, d_model) -> (B, Hv, N) <= 0; None: no decay."""
        return None

    def use_sequence_parallel(self, group: object) -> None:
        """Refuse a split sequence: the layer's convolutions and gates are not split across ranks."""
        if group is not None:
            raise ValueError(f"{type(self).__name__} cannot split a sequence across ranks; use layer: projections "
                             "with an attention that has supports_sequence_parallel (linear and its variants)")

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> DeltaLayerState:
        """Empty state for ``batch_size`` sequences: zero convolution inputs and memory."""
        qk_width, v_width = self.n_heads * self.key_dim, self.n_value_heads * self.value_dim
        conv = [torch.zeros(batch_size, width_, self.conv_window, device=device, dtype=dtype)
                for width_ in (qk_width, qk_width, v_width)]
        memory = torch.zeros(batch_size, self.n_value_heads, self.key_dim, self.value_dim, device=device,
                             dtype=accumulation_dtype(dtype))
        return DeltaLayerState(*conv, memory)

    def _mix(self, x: Tensor, name: str, cache: Tensor) -> tuple[Tensor, Tensor]:
        """Projection ``name`` of x (B, N, d_model), convolved from ``cache``: (B, N, C) and the cache after x."""
        projected = getattr(self, f"{name}_proj")(x)
        if not hasattr(self, f"{name}_conv1d"):
            out = F.silu(projected) if name == "v" else projected
            return out, cache
        return getattr(self, f"{name}_conv1d")(projected, cache)

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, -1).transpose(1, 2)  # (B, heads, N, width)

    def _normalise(self, x: Tensor) -> Tensor:
        x = QK_ACTIVATIONS[self.qk_activation](x)
        return F.normalize(x, dim=-1) if self.qk_norm == "l2" else x / x.sum(-1, keepdim=True)

    def forward(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: DeltaLayerState | None = None,
        return_state: bool = False,
    ) -> tuple[Tensor, DeltaLayerState | None]:
        """x (B, N, d_model) -> (out (B, N, d_model), the state after x, or None without ``return_state``).

        ``key_padding_mask`` (B, N), True = padding: padded positions enter the convolutions as zeros and
        write nothing to the memory, so padding before or after a sequence leaves its outputs unchanged.
        """
        self._check_call(x, causal, key_padding_mask, state, return_state)
        state = self.init_state(x.shape[0], x.device, x.dtype) if state is None else state
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask[..., None], 0.0)
        (q, q_conv), (k, k_conv), (v, v_conv) = (self._mix(x, name, cache) for name, cache in
                                                 (("q", state.q_conv), ("k", state.k_conv), ("v", state.v_conv)))
        group = self.n_value_heads // self.n_heads  # value heads per query/key head
        q, k = (self._normalise(self._heads(t, self.n_heads)).repeat_interleave(group, dim=1) for t in (q, k))
        v = self._heads(v, self.n_value_heads)  # q, k (B, Hv, N, Dk), v (B, Hv, N, Dv)
        beta = torch.ones_like(v[..., 0]) if self.b_proj is None else torch.sigmoid(self.b_proj(x)).transpose(1, 2)
        beta = 2 * beta if self.negative_eigenvalues else beta  # (B, Hv, N)
        log_decay = self.log_decay(x)
        if key_padding_mask is not None:
            beta = beta.masked_fill(key_padding_mask[:, None], 0.0)
            log_decay = None if log_decay is None else log_decay.masked_fill(key_padding_mask[:, None], 0.0)
        out, memory = delta_rule(q, k, v, beta, log_decay=log_decay, scale=self.key_dim**-0.5,
                                 initial_state=state.memory, return_state=True)  # (B, Hv, N, Dv)
        out = out.transpose(1, 2)  # (B, N, Hv, Dv)
        gate = None if self.g_proj is None else self.g_proj(x).view(out.shape)
        out = self.o_proj(self.o_norm(out, gate).flatten(2))  # (B, N, d_model)
        return out, DeltaLayerState(q_conv, k_conv, v_conv, memory) if return_state else None

    def step(self, x_t: Tensor, state: DeltaLayerState) -> tuple[Tensor, DeltaLayerState]:
        """x_t (B, d_model) -> (B, d_model): the causal forward of one position from ``state``."""
        out, state = self.forward(x_t[:, None], causal=True, state=state, return_state=True)
        return out[:, 0], state

    def _check_call(self, x: Tensor, causal: bool, key_padding_mask: Tensor | None, state: DeltaLayerState | None,
                    return_state: bool) -> None:
        owner = type(self).__name__
        if not causal:
            raise ValueError(f"{owner} is causal (its convolutions and memory read the past only); use causal=True, "
                             "or layer: projections for a non-causal task")
        if key_padding_mask is not None and (state is not None or return_state):
            raise ValueError(f"{owner}: a key_padding_mask with a state is not supported (padding inside a "
                             "continued sequence would shift its convolutions); pass one or the other")
        if state is not None:
            expected = self.init_state(x.shape[0], "meta", x.dtype)
            check_state(owner, state, expected, x.device, ())
