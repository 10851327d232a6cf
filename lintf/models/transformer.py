"""A transformer encoder stack built from registry names, runnable in parallel or as an RNN."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lintf.attention.base import Attention, State
from lintf.models.attention_layer import MultiHeadAttention
from lintf.models.encoder_config import EncoderConfig
from lintf.models.reversible import ReversibleBlock, reversible_sequence
from lintf.registry import ATTENTIONS, FEATURE_MAPS, LAYERS, accepted_arguments, build_attention

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}  # keys: encoder_config.ACTIVATION_NAMES


def takes_feature_map(name: str) -> bool:
    """Whether attention ``name`` has a feature map (``feature_map`` among its arguments)."""
    return "feature_map" in accepted_arguments(ATTENTIONS.get(name))


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
        if not takes_feature_map(name):
            takers = [n for n in ATTENTIONS.names() if takes_feature_map(n)]
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


def build_mixers(config: EncoderConfig) -> list[Attention | nn.Module]:
    """Each layer's token mixer: its attention (wrapped in projections by the layer) or its layer recipe.

    In a hybrid stack the feature map goes to the projection layers whose attention takes one.
    """
    names, kinds = config.attention_per_layer, config.layer_per_layer
    routed = [kind == "projections" and takes_feature_map(name) for name, kind in zip(names, kinds)]
    if (config.feature_map is not None or config.feature_map_kwargs) and not any(routed):
        routed = [kind == "projections" for kind in kinds]  # build_head_attention refuses it, naming the takers
        if not any(routed):
            raise ValueError("encoder: feature_map / feature_map_kwargs apply to layers with projections, but every "
                             "layer is a layer recipe; give a recipe's own feature map in attention_kwargs")
    mixers: list[Attention | nn.Module] = []
    for name, kind, kwargs, route in zip(names, kinds, config.attention_kwargs_per_layer, routed):
        if kind == "recipe":
            mixers.append(LAYERS.build(name, d_model=config.d_model, n_heads=config.n_heads, **kwargs))
        else:
            mixers.append(build_head_attention(name, config.head_dim, kwargs, config.feature_map if route else None,
                                               config.feature_map_kwargs if route else None))
    return mixers


Stream = Tensor | tuple[Tensor, Tensor]  # the residual stream: x, or the pair (X1, X2) when reversible


class TransformerLayer(nn.Module):
    """Attention + feed-forward block with residuals and LayerNorm before ("pre") or after ("post").

    A reversible layer takes and returns the pair (X1, X2) and couples its branches as
    ``Y1 = X1 + attention_branch(X2)``, ``Y2 = X2 + feed_forward_branch(Y1)``.

    Args:
        d_model: model width.
        n_heads: attention heads.
        attention: built attention for head_dim = d_model // n_heads, which the layer surrounds with
            projections (``MultiHeadAttention``); or a layer recipe (``lintf.layers``), used as it is.
        d_ff: feed-forward hidden size.
        activation: feed-forward non-linearity.
        dropout: dropout on the residual branches and inside the feed-forward.
        norm: LayerNorm placement ("pre" only when reversible).
        reversible: couple the branches reversibly on the pair (X1, X2).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        attention: Attention | nn.Module,
        d_ff: int,
        activation: Literal["gelu", "relu", "silu"],
        dropout: float,
        norm: Literal["pre", "post"],
        reversible: bool = False,
    ) -> None:
        super().__init__()
        recipe = not isinstance(attention, Attention)
        self.attention = attention if recipe else MultiHeadAttention(d_model, n_heads, attention)
        self.feed_forward = nn.Sequential(
            nn.Linear(d_model, d_ff), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.attention_norm, self.feed_forward_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm = norm
        self.reversible = reversible

    def _branch_input(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.norm == "pre" else x

    def _merge(self, x: Tensor, branch_out: Tensor, norm: nn.LayerNorm) -> Tensor:
        """The residual sum of a branch: x + branch before the norm ("pre"), normalised after ("post")."""
        return x + branch_out if self.norm == "pre" else norm(x + branch_out)

    def _attend(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None, state: State | None, return_state: bool,
        cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}  # mixers of plugins may not take it
        attended, state = self.attention(self._branch_input(x, self.attention_norm), causal, key_padding_mask, state,
                                         return_state, **packed)
        return self.dropout(attended), state

    def _attend_step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        attended, state = self.attention.step(self._branch_input(x_t, self.attention_norm), state)
        return self.dropout(attended), state

    def attention_branch(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, cu_seqlens: Tensor | None = None
    ) -> Tensor:
        """x (B, N, d_model) -> dropout(attention(norm(x))) (B, N, d_model); "post" norms after the residual sum."""
        return self._attend(x, causal, key_padding_mask, None, False, cu_seqlens)[0]

    def feed_forward_branch(self, x: Tensor) -> Tensor:
        """x (..., d_model) -> dropout(feed_forward(norm(x))) (..., d_model); "post" norms after the residual sum."""
        return self.dropout(self.feed_forward(self._branch_input(x, self.feed_forward_norm)))

    def reversible_block(
        self, causal: bool, key_padding_mask: Tensor | None = None, cu_seqlens: Tensor | None = None
    ) -> ReversibleBlock:
        """This layer's coupling of its two branches, for ``reversible_sequence``."""
        attention = partial(self.attention_branch, causal=causal, key_padding_mask=key_padding_mask,
                            cu_seqlens=cu_seqlens)
        return ReversibleBlock(attention, self.feed_forward_branch, tuple(self.parameters()))

    def _residuals(
        self, x: Stream, attend: Callable[[Tensor], tuple[Tensor, State | None]]
    ) -> tuple[Stream, State | None]:
        """Both residual branches on the stream x, the attention branch being ``attend`` (output, state)."""
        if self.reversible:
            x1, x2 = x
            attended, state = attend(x2)
            y1 = x1 + attended
            return (y1, x2 + self.feed_forward_branch(y1)), state
        attended, state = attend(x)
        x = self._merge(x, attended, self.attention_norm)
        return self._merge(x, self.feed_forward_branch(x), self.feed_forward_norm), state

    def forward(
        self, x: Stream, causal: bool, key_padding_mask: Tensor | None = None, state: State | None = None,
        return_state: bool = False, cu_seqlens: Tensor | None = None,
    ) -> tuple[Stream, State | None]:
        """x (B, N, d_model) -> (B, N, d_model) (a pair of them when reversible) and the attention's state
        after x (None without ``return_state``); ``cu_seqlens``: documents packed in one row."""
        return self._residuals(x, partial(self._attend, causal=causal, key_padding_mask=key_padding_mask, state=state,
                                          return_state=return_state, cu_seqlens=cu_seqlens))

    def step(self, x_t: Stream, state: State) -> tuple[Stream, State]:
        """x_t (B, d_model) (a pair of them when reversible) -> the same for the next position.

        ``state`` is the attention's.
        """
        return self._residuals(x_t, partial(self._attend_step, state=state))


class TransformerEncoder(nn.Module):
    """A stack of transformer layers whose attention is chosen by registry name, per layer in a hybrid stack.

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
                attention,
                config.feed_forward_dim,
                config.activation,
                config.dropout,
                config.norm,
                config.reversible,
            )
            for attention in build_mixers(config)
        )
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else nn.Identity()

    def forward(
        self, x: Tensor, causal: bool = True, key_padding_mask: Tensor | None = None,
        state: Sequence[State] | None = None, return_state: bool = False, cu_seqlens: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, tuple[State, ...]]:
        """x (B, N, d_model) -> (B, N, d_model). key_padding_mask (B, N) bool, True = padding.

        Args:
            x: (B, N, d_model) inputs.
            causal: position i attends to positions <= i only.
            key_padding_mask: (B, N) bool, True marks padding.
            state: the per-layer states of earlier positions (from ``forward(..., return_state=True)``,
                ``prefill`` or ``step``); causal only. None starts from an empty prefix.
            return_state: also return the per-layer states after the last position (a tuple, one
                attention state per layer), which ``step`` (or another ``forward``) continues.
            cu_seqlens: (D + 1,) int boundaries of D documents packed in x (1, N, d_model), rising from 0 to N:
                no layer reads across a document start, and states hold one entry per document (batch D).
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"TransformerEncoder: x must be (B, N, {self.d_model}), got {tuple(x.shape)}")
        if cu_seqlens is not None and x.shape[0] != 1:
            raise ValueError(f"TransformerEncoder: packed documents (cu_seqlens) are one row: x must be (1, N, "
                             f"{self.d_model}), got {tuple(x.shape)}")
        self._check_layer_count("TransformerEncoder", state)
        if self.config.reversible and state is None and not return_state:
            blocks = [layer.reversible_block(causal, key_padding_mask, cu_seqlens) for layer in self.layers]
            return self._output(reversible_sequence(blocks, x, x))  # activations recomputed in the backward
        stream, states = self._input(x), []
        for index, layer in enumerate(self.layers):
            stream, layer_state = layer(stream, causal, key_padding_mask, None if state is None else state[index],
                                        return_state, cu_seqlens)
            states.append(layer_state)
        return (self._output(stream), tuple(states)) if return_state else self._output(stream)

    def _input(self, x: Tensor) -> Stream:
        """The residual stream the first layer takes: x, or the pair (x, x) when reversible."""
        return (x, x) if self.config.reversible else x

    def _output(self, stream: Stream) -> Tensor:
        """The encoder's output from the last layer's stream: its final norm, of (Y1 + Y2) / 2 when reversible."""
        if self.config.reversible:
            y1, y2 = stream
            return self.final_norm((y1 + y2) / 2)
        return self.final_norm(stream)

    def _check_layer_count(self, owner: str, state: Sequence[State] | None) -> None:
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"{owner}: state has {len(state)} layers, model has {len(self.layers)}")

    def use_sequence_parallel(self, group: Any) -> None:
        """Run causal calls on this rank's consecutive part of sequences split across ``group`` (None: off).

        Every layer's attention then adds the state of the earlier ranks' positions (one all-gather of
        (C x M) states per layer); outputs equal the whole sequence's rows. Parameter gradients are
        this rank's share: sum them across the group (DDP does) for the whole sequence's.
        """
        for layer in self.layers:
            layer.attention.use_sequence_parallel(group)

    def prefill(self, x: Tensor, state: Sequence[State] | None = None) -> tuple[Tensor, tuple[State, ...]]:
        """Run a prompt x (B, N, d_model) in one parallel causal pass; its outputs and the states ``step`` continues."""
        return self.forward(x, causal=True, state=state, return_state=True)

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> tuple[State, ...]:
        """Empty recurrent state for ``batch_size`` sequences: one attention state per layer."""
        return tuple(layer.attention.init_state(batch_size, device, dtype) for layer in self.layers)

    def step(self, x_t: Tensor, state: Sequence[State]) -> tuple[Tensor, tuple[State, ...]]:
        """Next position: x_t (B, d_model) -> (B, d_model); equals row t of ``forward(causal=True)``."""
        if x_t.dim() != 2 or x_t.shape[-1] != self.d_model:
            raise ValueError(f"TransformerEncoder.step: x_t must be (B, {self.d_model}), got {tuple(x_t.shape)}")
        self._check_layer_count("TransformerEncoder.step", state)
        stream, states = self._input(x_t), []
        for layer, layer_state in zip(self.layers, state):
            stream, layer_state = layer.step(stream, layer_state)
            states.append(layer_state)
        return self._output(stream), tuple(states)
