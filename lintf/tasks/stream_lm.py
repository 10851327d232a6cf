"""Language modelling over long text streams (characters, bytes or BPE tokens), with the recurrent state carried.

Truncated backpropagation through time in O(1) memory: each training batch is the next segment of
every stream (``lintf.data.TextStreamData``), and the task starts it from the state the previous
segment left (detached, so gradients stop at the segment boundary), as Transformer-XL carries its
memory, but as one (C x M) state per head instead of a cache of past activations. Evaluation reads
contexts of any length in one parallel pass, which equals reading them segment by segment with the
state carried, because causal linear attention is an RNN.

Batches of packed documents (``lintf.data.PackedTextData``: ``inputs``, ``targets`` and ``cu_seqlens``)
are read as one packed row, every document from an empty state with its positions from 0; no state
is carried between them (``between_segments`` applies to streams), and targets that begin a document
(``IGNORE``) are not predicted.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.data.text_documents import IGNORE
from lintf.data.tokenizers import TOKENIZER_KEY, tokenizer_from_checkpoint
from lintf.metrics import BitsPerDim
from lintf.models.encoder_config import EncoderConfig
from lintf.models.positions import PositionKind
from lintf.tasks.autoregressive import AutoregressiveTask

Batch = dict[str, Any]


def detach_state(state: Any) -> Any:
    """``state`` (a tuple of per-layer NamedTuple states) with every tensor detached from the graph."""
    if isinstance(state, Tensor):
        return state.detach()
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # a NamedTuple keeps its type
        return type(state)(*(detach_state(value) for value in state))
    if isinstance(state, tuple):
        return tuple(detach_state(value) for value in state)
    return state


class StreamLanguageModelTask(AutoregressiveTask):
    """Next-token prediction over text streams; bits per character.

    Batches come from ``lintf.data.TextStreamData``. ``predict`` scores each context of the test part
    (``predictions.jsonl``: start, tokens, characters, bits_per_token, bits_per_char).

    Args:
        vocab_size: token ids of the text's tokenizer; linked from the data module.
        max_length: the longest sequence read in one call; linked from the data module.
        encoder: the encoder stack; its attention must be causal with a recurrent state.
        positions: position codes; "none" (the default) lets a stream continue past any length.
        between_segments: "carry" starts each training segment from the state the stream's previous
            segment left (truncated BPTT); "reset" starts every segment from an empty state.
        optimizer: optimizer class and arguments.
        lr_scheduler: learning-rate scheduler stepped every optimizer update; None keeps the rate fixed.
        init_from: a Hugging Face directory of a lintf model (``lintf export``) to start from: its weights,
            and its tokenizer for the text. Its model must be the configured one; what differs is listed.
    """

    prediction_metrics = ("bits_per_char",)

    def __init__(
        self,
        vocab_size: int,
        max_length: int,
        encoder: EncoderConfig = EncoderConfig(d_model=128, n_layers=4, n_heads=4, dropout=0.0),
        positions: PositionKind = "none",
        between_segments: Literal["carry", "reset"] = "carry",
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        init_from: str | None = None,
    ) -> None:
        if between_segments not in ("carry", "reset"):
            raise ValueError(f"between_segments must be 'carry' or 'reset', got {between_segments!r}")
        super().__init__(vocab_size, max_length, encoder, positions, None, optimizer, lr_scheduler,
                         init_from=init_from)
        caching = sorted({type(m).__name__ for m in self.modules() if isinstance(m, Attention) and m.cache_entries})
        if between_segments == "carry" and caching:
            raise ValueError(
                f"between_segments='carry' needs a state of fixed size, but attention {encoder.attention!r} "
                f"({', '.join(caching)}) keeps a cache of past keys and values that would grow with every segment "
                "of a stream until memory runs out; use --model.between_segments reset, or an attention with a "
                "recurrent state (linear, gated_linear, retention, gla, delta_net, ...)")
        self.stream_state: tuple[State, ...] | None = None

    def build_metrics(self) -> None:
        self.val_bits, self.test_bits = BitsPerDim(), BitsPerDim()

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        if "cu_seqlens" in batch:  # packed documents: each starts afresh, so nothing is carried
            self.stream_state = None
            nll, predicted = self._packed_nll(batch)
            loss = nll.sum() / predicted.sum().clamp_min(1)
            rows = batch["start"].numel()
            self.log("train/loss", loss, prog_bar=True, batch_size=rows)
            self.log("train/bits_per_token", loss / math.log(2), batch_size=rows)
            return loss
        tokens = batch["tokens"]  # (B, T + 1): inputs and next tokens
        carry = self.hparams.between_segments == "carry"
        if batch["first"] or not carry:
            self.stream_state = None
        # "reset" asks for no state, so softmax reads a segment with SDPA's causal kernel and keeps no KV cache
        output = self(tokens[:, :-1], state=self.stream_state, return_state=carry)
        logits, state = output if carry else (output, None)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        self.stream_state = detach_state(state) if carry else None
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/bits_per_token", loss / math.log(2))
        return loss

    def on_train_epoch_start(self) -> None:
        self.stream_state = None

    def _nll(self, tokens: Tensor) -> Tensor:
        """NLL in nats (b, L) of each next token of whole contexts (b, L + 1), each read from an empty state."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.float().transpose(1, 2), tokens[:, 1:], reduction="none")

    def _packed_nll(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """NLL in nats (1, N) of each target of a packed batch (0 where not predicted), and (1, N) bool: predicted."""
        targets = batch["targets"]  # (1, N)
        logits = self(batch["inputs"], cu_seqlens=batch["cu_seqlens"])  # (1, N, V)
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, ignore_index=IGNORE, reduction="none")
        return nll, targets != IGNORE

    def _evaluate(self, batch: Batch, stage: str, metric: BitsPerDim) -> None:
        if "cu_seqlens" in batch:
            nll, predicted = self._packed_nll(batch)  # (1, N)
            metric.update(nll, mask=predicted, dims=batch["characters"].sum())
            rows = batch["start"].numel()
            self.log(f"{stage}/loss", nll.sum() / predicted.sum().clamp_min(1), prog_bar=True, sync_dist=True,
                     batch_size=rows)
            self.log(f"{stage}/bits_per_char", metric, prog_bar=True, batch_size=rows)
            return
        nll = self._nll(batch["tokens"])  # (b, L)
        characters = batch["characters"].sum() if "characters" in batch else None  # else one token per character
        metric.update(nll, dims=characters)
        self.log(f"{stage}/loss", nll.mean(), prog_bar=True, sync_dist=True, batch_size=nll.shape[0])
        self.log(f"{stage}/bits_per_char", metric, prog_bar=True, batch_size=nll.shape[0])

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_bits)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_bits)

    def predict_step(self, batch: Batch, batch_idx: int) -> list[dict[str, Any]]:
        """One row per context of the test part: where it starts, its tokens and characters, bits per token and char.

        A packed batch gives one row per row of documents; its tokens are the predicted ones.
        """
        if "cu_seqlens" in batch:
            nll, predicted = self._packed_nll(batch)
            rows = batch["start"].numel()
            bits = nll.view(rows, -1).sum(dim=1) / math.log(2)  # (b,)
            lengths = predicted.view(rows, -1).sum(dim=1).tolist()
        else:
            bits = self._nll(batch["tokens"]).sum(dim=1) / math.log(2)  # (b,)
            lengths = [batch["tokens"].shape[1] - 1] * len(bits)
        return [{"start": int(start), "tokens": length, "characters": int(characters),
                 "bits_per_token": float(total) / max(length, 1), "bits_per_char": float(total) / max(int(characters), 1)}
                for start, length, characters, total in zip(batch["start"], lengths, batch["characters"], bits)]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the data module's tokenizer with the weights, so the checkpoint reads and writes text by itself."""
        super().on_save_checkpoint(checkpoint)
        tokenizer = getattr(self.attached_datamodule, "tokenizer", None)
        if tokenizer is not None:
            checkpoint[TOKENIZER_KEY] = tokenizer.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give the data module the checkpoint's tokenizer: a resumed or evaluated run reads the ids it trained on."""
        datamodule = self.attached_datamodule
        if TOKENIZER_KEY in checkpoint and hasattr(datamodule, "use_tokenizer"):
            datamodule.use_tokenizer(tokenizer_from_checkpoint(checkpoint))
