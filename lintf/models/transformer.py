"""A transformer encoder stack built from registry names, runnable in parallel or as an RNN."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from lintf.attention.base import Attention, State
from lintf.models.attention_layer import MultiHeadAttention
from lintf.models.encoder_config import EncoderConfig
from lintf.registry import ATTENTIONS, FEATURE_MAPS, accepted_arguments, build_attention

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}  # keys: encoder_config.ACTIVATION_NAMES


def build_head_attention(
    name: str,
    head_dim: int,
    attention_kwargs: dict[str, Any] | None,
    feature_map: str | None,
    feature_map_kwargs: dict[str, Any] | None,
) -> Attention:
    """Build attention ``name`` for one layer, routing the feature map to attentions that take one."""
    kwargs = dict(attention_kwargs or {})
    if feature_map is not None or feature_map_kwargs:
        if "feature_map" not in accepted_arguments(ATTENTIONS.get(name)):
            takers = [n for n in ATTENTIONS.names() if "feature_map" in accepted_arguments(ATTENTIONS.get(n))]
            raise ValueError(
                f"attention {name!r} takes no feature map, but feature_map={feature_map!r} / "
                f"feature_map_kwargs={feature_map_kwargs!r} were given; attentions with a feature map: "
                f"{', '.join(takers)}"
            )
        if feature_map is not None:
            FEATURE_MAPS.get(feature_map)  # unknown names fail here with the known ones listed
            kwargs["feature_map"] = feature_map
        if feature_map_kwargs:
            kwargs["feature_map_kwargs"] = feature_map_kwargs
    return build_attention(name, head_dim=head_dim, **kwargs)


class TransformerLayer(nn.Module):
    """Attention + feed-forward block with residuals and LayerNorm before ("pre") or after ("post").

    Args:
        d_model: model width.
        n_heads: attention heads.
        attention: built attention for head_dim = d_model // n_heads.
        d_ff: feed-forward hidden size.
        activation: feed-forward non-linearity.
        dropout: dropout on the residual branches and inside the feed-forward.
        norm: LayerNorm placement.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        attention: Attention,
        d_ff: int,
        activation: Literal["gelu", "relu", "silu"],
        dropout: float,
        norm: Literal["pre", "post"],
    ) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, attention)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.attention_norm, self.feed_forward_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm = norm

    def _residual(self, x: Tensor, branch, norm: nn.LayerNorm) -> Tensor:
        if self.norm == "pre":
            return x + self.dropout(branch(norm(x)))
        return norm(x + self.dropout(branch(x)))

    def forward(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: State | None = None,
        return_state: bool = False,
    ) -> Tensor | tuple[Tensor, State]:
        """x (B, N, d_model) -> (B, N, d_model); with ``return_state`` also the attention's state after x."""
        carried = {}

        def attend(h: Tensor) -> Tensor:
            if state is None and not return_state:
                return self.attention(h, causal, key_padding_mask)
            out, carried["state"] = self.attention(h, causal, key_padding_mask, state=state, return_state=True)
            return out

        x = self._residual(x, attend, self.attention_norm)
        x = self._residual(x, self.feed_forward, self.feed_forward_norm)
        return (x, carried["state"]) if return_state else x

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        """x_t (B, d_model) -> (B, d_model) for the next position; state is the attention's."""
        if self.norm == "pre":
            attended, state = self.attention.step(self.attention_norm(x_t), state)
            x_t = x_t + self.dropout(attended)
        else:
            attended, state = self.attention.step(x_t, state)
            x_t = self.attention_norm(x_t + self.dropout(attended))
        return self._residual(x_t, self.feed_forward, self.feed_forward_norm), state


class TransformerEncoder(nn.Module):
    """A stack of transformer layers whose attention is chosen by registry name.

    The same weights run in parallel (``forward``) or one position at a time (``step``), so a
    model trained with causal linear attention samples as an RNN with O(1) memory per token.

    Args:
        config: width, depth, attention and feed-forward settings (``EncoderConfig``); a mapping of
            its fields is accepted too.
    """

    def __init__(self, config: EncoderConfig | dict[str, Any] = EncoderConfig()) -> None:
        super().__init__()
        config = EncoderConfig.coerce(config)
        self.config = config
        self.d_model = config.d_model
        self.layers = nn.ModuleList(
            TransformerLayer(
                config.d_model,
                config.n_heads,
                build_head_attention(
                    config.attention, config.head_dim, config.attention_kwargs, config.feature_map, config.feature_map_kwargs
                ),
                config.feed_forward_dim,
                config.activation,
                config.dropout,
                config.norm,
            )
            for _ in range(config.n_layers)
        )
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()

    def forward(
        self, x: Tensor, causal: bool = True, key_padding_mask: Tensor | None = None,
        state: list[State] | None = None, return_state: bool = False,
    ) -> Tensor | tuple[Tensor, list[State]]:
        """x (B, N, d_model) -> (B, N, d_model). key_padding_mask (B, N) bool, True = padding.

        Args:
            x: (B, N, d_model) inputs.
            causal: position i attends to positions <= i only.
            key_padding_mask: (B, N) bool, True marks padding.
            state: per-layer states of earlier positions (from ``forward(..., return_state=True)``,
                ``prefill`` or ``step``); causal only. None starts from an empty prefix.
            return_state: also return the per-layer states after the last position, which ``step``
                (or another ``forward``) continues.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"TransformerEncoder: x must be (B, N, {self.d_model}), got {tuple(x.shape)}")
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"TransformerEncoder: state has {len(state)} layers, model has {len(self.layers)}")
        if not return_state and state is None:
            for layer in self.layers:
                x = layer(x, causal, key_padding_mask)
            return self.final_norm(x)
        new_state = []
        for index, layer in enumerate(self.layers):
            x, layer_state = layer(x, causal, key_padding_mask, None if state is None else state[index], True)
            new_state.append(layer_state)
        return (self.final_norm(x), new_state) if return_state else self.final_norm(x)

    def use_sequence_parallel(self, group: Any) -> None:
        """Run causal calls on this rank's consecutive part of sequences split across ``group`` (None: off).

        Every layer's attention then adds the state of the earlier ranks' positions (one all-gather of
        (C x M) states per layer); outputs equal the whole sequence's rows. Parameter gradients are
        this rank's share: sum them across the group (DDP does) for the whole sequence's.
        """
        for layer in self.layers:
            layer.attention.attention.use_sequence_parallel(group)

    def prefill(self, x: Tensor, state: list[State] | None = None) -> tuple[Tensor, list[State]]:
        """Run a prompt x (B, N, d_model) in one parallel causal pass; its outputs and the states ``step`` continues."""
        return self.forward(x, causal=True, state=state, return_state=True)

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> list[State]:
        """Empty recurrent state for ``batch_size`` sequences: one attention state per layer."""
        return [layer.attention.init_state(batch_size, device, dtype) for layer in self.layers]

    def step(self, x_t: Tensor, state: list[State]) -> tuple[Tensor, list[State]]:
        """Next position: x_t (B, d_model) -> (B, d_model); equals row t of ``forward(causal=True)``."""
        if x_t.dim() != 2 or x_t.shape[-1] != self.d_model:
            raise ValueError(f"TransformerEncoder.step: x_t must be (B, {self.d_model}), got {tuple(x_t.shape)}")
        if len(state) != len(self.layers):
            raise ValueError(f"TransformerEncoder.step: state has {len(state)} layers, model has {len(self.layers)}")
        new_state = []
        for layer, layer_state in zip(self.layers, state):
            x_t, layer_state = layer.step(x_t, layer_state)
            new_state.append(layer_state)
        return self.final_norm(x_t), new_state
