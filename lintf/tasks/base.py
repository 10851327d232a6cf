"""The base of every lintf task: tokens -> embedding + positions -> TransformerEncoder -> logits.

Tasks (copy, image generation, speech) subclass ``TransformerTask`` and add their loss, metrics
and ``predict_step``. The encoder is built from registry names, so ``--model.attention`` and
``--model.feature_map`` switch the attention of every task without touching code.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn

from lintf.attention.base import State
from lintf.models.transformer import TransformerEncoder
from lintf.registry import build_head
from lintf.tasks.names import AttentionName, FeatureMapName, HeadName


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """Fixed sin/cos position codes (Vaswani et al. 2017): (length, dim)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    codes = torch.zeros(length, dim)
    codes[:, 0::2] = torch.sin(position * frequency)
    codes[:, 1::2] = torch.cos(position * frequency[: dim // 2])
    return codes


class TransformerTask(LightningModule):
    """A causal token model on a registry-built TransformerEncoder; subclasses add the task.

    Args:
        vocab_size: number of token ids; linked from the data module (do not set it by hand).
        max_length: longest sequence in tokens; linked from the data module.
        d_model: model width.
        n_layers: transformer layers.
        n_heads: attention heads; must divide d_model.
        attention: attention registry name (``lintf.list_attentions()``) or a registered class path.
        attention_kwargs: extra arguments of that attention, e.g. ``{n_hashes: 4}`` for reformer.
        feature_map: feature-map registry name for attentions that take one (linear); None keeps
            the attention's default.
        feature_map_kwargs: extra arguments of the feature map, e.g. ``{n_features: 64}``.
        d_ff: feed-forward hidden size; None uses 4 * d_model.
        activation: feed-forward non-linearity.
        dropout: dropout probability.
        norm: LayerNorm placement.
        positions: "learned" position embeddings or fixed "sinusoidal" codes.
        optimizer: optimizer class and arguments, e.g. ``{class_path: torch.optim.RAdam, init_args: {lr: 1e-3}}``.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
        head: output-head registry name (``lintf.list_heads()``): the distribution over the
            vocabulary that ``forward`` parameterises ("categorical" = logits).
        head_kwargs: extra arguments of the head, e.g. ``{n_components: 10}``.
    """

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        d_model: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
        attention: AttentionName = AttentionName("linear"),
        attention_kwargs: dict[str, Any] | None = None,
        feature_map: FeatureMapName | None = None,
        feature_map_kwargs: dict[str, Any] | None = None,
        d_ff: int | None = None,
        activation: Literal["gelu", "relu", "silu"] = "gelu",
        dropout: float = 0.1,
        norm: Literal["pre", "post"] = "pre",
        positions: Literal["learned", "sinusoidal"] = "learned",
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        head: HeadName = HeadName("categorical"),
        head_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if vocab_size < 1 or max_length < 1:
            raise ValueError(f"vocab_size and max_length must be >= 1, got {vocab_size} and {max_length}")
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        self.optimizer_factory, self.lr_scheduler_factory = optimizer, lr_scheduler
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.position_embedding = nn.Parameter(torch.randn(max_length, d_model) * 0.02)
        else:
            self.register_buffer("position_embedding", sinusoidal_positions(max_length, d_model), persistent=False)
        self.encoder = TransformerEncoder(
            d_model, n_layers, n_heads, str(attention), attention_kwargs,
            None if feature_map is None else str(feature_map), feature_map_kwargs, d_ff, activation, dropout, norm,
        )
        self.head = build_head(str(head), d_model, n_values=vocab_size, **(head_kwargs or {}))
        self.max_length = max_length
        self.build_metrics()

    def position_table(self) -> Tensor:
        """(max_length, d_model) position codes added to the token embeddings."""
        return self.position_embedding

    def build_metrics(self) -> None:
        """Create the task's torchmetrics modules (called at the end of ``__init__``)."""

    def forward(self, tokens: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Causal next-token head parameters: tokens (B, N) int -> (B, N, P) (categorical: logits)."""
        if tokens.shape[1] > self.max_length:
            raise ValueError(f"sequence of {tokens.shape[1]} tokens exceeds max_length={self.max_length}")
        x = self.token_embedding(tokens) + self.position_table()[: tokens.shape[1]]  # (B, N, d_model)
        return self.head(self.encoder(x, causal=True, key_padding_mask=key_padding_mask))

    def init_state(self, batch_size: int) -> list[State]:
        """Empty recurrent state for ``step``."""
        return self.encoder.init_state(batch_size, device=self.device, dtype=self.token_embedding.weight.dtype)

    def step(self, token: Tensor, position: int, state: list[State]) -> tuple[Tensor, list[State]]:
        """RNN form of ``forward``: token (B,) at ``position`` -> next-token head parameters (B, P)."""
        x_t = self.token_embedding(token) + self.position_table()[position]  # (B, d_model)
        out, state = self.encoder.step(x_t, state)
        return self.head(out), state

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.lr_scheduler_factory is None:
            return optimizer
        scheduler = self.lr_scheduler_factory(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["lintf_task"] = f"{type(self).__module__}.{type(self).__qualname__}"
