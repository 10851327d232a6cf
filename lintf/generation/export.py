"""``lintf export``: a token model's checkpoint as a Hugging Face model directory (``lintf.hf``).

The checkpoint is found and rebuilt as ``lintf generate`` finds and rebuilds it (``checkpoint.py``);
``lintf.hf.export.write_directory`` writes the directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lintf.data.tokenizers import TOKENIZER_KEY, tokenizer_from_checkpoint
from lintf.generation.checkpoint import build_task, find_generating_checkpoint
from lintf.hf.export import write_directory
from lintf.run.commands import CommandError


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
