"""Generating after a long context: lintf's recurrent step against Hugging Face GPT-2 with its KV cache, on the CPU.

    python -m benchmarks.generation_vs_hf                       # full: d_model 512, 8 layers, 1k..64k context
    python -m benchmarks.generation_vs_hf --contexts 1024 4096 --new-tokens 32 --d-model 256 --layers 4
                                                                # quick: a few minutes

One model size with random weights (d_model, layers, heads, d_ff = 4 d_model, a 256-token
vocabulary, GELU, pre-norm), built twice: in lintf with causal linear attention (no position
codes) and in ``transformers`` as GPT-2 (SDPA attention, the default ``DynamicCache``, greedy
``generate``). For each context length L, each system generates ``--new-tokens`` tokens after L
tokens of context, in a fresh process: tokens per second, ms per token, and the process's peak
resident memory while generating (weights, context and work; the high-water mark is reset after the
context is built). lintf reads its context with ``prefill`` (in 4,096-token chunks) and then steps;
GPT-2's cache is filled with L random keys and values per layer (the cost of a token depends only
on the cache's length, and a 64k-token causal prefill takes minutes on a CPU), and ``generate``
continues from it. A context whose cache would not fit in the available memory is skipped for the
peer. ``--steps eager compiled`` times lintf's eager step and its ``torch.compile``d step
(compiling is not timed). lintf's ms per token is the median of its per-token times (one token's
cost, robust to a busy machine's stalls), and its CPU ms per token the median of the thread's CPU time
per token (what the flatness target is judged on: a busy machine inflates wall time); GPT-2's is ``generate``'s total over the tokens. Writes generation_vs_hf.{md,json,png} to --out (benchmarks/results).
Needs ``pip install -e ".[bench]"`` (transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import module_environment, positive_int, resident_mb

HERE = Path(__file__).resolve().parent
NAME = "generation_vs_hf"
VOCAB = 256
PREFILL_CHUNK = 4096
SERIES = {"lintf-eager": "lintf, eager step", "lintf-compiled": "lintf, compiled step", "hf": "HF GPT-2, KV cache"}
STYLE = {"lintf-eager": ("tab:blue", "o"), "lintf-compiled": ("tab:green", "s"), "hf": ("tab:red", "^")}


def reset_peak() -> None:
    """Start a new resident-memory high-water mark at the current resident size (Linux)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def peak_mb() -> float:
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) / 1024


def tensor_mb(tensors: Any) -> float:
    """MiB held by the tensors in a nest of tuples and lists."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size() / 2**20
    if isinstance(tensors, (tuple, list)):
        return sum(tensor_mb(item) for item in tensors)
    return 0.0


def lintf_model(args: argparse.Namespace):
    from lintf.models import EncoderConfig
    from lintf.tasks import AutoregressiveTask

    torch.manual_seed(0)
    encoder = EncoderConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, attention="linear",
                            d_ff=4 * args.d_model, dropout=0.0)
    return AutoregressiveTask(VOCAB, 1, encoder, positions="none").eval()


def measure_lintf(args: argparse.Namespace, context: int, compiled: bool) -> dict[str, float]:
    """Prefill ``context`` random tokens, then time ``--new-tokens`` greedy steps."""
    from lintf.generation import Sampling
    from lintf.generation.stepping import CompiledStep

    task, greedy = lintf_model(args), Sampling(temperature=0)
    step = CompiledStep(task) if compiled else task.step
    prompt = torch.randint(0, VOCAB, (1, context), generator=torch.Generator().manual_seed(1))
    state = None
    for start in range(0, context, PREFILL_CHUNK):
        params, state = task(prompt[:, start : start + PREFILL_CHUNK], state=state, return_state=True, start=start)
    params = params[:, -1]
    for position in range(context, context + 3):  # first calls (and compiling) are not timed; the state stays
        step(greedy.choose(task.head, params), position, state)
    before = resident_mb()
    reset_peak()
    token_seconds, token_cpu_seconds = [], []
    for position in range(context, context + args.new_tokens):
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        params, state = step(greedy.choose(task.head, params), position, state)
        token_seconds.append(time.perf_counter() - begin)
        token_cpu_seconds.append(time.thread_time() - begin_cpu)
    return {"seconds": sum(token_seconds), "ms_per_token": 1000 * statistics.median(token_seconds),
            "cpu_ms_per_token": 1000 * statistics.median(token_cpu_seconds),
            "peak_mb": peak_mb(), "before_mb": before, "context_mb": tensor_mb(state),
            "compiled": bool(getattr(step, "compiled", False))}


def measure_hf(args: argparse.Namespace, context: int) -> dict[str, float]:
    """Fill GPT-2's cache with ``context`` random positions, then time ``generate`` of ``--new-tokens``."""
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=context + args.new_tokens + 8, n_embd=args.d_model,
                        n_layer=args.layers, n_head=args.heads, n_inner=4 * args.d_model, activation_function="gelu",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
    model = GPT2LMHeadModel(config).eval()
    options = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}
    model.generate(torch.zeros(1, 4, dtype=torch.long), max_new_tokens=3, min_new_tokens=3, **options)  # warm up
    head_dim = args.d_model // args.heads
    cache = DynamicCache(config=config)
    for layer in range(args.layers):
        cache.update(torch.randn(1, args.heads, context, head_dim), torch.randn(1, args.heads, context, head_dim), layer)
    ids = torch.randint(0, VOCAB, (1, context + 1), generator=torch.Generator().manual_seed(1))
    before = resident_mb()
    reset_peak()
    begin = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                         max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **options)
    seconds = time.perf_counter() - begin
    assert out.shape[1] == context + 1 + args.new_tokens and cache.get_seq_length() == context + args.new_tokens
    return {"seconds": seconds, "peak_mb": peak_mb(), "before_mb": before,
            "context_mb": 2 * args.layers * context * args.d_model * 4 / 2**20}


def hf_fits(args: argparse.Namespace, context: int) -> tuple[bool, float]:
    """Whether GPT-2's cache at ``context`` (held twice while ``torch.cat`` grows it) fits in available memory."""
    cache_mb = 2 * args.layers * (context + args.new_tokens) * args.d_model * 4 / 2**20
    with open("/proc/meminfo") as meminfo:
        available_mb = int(re.search(r"MemAvailable:\s+(\d+) kB", meminfo.read()).group(1)) / 1024
    return 2 * cache_mb + 1024 < available_mb, 2 * cache_mb + 1024


def run_child(series: str, context: int, args: argparse.Namespace) -> dict[str, Any]:
    """One (series, context) point in a fresh process, so each peak is its own."""
    import subprocess

    command = [sys.executable, "-m", f"benchmarks.{NAME}", "--child", series, str(context), *child_options(args)]
    done = subprocess.run(command, capture_output=True, text=True, env=module_environment(), check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_options(args: argparse.Namespace) -> list[str]:
    return ["--new-tokens", str(args.new_tokens), "--d-model", str(args.d_model), "--layers", str(args.layers),
            "--heads", str(args.heads), "--threads", str(args.threads)]


def measure_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for context in args.contexts:
        for series in [f"lintf-{step}" for step in args.steps] + ["hf"]:
            fits, needed_mb = hf_fits(args, context) if series == "hf" else (True, 0.0)
            result = run_child(series, context, args) if fits else {"error": f"needs ~{needed_mb / 1024:.1f} GiB"}
            if "seconds" in result:
                result.setdefault("ms_per_token", 1000 * result["seconds"] / args.new_tokens)
                result["tokens_per_second"] = 1000 / result["ms_per_token"]
            rows.append({"series": series, "context": context, **result})
            shown = f"{result['ms_per_token']:8.2f} ms/token, peak {result['peak_mb']:7.0f} MiB" if "seconds" in result \
                else f"skipped: {result['error']}"
            print(f"{context:6d} {SERIES[series]:22s} {shown}", flush=True)
    return rows


def row_of(rows: list[dict[str, Any]], series: str, context: int) -> dict[str, Any] | None:
    row = next((r for r in rows if r["series"] == series and r["context"] == context), None)
    return row if row is not None and "seconds" in row else None


def best_lintf(rows: list[dict[str, Any]], context: int) -> dict[str, Any] | None:
    candidates = [row_of(rows, f"lintf-{step}", context) for step in ("compiled", "eager")]
    return min((r for r in candidates if r), key=lambda r: r["ms_per_token"], default=None)


def headline(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Flatness of lintf's per-token time and its speed-up over the peer, against the targets."""
    lines, contexts = [], sorted(args.contexts)
    for step in args.steps:  # flat: the slowest context's time per token over the fastest's, whichever is larger
        points = [row for c in contexts if (row := row_of(rows, f"lintf-{step}", c))]
        if len(points) > 1:
            cpu, wall = (max(r[key] for r in points) / min(r[key] for r in points)
                         for key in ("cpu_ms_per_token", "ms_per_token"))
            lines.append(f"- {SERIES[f'lintf-{step}']}: slowest / fastest CPU time per token over {contexts[0]:,} to "
                         f"{contexts[-1]:,} tokens of context: {cpu:.2f}x (target: flat within 1.2x; "
                         f"{'met' if cpu <= 1.2 else 'missed'}); wall time: {wall:.2f}x")
    for context in contexts:
        ours, peer = best_lintf(rows, context), row_of(rows, "hf", context)
        if ours and peer:
            speedup = peer["ms_per_token"] / ours["ms_per_token"]
            target = f" (target at 16k: >= 10x; {'met' if speedup >= 10 else 'missed'})" if context == 16384 else ""
            lines.append(f"- at {context:,} tokens: lintf {ours['tokens_per_second']:.1f} tokens/s, GPT-2 "
                         f"{peer['tokens_per_second']:.1f} tokens/s: {speedup:.1f}x{target}")
    return lines


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    import transformers

    series = [f"lintf-{step}" for step in args.steps] + ["hf"]
    lines = [
        "# Generation after a long context: lintf (linear attention, recurrent step) vs Hugging Face GPT-2 (KV cache)",
        "", f"`{' '.join([f'python -m benchmarks.{NAME}', *sys.argv[1:]])}`", "",
        f"Random weights, d_model {args.d_model}, {args.layers} layers, {args.heads} heads, d_ff {4 * args.d_model}, "
        f"vocabulary {VOCAB}; {args.new_tokens} greedy tokens after each context, batch 1, fp32, {args.threads} "
        f"thread(s) on {platform.processor() or platform.machine()}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}. lintf's ms/token: the median per token, its CPU ms/token: the median of the "
        "thread's CPU time per token; GPT-2's: generate's mean. Peak: the process's resident memory while generating "
        "(weights, context, work)."
        + (f" Load average of the machine before / after: {args.load_average[0]:.1f} / {args.load_average[1]:.1f}."
           if getattr(args, "load_average", None) else ""),
        "", *headline(rows, args), "",
        "| context | " + " | ".join(f"{SERIES[s]}: ms/token | {'CPU ms/token | ' if s != 'hf' else ''}tokens/s | "
                                    "peak MiB | context MiB" for s in series) + " |",
        "|---:|" + "".join("---:|" * (4 if name == "hf" else 5) for name in series),
    ]
    for context in args.contexts:
        cells = []
        for name in series:
            row = row_of(rows, name, context)
            skipped = next((r.get("error") for r in rows if r["series"] == name and r["context"] == context), "")
            cpu = f"{row['cpu_ms_per_token']:.2f} | " if row and "cpu_ms_per_token" in row else ""
            cells.append(f"{row['ms_per_token']:.2f} | {cpu}{row['tokens_per_second']:.1f} | {row['peak_mb']:.0f} | "
                         f"{row['context_mb']:.2f}" if row else ("- | " if name != "hf" else "") + f"- | - | - | {skipped}")
        lines.append(f"| {context:,} | " + " | ".join(cells) + " |")
    return lines


def plot(rows: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in [f"lintf-{step}" for step in args.steps] + ["hf"]:
        points = [row_of(rows, name, c) for c in sorted(args.contexts)]
        points = [p for p in points if p]
        if not points:
            continue
        colour, marker = STYLE[name]
        contexts = [p["context"] for p in points]
        for axis, key in zip(axes, ("ms_per_token", "peak_mb")):
            axis.plot(contexts, [p[key] for p in points], color=colour, marker=marker, label=SERIES[name])
    for axis, label in zip(axes, ("ms per generated token", "peak resident MiB while generating")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.set_xlabel("tokens of context")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=9)
    figure.suptitle(f"d_model {args.d_model}, {args.layers} layers, {args.heads} heads, {args.threads} thread(s), CPU")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=positive_int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--new-tokens", type=positive_int, default=64, help="tokens generated after each context")
    parser.add_argument("--d-model", type=positive_int, default=512)
    parser.add_argument("--layers", type=positive_int, default=8)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads in each measuring process")
    parser.add_argument("--steps", nargs="+", choices=["eager", "compiled"], default=["eager", "compiled"],
                        help="lintf's step functions to time (compiled: torch.compile, which takes a while per process)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="directory of the .md, .json and .png")
    parser.add_argument("--child", nargs=2, metavar=("SERIES", "CONTEXT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.d_model % args.heads:
        parser.error(f"--d-model {args.d_model} must be a multiple of --heads {args.heads}")
    return args


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    if args.child:  # one measurement, in the process run_child started
        series, context = args.child[0], int(args.child[1])
        with torch.inference_mode():
            result = measure_hf(args, context) if series == "hf" else measure_lintf(args, context, series == "lintf-compiled")
        print(json.dumps(result))
        return
    import transformers  # noqa: F401  (fail before measuring anything when the extra is missing)

    load_before = os.getloadavg()[0]
    rows = measure_all(args)
    args.load_average = (load_before, os.getloadavg()[0])
    lines = render(rows, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{NAME}.json").write_text(json.dumps({"settings": {k: v for k, v in vars(args).items()
                                                                    if k not in ("out", "child")}, "rows": rows}, indent=1))
    plot(rows, args, args.out / f"{NAME}.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
