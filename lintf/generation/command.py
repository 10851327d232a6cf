"""``lintf generate``: text, copies or images from an autoregressive task's checkpoint.

The prompt is read in one parallel pass (``prefill``); every later token comes from the recurrent
``step`` in constant memory and is printed as soon as it is chosen. Image models write a PNG grid
into the run's ``samples/`` folder. Progress notes and the closing line (prompt tokens, generated
tokens, tokens/s, peak memory) go to stderr, so stdout holds the generated text alone.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from lintf.generation.checkpoint import build_task, find_generating_checkpoint
from lintf.generation.prompts import (
    ByteFormat,
    ModelSettings,
    PromptFormat,
    SymbolFormat,
    prompt_format,
)
from lintf.generation.stepping import CompiledStep
from lintf.generation.streaming import stream_tokens
from lintf.layout.directories import (
    reserve_run_directory,
    run_directory_of,
    unused_path,
)
from lintf.layout.run_names import checkpoint_run_name
from lintf.plugins import PluginError, load_plugins
from lintf.run.commands import CommandError
from lintf.run.run_config import require_run_plugins
from lintf.sampling import Sampling, StepFunction
from lintf.tasks.autoregressive import AutoregressiveTask
from lintf.tasks.image_samples import sample_images, save_grid

DEFAULT_NEW_TOKENS = 200
"""New tokens of a text model when --max_new_tokens is not given (copies: the prompt's length; images: the rest)."""


@dataclass
class Request:
    """A vetted ``lintf generate`` call: the task, the prompt as ids and how much to generate."""

    task: AutoregressiveTask
    prompt_format: PromptFormat
    prompt: list[int]
    new_tokens: int
    run_directory: Path | None


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_prompt(prompt: str | None, prompt_file: str | None, prompt_format: PromptFormat) -> list[int]:
    """The prompt's token ids; CommandError for a missing, doubled or empty prompt."""
    if prompt is not None and prompt_file is not None:
        raise CommandError("give the prompt once: --prompt TEXT or --prompt_file FILE, not both")
    if prompt_file is not None:
        try:
            prompt = Path(prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"--prompt_file {prompt_file} cannot be read as UTF-8 text: "
                               f"{getattr(error, 'strerror', None) or error}") from None
    if prompt is None and isinstance(prompt_format, ByteFormat):
        prompt = "0"  # an image's first byte is never predicted: unconditional samples start from 0
    if prompt is None:
        raise CommandError("give a prompt: --prompt TEXT or --prompt_file FILE")
    ids = prompt_format.encode(prompt)
    if not ids:
        raise CommandError(f"the prompt {prompt!r} is empty; give at least one token of text (a copy model: at least "
                           "one symbol; an image model: at least one byte)")
    return ids


def new_token_count(settings: ModelSettings, fmt: PromptFormat, prompt: list[int], max_new_tokens: int | None) -> int:
    """--max_new_tokens, or its default, checked against what the model can read (before it is built)."""
    if max_new_tokens is not None and max_new_tokens < 1:
        raise CommandError(f"--max_new_tokens must be >= 1, got {max_new_tokens}")
    if isinstance(fmt, ByteFormat):
        free_bytes = fmt.image_shape[0] * fmt.image_shape[1] * fmt.image_shape[2] - len(prompt)
        if free_bytes < 1 or (max_new_tokens or 0) > free_bytes:
            raise CommandError(f"an image holds {free_bytes + len(prompt)} bytes: a prompt of {len(prompt)} leaves "
                               f"space for {max(free_bytes, 0)} new ones, got --max_new_tokens {max_new_tokens}")
        return max_new_tokens or free_bytes
    count = max_new_tokens or (len(prompt) - 1 if isinstance(fmt, SymbolFormat) else DEFAULT_NEW_TOKENS)
    if settings.positions != "none" and len(prompt) + count - 1 > settings.max_length:
        raise CommandError(
            f"a prompt of {len(prompt)} tokens and {count} new ones exceed this model's {settings.max_length} "
            f"positions (its {settings.positions} position codes end there): give --max_new_tokens "
            f"{max(settings.max_length + 1 - len(prompt), 0)} or fewer, or a shorter prompt")
    return count


def output_directory(path: str, root: str, checkpoint: dict[str, Any]) -> Path:
    """Where generated files go: the run that holds checkpoint ``path``, or, for a checkpoint from elsewhere or a
    run that cannot be written, a new run directory under ``root`` named as the checkpoint's run would be
    (``lightning_logs/copy-linear/version_N``; absolute).

    Args:
        path: the checkpoint file.
        root: the directory that receives a new run directory.
        checkpoint: the checkpoint as read (its task's and data's settings name the new directory).
    """
    run = run_directory_of(path)
    if run is not None and os.access(run, os.W_OK):
        return Path(run)
    return Path(reserve_run_directory(os.path.abspath(root), checkpoint_run_name(checkpoint)))


def steps_for(task: AutoregressiveTask, compile: bool, batch: int) -> StepFunction:
    """The step function: ``task.step``, or compiled for ``batch`` sequences (now, so timings exclude it)."""
    if not compile:
        return task.step
    start, step = time.perf_counter(), CompiledStep(task)
    with torch.inference_mode():
        step(torch.zeros(batch, dtype=torch.long, device=task.device), 0, task.init_state(batch))
    note(f"compiled the step in {time.perf_counter() - start:.1f} s" if step.compiled else "running the eager step")
    return step


def stream_sample(request: Request, sampling: Sampling, generator: torch.Generator, step: StepFunction,
                  copy: TextIO | None = None) -> None:
    """One sample generated token by token, each piece written to stdout (and ``copy``) as it comes."""
    fmt, pending = request.prompt_format, []

    def show(text: str) -> None:
        print(text, end="", flush=True)
        if copy is not None:
            copy.write(text)

    show(fmt.piece(request.prompt) or "")
    for token in stream_tokens(request.task, request.prompt, request.new_tokens, sampling, generator, step):
        pending.append(token)
        piece = fmt.piece(pending)
        if piece is not None:
            show(piece)
            pending.clear()
    print(flush=True)


def write_image_grid(request: Request, sampling: Sampling, generator: torch.Generator, step: StepFunction,
                     num_samples: int, output: str | None, seed: int) -> None:
    """``num_samples`` images in one batch, saved as a PNG grid in the run's samples/ folder; its path printed."""
    samples = sample_images(request.task, request.prompt_format.image_shape, request.prompt, request.new_tokens,
                            num_samples, sampling, generator, step)
    path = Path(unused_path(str(request.run_directory / "samples" / (output or f"generate-seed{seed}.png"))))
    caption = (f"{num_samples} samples, seed {seed}: the first {samples.given} bytes given, {request.new_tokens} "
               "generated")
    save_grid(samples, path, caption)
    print(path, flush=True)


def samples_file(request: Request, output: str | None) -> TextIO | None:
    """The file in the run's samples/ folder that receives the text as it is generated, or None without --output."""
    if not output:
        return None
    path = Path(unused_path(str(request.run_directory / "samples" / output)))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", encoding="utf-8")


def write_samples(request: Request, sampling: Sampling, generator: torch.Generator, step: StepFunction,
                  num_samples: int, output: str | None) -> None:
    """``num_samples`` texts streamed to stdout and, with ``output``, to a file (blank line between samples)."""
    copy = samples_file(request, output)
    try:
        for index in range(num_samples):
            if num_samples > 1:
                print(f"--- sample {index + 1} of {num_samples} ---", flush=True)
            if copy is not None and index:
                copy.write("\n\n")
            stream_sample(request, sampling, generator, step, copy)
    finally:
        if copy is not None:
            copy.write("\n")
            copy.close()
            note(f"wrote {copy.name}")


def generate(
    ckpt_path: str,
    prompt: str | None = None,
    prompt_file: str | None = None,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    seed: int = 0,
    num_samples: int = 1,
    root: str = ".",
    output: str | None = None,
    compile: bool = False,
    plugins: tuple[str, ...] = (),
) -> None:
    """Generate from the checkpoint of an autoregressive task: text, copies, or images (a PNG grid).

    The prompt is read in one parallel pass; then each token comes from the recurrent step in constant
    memory and is printed as it is chosen. The same seed gives the same output.

    Args:
        ckpt_path: a .ckpt file, or 'last' / 'best': the newest of an autoregressive task under --root.
        prompt: the text to continue (a copy model: symbols such as '3 1 4'; an image model: leading
            bytes such as '0 0 0', default '0').
        prompt_file: a UTF-8 file holding the prompt, instead of --prompt.
        max_new_tokens: tokens to generate (default: 200 for text, the prompt's length for a copy, the
            rest of the image for an image model).
        temperature: 0 picks the most likely token (greedy); above 0 samples, sharper below 1.
        top_k: sample only among the k most likely tokens (default: all).
        top_p: sample only among the most likely tokens that hold this share of probability (0, 1].
        seed: seed of the random choices.
        num_samples: samples of the same prompt (images: tiles of one grid).
        root: directory searched for 'last' and 'best'; a checkpoint from outside a run writes into a
            new run directory here.
        output: also write the samples to this file name in the run's samples/ folder (images: the
            grid's name, default generate-seed<seed>.png).
        compile: compile the step with torch.compile first (faster per token; compiling takes seconds).
        plugins: modules or .py files imported first: the local plugins the checkpoint's run was trained with
            (as given to ``lintf fit --plugins``).
    """
    sampling = Sampling(temperature, top_k, top_p)
    if num_samples < 1:
        raise CommandError(f"--num_samples must be >= 1, got {num_samples}")
    try:
        load_plugins(plugins)
        path, checkpoint, task_class = find_generating_checkpoint(ckpt_path, root)
        require_run_plugins(path, plugins)
    except PluginError as error:
        raise CommandError(str(error)) from None
    settings = ModelSettings.of(task_class, checkpoint)
    fmt = prompt_format(task_class, settings, checkpoint)
    ids = read_prompt(prompt, prompt_file, fmt)
    count = new_token_count(settings, fmt, ids, max_new_tokens)  # a request the model cannot meet: before it loads
    task = build_task(path, checkpoint, task_class)
    writes = output is not None or isinstance(fmt, ByteFormat)
    request = Request(task, fmt, ids, count, output_directory(path, root, checkpoint) if writes else None)
    note(f"checkpoint: {os.path.abspath(path)} ({task_class.__name__})")
    if writes:
        note(f"run directory: {request.run_directory}")
    step = steps_for(task, compile, num_samples if isinstance(fmt, ByteFormat) else 1)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    if isinstance(fmt, ByteFormat):
        write_image_grid(request, sampling, generator, step, num_samples, output, seed)
    else:
        write_samples(request, sampling, generator, step, num_samples, output)
    seconds = time.perf_counter() - start
    generated = request.new_tokens * num_samples
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    note(f"prompt {len(ids)} tokens, generated {generated} tokens in {seconds:.2f} s ({generated / seconds:.1f} "
         f"tokens/s, prefill included), peak memory {peak:.0f} MiB")
