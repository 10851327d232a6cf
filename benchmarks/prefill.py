"""Parallel prefill vs feeding a prompt through ``step``: the same model, the same continuation.

    python -m benchmarks.prefill [--prompt 4096] [--continue 64] [--attention linear]

A random-weight token model (``AutoregressiveTask``: d_model 256, 4 layers, 8 heads, the given
attention, no position codes, fp32, batch 1) reads a prompt of random tokens two ways: one
parallel ``prefill`` pass that returns every layer's state, and one ``step`` per token from an empty
state. Both then continue greedily for ``--continue`` tokens with ``step``. Reported: the time of
each way of reading the prompt (median of ``--repeats``), their ratio, whether the two greedy
continuations are identical, and the largest difference of their logits. Writes
benchmarks/results/prefill.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from lintf.models import EncoderConfig
from lintf.tasks import AutoregressiveTask

RESULTS = Path(__file__).parent / "results"
VOCAB = 256


def build_model(attention: str, length: int) -> AutoregressiveTask:
    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=256, n_layers=4, n_heads=8, attention=attention, dropout=0.0)
    return AutoregressiveTask(VOCAB, length, encoder, positions="none").eval()


def read_by_steps(model: AutoregressiveTask, prompt: torch.Tensor) -> tuple[torch.Tensor, list]:
    state = model.init_state(prompt.shape[0])
    for position in range(prompt.shape[1]):
        logits, state = model.step(prompt[:, position], position, state)
    return logits, state


def read_by_prefill(model: AutoregressiveTask, prompt: torch.Tensor) -> tuple[torch.Tensor, list]:
    logits, state = model.prefill(prompt)
    return logits[:, -1], state


def continue_greedily(model: AutoregressiveTask, logits: torch.Tensor, state: list, start: int, count: int):
    """``count`` greedy tokens after a prompt of ``start`` tokens, and the logits that chose them."""
    tokens, all_logits = [], [logits]
    for position in range(start, start + count):
        token = logits.argmax(-1)
        tokens.append(token)
        logits, state = model.step(token, position, state)
        all_logits.append(logits)
    return torch.stack(tokens, dim=1), torch.stack(all_logits, dim=1)


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", type=int, default=4096, help="prompt tokens")
    parser.add_argument("--continue", dest="count", type=int, default=64, help="greedy tokens after the prompt")
    parser.add_argument("--attention", default="linear")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    model = build_model(args.attention, args.prompt + args.count)
    prompt = torch.randint(0, VOCAB, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        prefill_s, (prefill_logits, prefill_state) = timed(lambda: read_by_prefill(model, prompt), args.repeats)
        step_s, (step_logits, step_state) = timed(lambda: read_by_steps(model, prompt), args.repeats)
        from_prefill = continue_greedily(model, prefill_logits, prefill_state, args.prompt, args.count)
        from_steps = continue_greedily(model, step_logits, step_state, args.prompt, args.count)
    identical = torch.equal(from_prefill[0], from_steps[0])
    difference = float((from_prefill[1] - from_steps[1]).abs().max())
    lines = ["# Parallel prefill vs step-by-step prompt reading", "",
             f"`python -m benchmarks.prefill --prompt {args.prompt} --continue {args.count} --attention "
             f"{args.attention}`: random-weight model (d_model 256, 4 layers, 8 heads, {args.attention} attention), "
             f"fp32, batch 1, {torch.get_num_threads()} threads, median of {args.repeats}.", "",
             "| prompt tokens | prefill (s) | step by step (s) | speed-up | greedy continuations identical | "
             "max logit difference |", "|---:|---:|---:|---:|---|---:|",
             f"| {args.prompt} | {prefill_s:.3f} | {step_s:.3f} | {step_s / prefill_s:.1f}x | "
             f"{'yes' if identical else 'no'} ({args.count} tokens) | {difference:.1e} |"]
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prefill.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
