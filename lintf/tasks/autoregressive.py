"""Causal token models: token embedding + positions -> causal encoder -> a registered output head.

The same weights run in parallel (``forward``, training) and one token at a time (``step``, the
RNN form of causal linear attention), which the copy and image tasks use to generate.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn

from lintf.attention.base import State
from lintf.data.tokenizers import Tokenizer
from lintf.hf.directory import start_from_directory
from lintf.hf.settings import task_settings
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import PositionKind, build_positions
from lintf.names import HeadName
from lintf.registry import ATTENTIONS, build_head
from lintf.tasks.base import TransformerTask


def require_causal_attention(name: str, task: str) -> None:
    """ValueError naming the causal attentions if attention ``name`` has no causal form."""
    if not getattr(ATTENTIONS.get(name), "supports_causal", True):
        causal = [n for n in ATTENTIONS.names() if getattr(ATTENTIONS.get(n), "supports_causal", True)]
        raise ValueError(f"{task} predicts each token from the ones before it, so its attention must be causal; "
                         f"{name!r} is not. Causal attentions: {', '.join(causal)}")


def require_vocabulary_in_memory(vocab_size: int, d_model: int) -> None:
    """ValueError if the token embedding and output head of ``vocab_size`` tokens cannot fit in this machine's memory.

    Checked before anything is allocated (or a tokenizer trained), where the request is still a number.
    """
    needed = 2 * vocab_size * d_model * torch.finfo(torch.float32).bits // 8  # embedding + head, float32
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no bound to check against
        return
    if needed > memory:
        raise ValueError(f"vocab_size {vocab_size} with d_model {d_model} needs {needed / 2**30:,.0f} GiB for the "
                         f"token embedding and output head alone; this machine has {memory / 2**30:,.0f} GiB of "
                         "memory. Choose a smaller vocab_size (BPE vocabularies of 4096 to 65536 tokens are usual).")


class AutoregressiveTask(TransformerTask):
    """A causal next-token model on a registry-built encoder; subclasses add the task's loss and metrics.

    Args:
        vocab_size: number of token ids; linked from the data module (do not set it by hand).
        max_length: longest sequence in tokens; linked from the data module.
        encoder: the encoder stack (width, depth, attention and feature map by registry name, ...).
        positions: "learned" (one embedding per position), fixed "sinusoidal" codes, or "raster": a
            learned row embedding plus a learned column embedding shared by every row (needs
            ``row_bytes``; for sequences laid out in rows, such as images).
        row_bytes: positions per row for "raster" positions (28 for MNIST, 96 for CIFAR-10).
        optimizer: optimizer class and arguments, e.g. ``{class_path: torch.optim.RAdam, init_args: {lr: 1e-3}}``.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
        head: output-head registry name (``lintf.list_heads()``): the distribution over the
            vocabulary that ``forward`` parameterises ("categorical" = logits).
        head_kwargs: extra arguments of the head, e.g. ``{n_components: 10}``.
        init_from: a Hugging Face directory of a lintf model (``lintf export``) to start from: its weights,
            and its tokenizer for the data. Its model must be the configured one; what differs is listed.
    """

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        encoder: EncoderConfig = EncoderConfig(),
        positions: PositionKind = "learned",
        row_bytes: int | None = None,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        head: HeadName = HeadName("categorical"),
        head_kwargs: dict[str, Any] | None = None,
        init_from: str | None = None,
    ) -> None:
        if vocab_size < 1 or max_length < 1:
            raise ValueError(f"vocab_size and max_length must be >= 1, got {vocab_size} and {max_length}")
        for name in dict.fromkeys(EncoderConfig.coerce(encoder).attention_per_layer):
            require_causal_attention(name, type(self).__name__)
        require_vocabulary_in_memory(vocab_size, EncoderConfig.coerce(encoder).d_model)
        super().__init__(encoder, optimizer, lr_scheduler)
        if "head" in self.hparams:  # a plain string in checkpoints (tasks that fix their head do not list it)
            self.hparams["head"] = str(head)
        self.token_embedding = nn.Embedding(vocab_size, self.d_model)
        self.positions = build_positions(positions, max_length, self.d_model, row_bytes)
        self.head = build_head(str(head), self.d_model, n_values=vocab_size, **(head_kwargs or {}))
        self.max_length = max_length
        self.build_metrics()
        self.init_tokenizer: Tokenizer | None = None
        """The tokenizer of ``init_from``'s directory, which the data module is given (``setup``)."""
        if init_from is not None:
            self.init_tokenizer = start_from_directory(self, task_settings(self), init_from)
        self.hparams.pop("init_from", None)  # the weights are the checkpoint's from here on, not the directory's

    def setup(self, stage: str) -> None:
        """Read the data with ``init_from``'s tokenizer, so its ids are those the weights were trained on."""
        datamodule = self.attached_datamodule
        if self.init_tokenizer is not None and hasattr(datamodule, "use_tokenizer"):
            datamodule.use_tokenizer(self.init_tokenizer)

    def forward(
        self, tokens: Tensor, key_padding_mask: Tensor | None = None, state: Sequence[State] | None = None,
        return_state: bool = False, start: int = 0, cu_seqlens: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, tuple[State, ...]]:
        """Causal next-token head parameters: tokens (B, N) int -> (B, N, P) (categorical: logits).

        Args:
            tokens: (B, N) token ids.
            key_padding_mask: (B, N) bool, True marks padding.
            state: per-layer states of the positions before ``tokens`` (``return_state`` of an earlier
                call, ``prefill`` or ``step``); None: the sequence starts here.
            return_state: also return the per-layer states after the last token.
            start: position of the first token (for position codes when continuing a sequence).
            cu_seqlens: (D + 1,) int boundaries of D documents packed in tokens (1, N): positions restart at
                each document and no token reads another document; states hold one entry per document.
        """
        if cu_seqlens is None:
            codes = self.positions.span(start, tokens.shape[1])  # (N, d_model)
        elif start != 0:
            raise ValueError(f"packed documents (cu_seqlens) start at position 0 each, got start={start}")
        else:
            codes = self.positions.documents(cu_seqlens, tokens.shape[1])  # (N, d_model), restarting per document
        x = self.token_embedding(tokens) + codes  # (B, N, d_model)
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        if not return_state:
            return self.head(self.encoder(x, causal=True, key_padding_mask=key_padding_mask, state=state, **packed))
        hidden, state = self.encoder(x, causal=True, key_padding_mask=key_padding_mask, state=state, return_state=True,
                                     **packed)
        return self.head(hidden), state

    def prefill(self, tokens: Tensor) -> tuple[Tensor, tuple[State, ...]]:
        """Read a prompt (B, N) in one parallel pass: head parameters (B, N, P) and the state ``step`` continues at N."""
        return self.forward(tokens, return_state=True)

    def init_state(self, batch_size: int) -> tuple[State, ...]:
        """Empty recurrent state for ``step``."""
        return self.encoder.init_state(batch_size, device=self.device, dtype=self.token_embedding.weight.dtype)

    def step(self, token: Tensor, position: int, state: Sequence[State]) -> tuple[Tensor, tuple[State, ...]]:
        """RNN form of ``forward``: token (B,) at ``position`` -> next-token head parameters (B, P)."""
        return self.advance(self.step_input(token, position), state)

    def step_input(self, token: Tensor, position: int) -> Tensor:
        """The encoder's input for token (B,) at ``position``: its embedding plus the position's code, (B, d_model)."""
        return self.token_embedding(token) + self.positions.at(position)

    def advance(self, x_t: Tensor, state: Sequence[State]) -> tuple[Tensor, tuple[State, ...]]:
        """One position through the encoder and head: x_t (B, d_model) -> head parameters (B, P) and the next state.

        The part of ``step`` that does not depend on the position, so a compiled copy of it
        (``lintf.generation.stepping``) serves every position.
        """
        out, state = self.encoder.step(x_t, state)
        return self.head(out), state
