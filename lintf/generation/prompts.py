"""Each autoregressive task's prompt and output as text: a tokenizer's text, copy symbols, image bytes.

A ``PromptFormat`` turns the ``--prompt`` text into token ids (a ValueError naming what it cannot
read and what is allowed) and generated ids back into text, piece by piece as they come.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from lintf.data.copy import FIRST_SYMBOL, PAD, SEP
from lintf.data.images import IMAGE_SHAPES
from lintf.data.tokenizers import Tokenizer, tokenizer_from_checkpoint
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.copy import CopyTask
from lintf.tasks.image_generation import ImageGenerationTask

REPLACEMENT = "\ufffd"
"""What a tokenizer decodes an incomplete UTF-8 character to: such a piece waits for the next token."""


class PromptFormat:
    """Prompt text -> token ids, and generated ids -> text pieces (one decoder per sample stream)."""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def piece(self, pending: list[int]) -> str | None:
        """Text of the ids generated since the last piece, or None while they end inside a character."""
        raise NotImplementedError


class TextFormat(PromptFormat):
    """Text read and written with the tokenizer stored in the checkpoint.

    Args:
        tokenizer: the checkpoint's tokenizer.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def piece(self, pending: list[int]) -> str | None:
        text = self.tokenizer.decode(pending)
        return None if text.endswith(REPLACEMENT) and len(pending) < 4 else text  # a UTF-8 character has <= 4 bytes


class SymbolFormat(PromptFormat):
    """The copy task's sequences: symbols as indices ``0 .. n_symbols-1``; the separator is appended to the prompt.

    Args:
        n_symbols: distinct symbols of the checkpoint's vocabulary.
    """

    def __init__(self, n_symbols: int) -> None:
        self.n_symbols = n_symbols

    def encode(self, text: str) -> list[int]:
        words = text.split()
        bad = [word for word in words if not (word.isdigit() and int(word) < self.n_symbols)]
        if bad:
            raise ValueError(f"the copy task's prompt is symbols 0..{self.n_symbols - 1} separated by spaces (e.g. "
                             f"'3 1 4 1 5'), got {', '.join(repr(word) for word in bad[:5])}")
        return [FIRST_SYMBOL + int(word) for word in words] + ([SEP] if words else [])

    def piece(self, pending: list[int]) -> str:
        names = {PAD: "PAD", SEP: "SEP"}
        return "".join(f"{names.get(token, token - FIRST_SYMBOL)} " for token in pending)


class ByteFormat(PromptFormat):
    """An image's leading bytes in raster order, 0..255 separated by spaces; the output is a PNG grid.

    Args:
        image_shape: (height, width, channels) of the images the checkpoint models.
    """

    def __init__(self, image_shape: tuple[int, int, int]) -> None:
        self.image_shape = image_shape

    def encode(self, text: str) -> list[int]:
        words = text.split()
        bad = [word for word in words if not (word.isdigit() and int(word) <= 255)]
        if bad:
            raise ValueError(f"an image model's prompt is its first bytes in raster order, 0..255 separated by "
                             f"spaces (e.g. '0 0 0'), got {', '.join(repr(word) for word in bad[:5])}")
        return [int(word) for word in words]

    def piece(self, pending: list[int]) -> str:
        return ""


def image_shape_of(max_length: int, checkpoint: dict[str, Any]) -> tuple[int, int, int]:
    """The (H, W, C) of the images a checkpoint's model was trained on: its data module's dataset, else the one
    of its size (``max_length`` + 1 bytes)."""
    dataset = (checkpoint.get("datamodule_hyper_parameters") or {}).get("dataset")
    if dataset in IMAGE_SHAPES:
        return IMAGE_SHAPES[dataset]
    length = max_length + 1
    for shape in IMAGE_SHAPES.values():
        if shape[0] * shape[1] * shape[2] == length:
            return shape
    raise ValueError(f"cannot tell the image shape of a checkpoint whose images have {length} bytes and no dataset "
                     f"of {', '.join(IMAGE_SHAPES)} recorded")


def prompt_format(task_class: type[AutoregressiveTask], settings: ModelSettings,
                  checkpoint: dict[str, Any]) -> PromptFormat:
    """How a model of ``task_class`` with ``settings`` (its checkpoint's) reads a prompt and shows its output."""
    if issubclass(task_class, ImageGenerationTask):
        return ByteFormat(image_shape_of(settings.max_length, checkpoint))
    if issubclass(task_class, CopyTask):
        return SymbolFormat(settings.vocab_size - FIRST_SYMBOL)
    return TextFormat(tokenizer_from_checkpoint(checkpoint))


@dataclass(frozen=True)
class ModelSettings:
    """What a generating model's checkpoint says about its inputs, read before the model is built.

    Args:
        vocab_size: number of token ids.
        max_length: positions the model was trained on.
        positions: its position codes ("none": no limit on the length it reads).
    """

    vocab_size: int
    max_length: int
    positions: str

    @classmethod
    def of(cls, task_class: type[AutoregressiveTask], checkpoint: dict[str, Any]) -> ModelSettings:
        """The settings in ``checkpoint``'s hyper-parameters, the class's defaults where it records none."""
        hparams = checkpoint.get("hyper_parameters") or {}
        defaults = inspect.signature(task_class.__init__).parameters
        positions = hparams.get("positions", defaults["positions"].default if "positions" in defaults else "learned")
        try:
            return cls(int(hparams["vocab_size"]), int(hparams["max_length"]), str(positions))
        except (KeyError, TypeError, ValueError):
            raise ValueError("the checkpoint's hyper_parameters lack a whole-number vocab_size and max_length: "
                             "pass a checkpoint a lintf run saved") from None
