"""``lintf export``: a token model's checkpoint as a Hugging Face model directory.

The directory holds ``config.json`` (``model_type: lintf``: the encoder's settings, positions, the
vocabulary size), ``model.safetensors``, ``generation_config.json`` and, for a text model, its
tokenizer. ``AutoModelForCausalLM.from_pretrained(DIR)`` reads it once ``lintf`` is imported, and
``lintf fit --model.init_from DIR`` trains on from it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lintf.data.tokenizers import TOKENIZER_KEY, Tokenizer, tokenizer_from_checkpoint
from lintf.generation.checkpoint import build_task, find_generating_checkpoint
from lintf.hf.settings import CONFIG_NAMES, model_weights, task_settings
from lintf.run.commands import CommandError


def write_directory(task: Any, tokenizer: Tokenizer | None, output: str) -> None:
    """Write ``task``'s model (and ``tokenizer``) as a Hugging Face directory at ``output``.

    Args:
        task: an ``AutoregressiveTask`` whose head gives logits (categorical).
        tokenizer: the text model's tokenizer; None for models of symbols or bytes.
        output: the directory to write (created).
    """
    from lintf.hf.configuration import LintfConfig
    from lintf.hf.modeling import DIRECTORY_HEADS, LintfForCausalLM
    from lintf.hf.tokenization import save_tokenizer

    settings = task_settings(task)
    if settings["head"] not in DIRECTORY_HEADS:
        raise CommandError(
            f"this {type(task).__name__} has a {settings['head']!r} head, whose parameters are not logits over the "
            f"vocabulary, and transformers' generate and pipeline choose tokens from logits; lintf export writes "
            f"models with a {' or '.join(DIRECTORY_HEADS)} head (train one with --model.head categorical)")
    config = LintfConfig(**{CONFIG_NAMES.get(key, key): value for key, value in settings.items()},
                         task=type(task).__name__)
    model = LintfForCausalLM(config)
    model.load_state_dict(model_weights(task))  # strict: the same modules under the same names
    model.eval().save_pretrained(output)
    if tokenizer is not None:
        save_tokenizer(tokenizer, output)


def export(ckpt_path: str, output: str, root: str = ".") -> None:
    """Write a checkpoint of a token model (text, copy, image with a categorical head) as a Hugging Face directory.

    The directory (config.json, model.safetensors, generation_config.json and the tokenizer) loads with
    ``AutoModelForCausalLM.from_pretrained(DIR)`` and ``pipeline("text-generation", model=DIR)`` once
    lintf is imported, without trust_remote_code, and trains on with ``lintf fit --model.init_from DIR``.

    Args:
        ckpt_path: a .ckpt file, or 'last' / 'best': the newest of an autoregressive task under --root.
        output: the directory to write; it must not exist yet or be empty.
        root: the directory searched for 'last' and 'best'.
    """
    target = Path(output)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CommandError(f"--output {output} exists and is not an empty directory; give a new directory so no "
                           "file of another model is mixed into it")
    path, checkpoint, task_class = find_generating_checkpoint(ckpt_path, root)
    task = build_task(path, checkpoint, task_class)
    tokenizer = tokenizer_from_checkpoint(checkpoint) if TOKENIZER_KEY in checkpoint else None
    write_directory(task, tokenizer, output)
    print(f"wrote {target.resolve()} ({task_class.__name__}, {'with its tokenizer' if tokenizer else 'no tokenizer'})",
          file=sys.stderr)
