"""GPU benchmark of the decayed causal product: lintf's CUDA kernels against its PyTorch path and FLA.

    python -m benchmarks.decayed_product_gpu [--heads 16 128 512] [--lengths 512 1024 2048 4096 16384 65536]
        [--dims 64 128] [--dtypes bf16 fp16 fp32] [--impls NAME ...] [--max-positions 8388608] [--repeats 10]
        [--out DIR]

out_i = q_i S_i, S_i = exp(a_i) S_{i-1} + k_i v_i^T with one log-decay a per head and position
(gated_linear's and retention's recurrence), B*H heads of H = 16, C = M = dim, q, k, v Gaussian
(q, k scaled by dim^-1/2), a = logsigmoid(x + 3), x Gaussian. For every (dtype, dim, B*H, N), forward
and forward+backward (gradients of q, k, v and a) of:
  lintf cuda      lintf.ops.decayed_dot_product: the compiled op's chunked tensor-core kernels
  lintf pytorch   lintf's pure-PyTorch chunked path (lintf.ops.decayed.chunked) on the GPU, fp32 inside
  FLA             flash-linear-attention's chunk_simple_gla (g = a, scale = 1; inputs transposed to its
                  [B, T, H, K] layout inside the timed call), when `fla` is importable
Times are medians over --repeats runs (CUDA events, after warm-up; benchmarks.causal_product_gpu.time_ms);
each cell gives the ratio to lintf cuda on its row, and the last column lintf cuda / FLA (target: at most 1.2).
Rows with B*H*N above --max-positions are left out (their tensors outgrow the GPU). Writes
decayed_product_gpu.{md,json} into --out (default benchmarks/results), headed by the command and the GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.causal_product_gpu import HEADS, cell, check_batch_heads, time_ms
from lintf.ops import compiled_op_available, decayed_dot_product
from lintf.ops.decayed.chunked import DEFAULT_CHUNK_SIZE, decayed_product_chunked

RESULTS = Path(__file__).parent / "results"
NAMES = ("lintf cuda", "lintf pytorch", "FLA")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
Op = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def lintf_pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor) -> torch.Tensor:
    out, _ = decayed_product_chunked(q.float(), k.float(), v.float(), log_decay, DEFAULT_CHUNK_SIZE)
    return out.to(v.dtype)


def fla_implementation() -> tuple[dict[str, Op], str]:
    """flash-linear-attention's chunk_simple_gla, or nothing (and why)."""
    try:
        import fla
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as error:  # noqa: BLE001 (any import failure means: not available here)
        return {}, f"not available ({type(error).__name__}: {str(error)[:120]})"

    def simple_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # FLA's [B, T, H, K] layout
        return chunk_simple_gla(q, k, v, g=log_decay.transpose(1, 2).contiguous(), scale=1.0)[0].transpose(1, 2)

    return {"FLA": simple_gla}, f"fla {getattr(fla, '__version__', 'unknown version')}"


def inputs(batch_heads: int, n: int, dim: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """q, k, v, log_decay (fp32) requiring gradients, and the upstream gradient."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch_heads // HEADS, HEADS, n, dim)
    q, k = (torch.randn(shape, generator=gen, device="cuda") / dim**0.5 for _ in range(2))
    v, grad = (torch.randn(shape, generator=gen, device="cuda") for _ in range(2))
    log_decay = F.logsigmoid(torch.randn(shape[:3], generator=gen, device="cuda") + 3)
    return [q.to(dtype), k.to(dtype), v.to(dtype), log_decay, grad.to(dtype)]


def measure(impls: dict[str, Op], batch_heads: int, n: int, dim: int, dtype: torch.dtype, backward: bool,
            repeats: int, make_inputs: Callable[..., list[torch.Tensor]] = inputs) -> dict:
    """One row: each implementation's median ms (or why it has none) on make_inputs(batch_heads, n, dim, dtype)."""
    row = {}
    for name, op in impls.items():
        torch.cuda.empty_cache()
        try:
            q, k, v, log_decay, grad = make_inputs(batch_heads, n, dim, dtype)
            log_decay.requires_grad_(backward)
            fn = lambda q, k, v: op(q, k, v, log_decay)  # noqa: E731 (time_ms times fn(q, k, v))
            row[name] = time_ms(fn, [t.requires_grad_(backward) for t in (q, k, v)] + [grad], backward, repeats)
        except torch.cuda.OutOfMemoryError:
            row[name] = "OOM"
        except Exception as error:  # noqa: BLE001 (a failing alternative is reported, not fatal)
            row[name] = f"error: {type(error).__name__}"
            print(f"  {name}: {type(error).__name__}: {str(error).strip().splitlines()[:1]}", flush=True)
        print(f"  {name:13s} {'fwd+bwd' if backward else 'fwd':7s} BH={batch_heads:4d} N={n:6d} dim={dim:3d} {dtype}: "
              f"{row[name]}", flush=True)
    return row


def versus_fla(row: dict) -> str:
    """lintf cuda / FLA on a row, or a dash when either is missing."""
    ours, theirs = row.get("lintf cuda"), row.get("FLA")
    return f"{ours / theirs:.2f}" if isinstance(ours, float) and isinstance(theirs, float) else "-"


def table(rows: list[dict], names: list[str]) -> list[str]:
    """Rows ordered by dtype, dim, B*H, N; each time with its ratio to lintf cuda, then lintf cuda / FLA."""
    lines = ["| dtype | C=M | B*H | N | " + " | ".join(f"{n} ms" for n in names) + " | lintf cuda / FLA |",
             "|---|---|---|---|" + "---:|" * (len(names) + 1)]
    for r in sorted(rows, key=lambda r: (list(DTYPES).index(r["dtype"]), r["dim"], r["heads"], r["n"])):
        times = " | ".join(cell(r.get(n, "-"), r["lintf cuda"]) for n in names)
        lines.append(f"| {r['dtype']} | {r['dim']} | {r['heads']} | {r['n']} | {times} | {versus_fla(r)} |")
    return lines


def parse(argv: list[str], module: str = "decayed_product_gpu", description: str = __doc__,
          more: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The options of this benchmark or of one that shares them (benchmarks.<module>, writing <module>.{md,json}),
    with the options that `more` adds."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{module}", description=description.splitlines()[0])
    if more is not None:
        more(parser)
    parser.add_argument("--heads", type=int, nargs="+", default=[16, 128, 512], help="B*H, multiples of 16")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 16384, 65536])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", choices=list(DTYPES), nargs="+", default=list(DTYPES))
    parser.add_argument("--impls", nargs="+", metavar="NAME", help=f"only these ({', '.join(NAMES)})")
    parser.add_argument("--max-positions", type=int, default=2**23, help="skip rows with B*H*N above this")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"directory for {module}.{{md,json}}")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.impls or []) - set(NAMES))
    if unknown:
        parser.error(f"--impls: unknown {', '.join(map(repr, unknown))}; allowed: {', '.join(NAMES)}")
    check_batch_heads(parser, args.heads)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is a file; give a directory (created if missing)")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse(argv)
    if not torch.cuda.is_available():
        sys.exit("benchmarks.decayed_product_gpu needs a CUDA device (none is visible to torch here)")
    if not compiled_op_available("cuda"):
        sys.exit("the lintf op has no CUDA kernel here (built without a GPU or CUDA toolkit; see docs/gpu.md)")
    wanted = {"lintf cuda", *(args.impls or NAMES)}
    fla, fla_note = fla_implementation() if "FLA" in wanted else ({}, "not timed")
    impls = {"lintf cuda": decayed_dot_product, "lintf pytorch": lintf_pytorch, **fla}
    impls = {name: op for name, op in impls.items() if name in wanted}
    run_grid(impls, inputs, fla_note, argv, args)


def run_grid(impls: dict[str, Op], make_inputs: Callable[..., list[torch.Tensor]], fla_note: str, argv: list[str],
             args: argparse.Namespace, module: str = "decayed_product_gpu",
             title: str = "The decayed causal product on a GPU", stem: str | None = None) -> None:
    """Measure fwd and fwd+bwd of every implementation on each (dtype, dim, B*H, N) of args, writing after each row.

    Args:
        impls: name -> op(q, k, v, gates) of make_inputs' tensors.
        make_inputs: (batch_heads, n, dim, dtype) -> [q, k, v, gates, upstream gradient].
        fla_note: what became of FLA (its version, or why it is missing).
        argv: the command's arguments, for the report.
        args: the parsed options.
        module, title, stem: as write's.
    """
    results: dict[str, list[dict]] = {"fwd": [], "fwd+bwd": []}
    for dtype_name, dim, heads, n in itertools.product(args.dtypes, args.dims, args.heads, args.lengths):
        if heads * n > args.max_positions:
            continue
        for mode in results:
            row = measure(impls, heads, n, dim, DTYPES[dtype_name], mode == "fwd+bwd", args.repeats, make_inputs)
            results[mode].append({"dtype": dtype_name, "dim": dim, "heads": heads, "n": n, **row})
            write(results, list(impls), fla_note, argv, args, False, module, title, stem)
    write(results, list(impls), fla_note, argv, args, True, module, title, stem)


def write(results: dict[str, list[dict]], names: list[str], fla_note: str, argv: list[str],
          args: argparse.Namespace, finished: bool, module: str = "decayed_product_gpu",
          title: str = "The decayed causal product on a GPU", stem: str | None = None) -> None:
    """Write the tables so far (after every row, so a run cut short keeps what it measured) to <stem>.{md,json}
    (stem: the module's name unless given)."""
    command = f"python -m benchmarks.{module} " + shlex.join(argv)
    props = torch.cuda.get_device_properties(0)
    lines = [
        f"# {title}", "", f"`{command}`", "",
        f"GPU: {torch.cuda.get_device_name(0)} ({props.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}; flash-linear-attention: {fla_note}. fp32 matmul precision: "
        f"{torch.get_float32_matmul_precision()} (lintf cuda runs fp32 as 3xTF32 at 'highest').", "",
        f"H = {HEADS}, C = M, rows with B*H*N > {args.max_positions} left out. Median ms per call (CUDA events); in "
        "brackets the ratio to lintf cuda on the same row (> 1: slower than lintf cuda).", "",
    ]
    if not finished:
        lines += ["**Incomplete run**: only the rows finished before the run stopped.", ""]
    for mode, rows in results.items():
        lines += [f"## {mode}", "", *table(rows, names), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = stem or module
    (args.out / f"{stem}.md").write_text("\n".join(lines))
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"command": command, "gpu": torch.cuda.get_device_name(0), "finished": finished, "results": results}, indent=1))
    if finished:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
