"""What the training step's biggest costs beside the attention op give to a change of the model: A/B steps.

    python -m benchmarks.training_step_variants                        # d_model 256, N = 4096, fp32, 1 thread
    python -m benchmarks.training_step_variants --variants compile --length 1024

The model is the one of ``benchmarks.training_step`` (the stream language model, ``build_task``). Each variant
is a copy of it with the same weights, changed only in how it computes:

- ``compile``: ``torch.compile`` of every ``TransformerLayer`` (Inductor fuses bias + GELU, the residual
  additions with LayerNorm and the layout copies: the fused feed-forward and norm);
- ``contiguous_heads``: q, k and v made contiguous in (B, H, N, D) before the attention (the layout choice a
  (B, N, d) sequence has; channels-last is an image layout);
- ``fused_qkv``: q, k and v from one GEMM, their weights concatenated at each call.

The current model and a variant take turns step by step in one process (A, B, A, B, ... for ``--rounds``
rounds after ``--warmup`` untimed steps each, which include compiling), each a whole plain AdamW step
(forward, loss, backward, step, zero_grad); a model's time is the median of its timed steps. Every
variant's loss on the first batch is checked against the current model's first. Writes
training_step_variants.{md,json} to --out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import types
from typing import Any, Callable

import torch
from torch import Tensor, nn

from benchmarks.measure import positive_int, write_report
from benchmarks.training_step import HERE, PRECISIONS, SIZES, batches, build_task, cpu_model, plain_step

NAME = "training_step_variants"


def compile_layers(model: nn.Module) -> None:
    from lintf.models.transformer import TransformerLayer

    for layer in [m for m in model.modules() if isinstance(m, TransformerLayer)]:
        layer.compile()


def contiguous_heads(model: nn.Module) -> None:
    from lintf.models.attention_layer import MultiHeadAttention

    for block in [m for m in model.modules() if isinstance(m, MultiHeadAttention)]:
        split = block._split_heads  # (B, N, d) -> a (B, H, N, D) view
        block._split_heads = lambda x, split=split: split(x).contiguous()


def fused_forward(self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: Any = None,  # noqa: ANN001
                  return_state: bool = False) -> tuple[Tensor, None]:
    if state is not None or return_state:
        raise ValueError("fused_qkv times the stateless forward only")
    batch, length, width = x.shape
    weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3 d, d)
    bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
    qkv = nn.functional.linear(x, weight, bias).view(batch, length, 3, self.n_heads, self.head_dim)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, N, D)
    attended = self.attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
    return self.out(attended.transpose(1, 2).reshape(batch, length, width)), None  # (B, N, d_model)


def fused_qkv(model: nn.Module) -> None:
    from lintf.models.attention_layer import MultiHeadAttention

    for block in [m for m in model.modules() if isinstance(m, MultiHeadAttention)]:
        block.forward = types.MethodType(fused_forward, block)


VARIANTS: dict[str, Callable[[nn.Module], None]] = {
    "compile": compile_layers, "contiguous_heads": contiguous_heads, "fused_qkv": fused_qkv}


class Stepper:
    """A task and its optimizer, stepping on one batch.

    Args:
        task: the stream language model task.
        dtype: fp32, or bf16 for autocast.
    """

    def __init__(self, task, dtype: str) -> None:  # noqa: ANN001
        self.task, self.dtype = task, dtype
        task.trainer = None  # self.log then returns at once
        task.train()
        self.optimizer = task.configure_optimizers()

    def step(self, batch: dict[str, Any]) -> float:
        """One whole optimizer step; returns its loss."""
        return plain_step(self.task, self.optimizer, batch, 0, self.dtype).item()


def compare(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    """The variant's and the current model's median step seconds, alternating step by step."""
    current = build_task(args.d_model, args.length, args.attention)
    changed = copy.deepcopy(current)
    VARIANTS[variant](changed)
    batch = batches(args.length, args.tokens, 1)[0]
    models = {"current": Stepper(current, args.dtype), "variant": Stepper(changed, args.dtype)}
    losses = {name: model.step(batch) for name, model in models.items()}  # the first step: same weights
    if abs(losses["variant"] - losses["current"]) > 1e-3 * abs(losses["current"]):
        raise SystemExit(f"{variant} changes the loss: {losses['variant']} against {losses['current']}")
    for _ in range(args.warmup - 1):
        for model in models.values():
            model.step(batch)
    seconds: dict[str, list[float]] = {"current": [], "variant": []}
    for round_index in range(args.rounds):
        for name in ("current", "variant")[:: 1 if round_index % 2 == 0 else -1]:
            start = time.perf_counter()
            models[name].step(batch)
            seconds[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {"variant": variant, "seconds": seconds, "median_seconds": medians,
            "ratio": medians["variant"] / medians["current"], "first_loss": losses}


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    lines = ["# The training step's biggest costs beside the attention: variants of the model, A/B", "",
             f"`{' '.join(['python -m benchmarks.' + NAME, *sys.argv[1:]])}`", "",
             f"{cpu_model()}; torch {torch.__version__}; {args.threads} thread(s). The stream LM at d_model "
             f"{args.d_model} ({SIZES[args.d_model][0]} layers, {SIZES[args.d_model][1]} heads), {args.attention} "
             f"attention, N = {args.length:,}, {args.tokens:,} tokens per batch, {args.dtype}; each variant against the "
             f"current model step by step in one process, {args.rounds} timed steps each after {args.warmup} untimed "
             f"(medians). Load average before / after: {args.load_average[0]:.1f} / {args.load_average[1]:.1f}.", "",
             "| variant | current s | variant s | variant / current |", "|---|---:|---:|---:|"]
    for row in rows:
        median = row["median_seconds"]
        lines.append(f"| {row['variant']} | {median['current']:.3f} | {median['variant']:.3f} | {row['ratio']:.3f} |")
    return lines


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--d-model", type=int, choices=sorted(SIZES), default=256)
    parser.add_argument("--length", type=positive_int, default=4096, help="sequence length N")
    parser.add_argument("--tokens", type=positive_int, default=16384, help="tokens per batch (B = tokens // N)")
    parser.add_argument("--attention", default="linear", help="a registered attention")
    parser.add_argument("--dtype", choices=sorted(PRECISIONS), default="fp32")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--warmup", type=positive_int, default=2, help="untimed steps of each model")
    parser.add_argument("--rounds", type=positive_int, default=6, help="timed steps of each model")
    parser.add_argument("--out", default=HERE / "results", help="directory of the .md and .json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows = []
    for variant in args.variants:
        rows.append(compare(args, variant))
        print(f"{variant}: {rows[-1]['ratio']:.3f}", flush=True)
    args.load_average = (load_before[0], os.getloadavg()[0])
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    write_report(args.out, NAME, render(rows, args), {"settings": settings, "rows": rows})


if __name__ == "__main__":
    main()
