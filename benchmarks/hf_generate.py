"""transformers' ``generate`` with lintf's model (an exported directory) against lintf's own generation, on the CPU.

    python -m benchmarks.hf_generate                                     # d_model 512, 8 layers, 1k and 16k context
    python -m benchmarks.hf_generate --contexts 256 --new-tokens 16 --d-model 64 --layers 2   # seconds

One model with random weights (causal linear attention, no position codes, a 256-token vocabulary),
exported with ``lintf.hf.export.write_directory`` and read back with ``AutoModelForCausalLM``. For each
context length L, both read L random tokens in one parallel pass and then choose ``--new-tokens``
tokens greedily with the recurrent step: lintf with ``lintf.generation.complete`` (the loop of ``lintf
generate --temperature 0``, eager step), transformers with ``model.generate(do_sample=False)`` and the
``LintfCache``. Each token is timed as it is chosen (lintf: ``complete``'s ``on_token``; transformers: a
logits processor), and ms/token is the median interval between consecutive tokens, wall and thread CPU
time: the decoding step alone, robust to a busy machine's stalls; tokens/s = 1000 / ms/token. Both must
choose the same tokens. One thread by default (``--threads``).
Writes hf_generate.{md,json} to --out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import positive_int

HERE = Path(__file__).resolve().parent
NAME = "hf_generate"
VOCAB = 256
TARGET = 1.5
"""transformers' generate may take at most this many times lintf's time per token."""


def build(args: argparse.Namespace, directory: str) -> tuple[Any, Any]:
    """The lintf task and the same model read back from its exported directory."""
    import lintf  # noqa: F401  (registers model_type lintf with the Auto classes)
    from transformers import AutoModelForCausalLM

    from lintf.hf.export import write_directory
    from lintf.models import EncoderConfig
    from lintf.tasks import AutoregressiveTask

    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, attention="linear",
                            dropout=0.0)
    task = AutoregressiveTask(VOCAB, 1, encoder, positions="none").eval()
    write_directory(task, None, directory)
    return task, AutoModelForCausalLM.from_pretrained(directory).eval()


Marks = list[tuple[float, float]]
"""(wall, thread CPU) seconds at each token chosen."""


def mark(marks: Marks) -> None:
    marks.append((time.perf_counter(), time.thread_time()))


def lintf_generate(task: Any, prompt: torch.Tensor, new_tokens: int, marks: Marks) -> torch.Tensor:
    from lintf.generation import Sampling, complete

    tokens = torch.zeros(1, prompt.shape[1] + new_tokens, dtype=torch.long)
    tokens[:, : prompt.shape[1]] = prompt
    return complete(task, tokens, prompt.shape[1], Sampling(temperature=0), on_token=lambda *_: mark(marks))


def hf_generate(model: Any, prompt: torch.Tensor, new_tokens: int, marks: Marks) -> torch.Tensor:
    from transformers import LogitsProcessor, LogitsProcessorList

    class Mark(LogitsProcessor):
        """Called by generate with each step's scores, before the token is chosen."""

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            mark(marks)
            return scores

    with torch.inference_mode():
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=0, eos_token_id=None, logits_processor=LogitsProcessorList([Mark()]))


def measure(name: str, function: Any, model: Any, prompt: torch.Tensor, args: argparse.Namespace) -> dict[str, Any]:
    """Per-token times of one system: the medians of the intervals between consecutive tokens (the step alone,
    robust to a busy machine's stalls), wall and thread CPU; the prefill: the time to the first token."""
    marks: Marks = []
    begin = time.perf_counter()
    tokens = function(model, prompt, args.new_tokens, marks)
    wall, cpu = ([later[i] - earlier[i] for earlier, later in zip(marks, marks[1:])] for i in (0, 1))
    ms = 1000 * statistics.median(wall)
    return {"system": name, "context": prompt.shape[1], "prefill_s": marks[0][0] - begin, "ms_per_token": ms,
            "cpu_ms_per_token": 1000 * statistics.median(cpu), "tokens_per_second": 1000 / ms,
            "tokens": tokens[0, prompt.shape[1]:].tolist()}


def measure_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        task, model = build(args, directory)
        function = {"lintf": lintf_generate, "transformers": hf_generate}
        for context in args.contexts:
            prompt = torch.randint(0, VOCAB, (1, context), generator=torch.Generator().manual_seed(1))
            hf_generate(model, prompt[:, :8], 2, [])  # first calls are not timed
            pair = [measure(system, function[system], task if system == "lintf" else model, prompt, args)
                    for system in ("lintf", "transformers")]
            if pair[0]["tokens"] != pair[1]["tokens"]:
                raise SystemExit(f"at {context} tokens of context the two generated different tokens: "
                                 f"{pair[0]['tokens']} and {pair[1]['tokens']}")
            for row in pair:
                print(f"{context:7d} {row['system']:12s} {row['tokens_per_second']:8.1f} tokens/s "
                      f"(prefill {row['prefill_s']:.2f} s)", flush=True)
            rows += pair
    return rows


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    import transformers

    lines = [f"# transformers' generate with lintf's model against lintf's own generation", "",
             f"`{args.command}`", "",
             f"Random weights, causal linear attention, d_model {args.d_model}, {args.layers} layers, {args.heads} "
             f"heads, vocabulary {VOCAB}; {args.new_tokens} greedy tokens after each context, batch 1, fp32, "
             f"{args.threads} thread(s) on {platform.processor() or platform.machine()}; torch {torch.__version__}, "
             f"transformers {transformers.__version__}; lintf's op {args.op}. ms/token: the median interval between "
             f"consecutive tokens (wall; CPU: the thread's CPU time), tokens/s = 1000 / ms/token; prefill: the time "
             f"to the first token. Both chose the same tokens. Load average of the machine before / after: {args.load_average[0]:.1f} / "
             f"{args.load_average[1]:.1f}.", ""]
    for context in args.contexts:
        ours, theirs = (next(r for r in rows if r["system"] == s and r["context"] == context)
                        for s in ("lintf", "transformers"))
        ratio, cpu_ratio = (theirs[key] / ours[key] for key in ("ms_per_token", "cpu_ms_per_token"))
        lines.append(f"- at {context:,} tokens: transformers' generate takes {cpu_ratio:.2f}x lintf's CPU time per "
                     f"token (target: within {TARGET}x; {'met' if cpu_ratio <= TARGET else 'missed'}); wall time: "
                     f"{ratio:.2f}x")
    lines += ["", "| context | system | tokens/s | ms/token | CPU ms/token | prefill s |", "|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['context']:,} | {r['system']} | {r['tokens_per_second']:.1f} | {r['ms_per_token']:.2f} | "
              f"{r['cpu_ms_per_token']:.2f} | {r['prefill_s']:.2f} |" for r in rows]
    return lines


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=positive_int, nargs="+", default=[1024, 16384])
    parser.add_argument("--new-tokens", type=positive_int, default=64, help="tokens generated after each context")
    parser.add_argument("--d-model", type=positive_int, default=512)
    parser.add_argument("--layers", type=positive_int, default=8)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="directory of the .md and .json")
    args = parser.parse_args(argv)
    if args.d_model % args.heads:
        parser.error(f"--heads {args.heads} must divide --d-model {args.d_model}")
    if args.new_tokens < 2:
        parser.error(f"--new-tokens must be >= 2 (the time per token is measured between consecutive tokens), "
                     f"got {args.new_tokens}")
    return args


def main(argv: list[str] | None = None) -> None:
    import sys

    args = parse(argv)
    args.command = " ".join(["python -m benchmarks.hf_generate", *(sys.argv[1:] if argv is None else argv)])
    torch.set_num_threads(args.threads)
    from lintf.ops.extension.environment import extension_disabled
    from lintf.ops.extension.load import load_library

    args.op = "pure PyTorch (LINTF_EXTENSION off)" if extension_disabled() else (
        "compiled" if load_library() else "pure PyTorch (the compiled op did not load)")
    load_before = os.getloadavg()[0]
    rows = measure_all(args)
    args.load_average = (load_before, os.getloadavg()[0])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.md").write_text("\n".join(render(rows, args)) + "\n")
    settings = {key: value for key, value in vars(args).items() if key != "out"}
    (args.out / f"{NAME}.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=1, default=str))
    print(f"wrote {args.out / NAME}.md", flush=True)


if __name__ == "__main__":
    main()
