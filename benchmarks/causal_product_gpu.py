"""GPU benchmark of causal linear attention: lintf's CUDA kernels against softmax SDPA and the alternatives.

    python -m benchmarks.causal_product_gpu [--heads 16 128 512] [--lengths 512 1024 2048 4096 16384 65536]
        [--dims 64 128] [--dtypes bf16 fp16 fp32] [--max-positions 8388608] [--repeats 10] [--no-crossover]
        [--impls NAME ...] [--out DIR]

B*H heads of H = 16, C = M = dim, q and k elu+1 feature maps, v Gaussian. For every (dtype, dim, B*H, N),
forward and forward+backward (autograd, gradients of q, k, v) of:
  lintf chunked   lintf's CUDA op with LINTF_CUDA_KERNEL=chunked (tensor-core chunked kernel)
  lintf scan      the same op with LINTF_CUDA_KERNEL=scan (the sequential scan kernel)
  lintf pytorch   lintf's pure-PyTorch chunked path (lintf.ops.causal.chunked) on the GPU
  SDPA            scaled_dot_product_attention(is_causal=True), head dim = dim (flash for bf16; fp32 has
                  no flash kernel, so the memory-efficient one; the O(N^2) math backend is excluded)
  FLA chunk / FLA recurrent
                  flash-linear-attention's chunk_linear_attn and fused_recurrent_linear_attn
                  (normalize=True, scale=1; inputs transposed to its [B, T, H, K] layout inside the
                  timed call), when `pip install flash-linear-attention` is importable
Times are medians over --repeats runs, measured with CUDA events after warm-up; each cell also gives
the ratio to lintf chunked on its row (> 1: slower than lintf chunked). A second table times both lintf
kernels at short N (B*H = the smallest --heads), the measurement behind the op's automatic choice of
kernel. --impls limits the run to the named implementations (lintf chunked is always timed: the ratios
refer to it). Rows with B*H*N above --max-positions are left out (their tensors outgrow the GPU).
Writes causal_product_gpu.{md,json} into --out (default benchmarks/results), headed by the command and
the GPU's name.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import os
import shlex
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from lintf.ops import causal_linear_attention, compiled_op_available
from lintf.ops.causal.chunked import causal_linear_attention_pytorch

HEADS = 16
RESULTS = Path(__file__).parent / "results"
NAMES = ("lintf chunked", "lintf scan", "lintf pytorch", "SDPA", "FLA chunk", "FLA recurrent")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
Fn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def lintf_kernel(kernel: str) -> Fn:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        os.environ["LINTF_CUDA_KERNEL"] = kernel  # read by the op's host code on every call
        return causal_linear_attention(q, k, v)

    return attention


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def fla_implementations() -> tuple[dict[str, Fn], str]:
    """flash-linear-attention's chunk and fused-recurrent linear attention, or nothing (and why)."""
    try:
        import fla
        from fla.ops.linear_attn import chunk_linear_attn, fused_recurrent_linear_attn
    except Exception as error:  # noqa: BLE001 (any import failure means: not available here)
        return {}, f"not available ({type(error).__name__}: {str(error)[:120]})"

    def wrap(fn: Callable) -> Fn:
        layout = {"head_first": False} if "head_first" in inspect.signature(fn).parameters else {}

        def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # FLA's [B, T, H, K] layout
            return fn(q, k, v, scale=1.0, normalize=True, **layout)[0].transpose(1, 2)

        return attention

    return {"FLA chunk": wrap(chunk_linear_attn), "FLA recurrent": wrap(fused_recurrent_linear_attn)}, getattr(
        fla, "__version__", "unknown version")


def check_batch_heads(parser: argparse.ArgumentParser, batch_heads: list[int]) -> None:
    """Exit through parser.error unless every B*H of --heads is a positive multiple of H = HEADS."""
    odd = [h for h in batch_heads if h <= 0 or h % HEADS]
    if odd:
        parser.error(f"--heads: {odd} are not positive multiples of H = {HEADS} (B*H = B x {HEADS})")


def inputs(batch_heads: int, n: int, dim: int, dtype: torch.dtype) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch_heads // HEADS, HEADS, n, dim)
    q, k = (F.elu(torch.randn(shape, generator=gen, device="cuda")) + 1 for _ in range(2))
    v, grad = (torch.randn(shape, generator=gen, device="cuda") for _ in range(2))
    return [t.to(dtype).requires_grad_(i < 3) for i, t in enumerate((q, k, v, grad))]


def time_ms(fn: Fn, tensors: list[torch.Tensor], backward: bool, repeats: int) -> float:
    """Median milliseconds of one call (with backward), CUDA events around each."""
    q, k, v, grad = tensors

    def call() -> None:
        with torch.set_grad_enabled(backward):
            out = fn(q, k, v)
            if backward:
                torch.autograd.backward(out, grad)
        q.grad = k.grad = v.grad = None

    for _ in range(2):
        call()
    times = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        if i == 0 and times[0] > 1000:  # seconds per call: a few repeats say enough
            repeats = min(repeats, 3)
        if len(times) >= repeats:
            break
    return statistics.median(times)


def measure(impls: dict[str, Fn], batch_heads: int, n: int, dim: int, dtype: torch.dtype, backward: bool,
            repeats: int) -> dict:
    row = {}
    for name, fn in impls.items():
        torch.cuda.empty_cache()
        try:
            row[name] = time_ms(fn, inputs(batch_heads, n, dim, dtype), backward, repeats)
        except torch.cuda.OutOfMemoryError:
            row[name] = "OOM"
        except Exception as error:  # noqa: BLE001 (a failing alternative is reported, not fatal)
            row[name] = f"error: {type(error).__name__}"
            print(f"  {name}: {type(error).__name__}: {str(error).strip().splitlines()[:1]}", flush=True)
        print(f"  {name:14s} {'fwd+bwd' if backward else 'fwd':7s} BH={batch_heads:4d} N={n:6d} dim={dim:3d} "
              f"{dtype}: {row[name]}", flush=True)
    return row


def cell(value: float | str, base: float | str) -> str:
    if isinstance(value, str):
        return value
    ratio = f" ({value / base:.2f}x)" if isinstance(base, float) else ""
    return f"{value:.3f}{ratio}" if value < 1 else f"{value:.1f}{ratio}"


def table(rows: list[dict], names: list[str], base: str) -> list[str]:
    lines = ["| dtype | C=M | B*H | N | " + " | ".join(f"{n} ms" for n in names) + " |",
             "|---|---|---|---|" + "---:|" * len(names)]
    for r in sorted(rows, key=lambda r: (list(DTYPES).index(r["dtype"]), r["dim"], r.get("heads", HEADS), r["n"])):
        times = " | ".join(cell(r.get(n, "-"), r[base]) for n in names)
        lines.append(f"| {r['dtype']} | {r['dim']} | {r.get('heads', HEADS)} | {r['n']} | {times} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.causal_product_gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[16, 128, 512], help="B*H, multiples of 16")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 16384, 65536])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", choices=list(DTYPES), nargs="+", default=list(DTYPES))
    parser.add_argument("--max-positions", type=int, default=2**23, help="skip rows with B*H*N above this")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--crossover-lengths", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64, 256])
    parser.add_argument("--no-crossover", action="store_true", help="skip the short-N table of the two kernels")
    parser.add_argument("--impls", nargs="+", metavar="NAME", help=f"only these ({', '.join(NAMES)})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for causal_product_gpu.{md,json}")
    argv = argv if argv is not None else sys.argv[1:]
    args = parser.parse_args(argv)
    unknown = sorted(set(args.impls or []) - set(NAMES))
    if unknown:
        parser.error(f"--impls: unknown {', '.join(map(repr, unknown))}; allowed: {', '.join(NAMES)}")
    check_batch_heads(parser, args.heads)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is a file; give a directory (created if missing)")
    if not torch.cuda.is_available():
        sys.exit("benchmarks.causal_product_gpu needs a CUDA device")
    if not compiled_op_available("cuda"):
        sys.exit("the lintf op has no CUDA kernel here (built without a GPU or CUDA toolkit; see docs/gpu.md)")
    wanted = {"lintf chunked", *(args.impls or NAMES)}
    fla, fla_note = fla_implementations() if wanted & {"FLA chunk", "FLA recurrent"} else ({}, "not timed")
    impls = {"lintf chunked": lintf_kernel("chunked"), "lintf scan": lintf_kernel("scan"),
             "lintf pytorch": causal_linear_attention_pytorch, "SDPA": sdpa, **fla}
    impls = {name: fn for name, fn in impls.items() if name in wanted}
    results: dict[str, list[dict]] = {"fwd": [], "fwd+bwd": [], "crossover fwd": [], "crossover fwd+bwd": []}

    def save(finished: bool) -> None:  # after every row, so a run cut short keeps what it measured
        write(results, list(impls), fla_note, argv, args.out, finished)

    for dim, dtype_name in itertools.product(args.dims, args.dtypes):
        for heads, n in itertools.product(args.heads, args.lengths):
            if heads * n > args.max_positions:
                continue
            for mode in ("fwd", "fwd+bwd"):
                row = measure(impls, heads, n, dim, DTYPES[dtype_name], mode == "fwd+bwd", args.repeats)
                results[mode].append({"dtype": dtype_name, "dim": dim, "heads": heads, "n": n, **row})
                save(finished=False)
        if not args.no_crossover and "lintf scan" in impls:
            kernels = {name: impls[name] for name in ("lintf chunked", "lintf scan")}
            heads = min(args.heads)
            for n in args.crossover_lengths:
                for mode in ("fwd", "fwd+bwd"):
                    row = measure(kernels, heads, n, dim, DTYPES[dtype_name], mode == "fwd+bwd", args.repeats)
                    results[f"crossover {mode}"].append({"dtype": dtype_name, "dim": dim, "heads": heads, "n": n,
                                                         **row})
                save(finished=False)
    os.environ.pop("LINTF_CUDA_KERNEL", None)
    save(finished=True)


def write(results: dict[str, list[dict]], names: list[str], fla_note: str, argv: list[str], out: Path,
          finished: bool) -> None:
    """Write the tables so far; an unfinished run's file says it stopped early (and nothing is printed)."""
    command = "python -m benchmarks.causal_product_gpu " + shlex.join(argv)
    props = torch.cuda.get_device_properties(0)
    lines = [
        "# Causal linear attention on a GPU", "", f"`{command}`", "",
        f"GPU: {torch.cuda.get_device_name(0)} ({props.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}; flash-linear-attention: {fla_note}. fp32 matmul precision: "
        f"{torch.get_float32_matmul_precision()} (lintf chunked runs fp32 as 3xTF32 at 'highest').",
        "", f"B*H heads of H = {HEADS}, C = M. Median ms per call (CUDA events); in brackets the ratio to lintf chunked on "
        "the same row (> 1: slower than lintf chunked).", "",
    ]
    if not finished:
        lines += ["**Incomplete run**: the rows below are those finished before the run stopped; the ones its "
                  "command asks for beyond them were not measured.", ""]
    for mode in ("fwd", "fwd+bwd"):
        lines += [f"## {mode}", "", *table(results[mode], names, "lintf chunked"), ""]
    if results["crossover fwd"]:
        lines += ["## Short sequences: chunked vs scan kernel", "",
                  "Where the scan (ratio < 1) beats the chunked kernel, the op's automatic choice should take it "
                  "(it takes the chunked kernel wherever that applies).", ""]
        for mode in ("fwd", "fwd+bwd"):
            lines += [f"### {mode}", "", *table(results[f"crossover {mode}"], ["lintf chunked", "lintf scan"],
                                                 "lintf chunked"), ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "causal_product_gpu.md").write_text("\n".join(lines))
    (out / "causal_product_gpu.json").write_text(json.dumps(
        {"command": command, "gpu": torch.cuda.get_device_name(0), "finished": finished, "results": results}, indent=1))
    if finished:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
