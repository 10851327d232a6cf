"""Memory per rank of causal linear attention over one long sequence split across 1, 2 and 4 processes.

    python -m benchmarks.sequence_parallel [--length 262144] [--ranks 1 2 4]

Each run spawns R gloo processes (one thread each); rank r holds positions [r N/R, (r+1) N/R) of
q, k, v (B=1, H=4, C=M=32, fp32, q and k elu+1 feature maps) and runs forward+backward of
``lintf.ops.sequence_parallel_causal_linear_attention``. Reported per rank: the
inputs it holds, and the peak resident memory of the forward+backward beyond them (Linux's
resettable VmHWM; the processes return freed memory to the kernel at once). The outputs of every
rank are checked against the single-process op on the whole sequence. Writes
benchmarks/results/sequence_parallel.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from benchmarks.measure import peak_extra_mb, release_freed_memory_eagerly
from lintf.run.checkpoint_files import load_checkpoint_file
from lintf.ops import causal_linear_attention, sequence_parallel_causal_linear_attention, split_sequence

HEADS, FEATURES = 4, 32
RESULTS = Path(__file__).parent / "results"


def inputs(length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, length, FEATURES, generator=generator) for _ in range(3))
    return F.elu(q) + 1, F.elu(k) + 1, v


def rank_main(rank: int, world: int, port: int, length: int, directory: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    q, k, v = (split_sequence(t).contiguous() for t in inputs(length))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    held = sum(t.numel() * t.element_size() for t in (q, k, v)) / 2**20

    def forward_backward() -> torch.Tensor:
        out = sequence_parallel_causal_linear_attention(q, k, v)
        out.sum().backward()
        return out

    forward_backward()  # warm-up: buffers of the first call are not the op's working memory
    q.grad = k.grad = v.grad = None
    dist.barrier()
    start = time.perf_counter()
    extra = peak_extra_mb(forward_backward)
    seconds = time.perf_counter() - start
    out = sequence_parallel_causal_linear_attention(q, k, v).detach()
    torch.save({"out": out, "inputs_mb": held, "extra_mb": extra, "seconds": seconds},
               os.path.join(directory, f"rank{rank}.pt"))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure(world: int, length: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        mp.spawn(rank_main, args=(world, free_port(), length, directory), nprocs=world, join=True)
        parts = [load_checkpoint_file(Path(directory) / f"rank{r}.pt") for r in range(world)]
    return {"world": world, "parts": parts}


def check(results: list[dict], length: int) -> float:
    """Largest relative error of any run's joined outputs against the single-process op on the whole sequence."""
    torch.set_num_threads(1)
    q, k, v = inputs(length)
    whole = causal_linear_attention(q, k, v)
    errors = [float((torch.cat([p["out"] for p in r["parts"]], dim=2) - whole).norm() / whole.norm()) for r in results]
    return max(errors)


def report(results: list[dict], length: int, error: float) -> str:
    lines = ["# Sequence parallelism: memory per rank", "",
             f"`python -m benchmarks.sequence_parallel --length {length}`: causal linear attention forward+backward, "
             f"N={length}, B=1, H={HEADS}, C=M={FEATURES}, fp32, one thread per rank, gloo. Largest relative error of "
             f"the joined outputs against the single-process op: {error:.1e}.", "",
             "| ranks | positions per rank | inputs per rank (MiB) | peak extra per rank, fwd+bwd (MiB) | vs 1 rank | "
             "fwd+bwd s (slowest rank) |", "|---:|---:|---:|---:|---:|---:|"]
    single = max(p["extra_mb"] for p in results[0]["parts"])
    for r in results:
        extra = max(p["extra_mb"] for p in r["parts"])
        seconds = max(p["seconds"] for p in r["parts"])
        lines.append(f"| {r['world']} | {length // r['world']} | {r['parts'][0]['inputs_mb']:.0f} | {extra:.0f} | "
                     f"{extra / single:.2f}x | {seconds:.2f} |")
    return "\n".join(lines)


def main() -> None:
    release_freed_memory_eagerly()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=262_144)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.ranks[0] != 1:
        parser.error("--ranks must start with 1 (the baseline the others are compared with)")
    results = [measure(world, args.length) for world in args.ranks]
    text = report(results, args.length, check(results, args.length))
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sequence_parallel.md").write_text(text + "\n")
    summary = [{"ranks": r["world"], "extra_mb": [p["extra_mb"] for p in r["parts"]],
                "inputs_mb": r["parts"][0]["inputs_mb"], "seconds": [p["seconds"] for p in r["parts"]]} for r in results]
    (args.out / "sequence_parallel.json").write_text(json.dumps({"length": args.length, "results": summary}, indent=2))


if __name__ == "__main__":
    main()
