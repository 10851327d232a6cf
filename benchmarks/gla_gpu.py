"""GPU benchmark of gated linear attention (GLA): lintf's CUDA kernels against its PyTorch path and FLA.

    python -m benchmarks.gla_gpu [--heads 16 128 512] [--lengths 512 1024 2048 4096 16384 65536]
        [--dims 64 128] [--dtypes bf16 fp16 fp32] [--impls NAME ...] [--max-positions 8388608] [--repeats 10]
        [--out DIR]

out_t = S_t^T q_t, S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T with one log-gate per head, position and key
feature (the `gla` attention's recurrence; scale 1 here), B*H heads of H = 16, C = M = dim, q, k, v
Gaussian (q, k scaled by dim^-1/2), g = logsigmoid(x + 3), x Gaussian. For every (dtype, dim, B*H, N),
forward and forward+backward (gradients of q, k, v and g) of:
  lintf cuda      lintf.ops.gated_linear_attention: the compiled op's chunked tensor-core kernels
  lintf pytorch   lintf's pure-PyTorch chunked path (lintf.ops.gla.chunked) on the GPU, fp32 inside
  FLA             flash-linear-attention's chunk_gla (same g and scale; inputs transposed to its [B, T, H, K]
                  layout inside the timed call), when `fla` is importable
Every lintf call checks its gates' values (one read back to the host) and FLA's calls do not, which weighs on
lintf's times where a call is short. Times, ratios and the output files as in benchmarks.decayed_product_gpu
(the last column: lintf cuda / FLA, target at most 1.2); writes gla_gpu.{md,json} into --out (default
benchmarks/results).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from benchmarks.causal_product_gpu import HEADS
from benchmarks.decayed_product_gpu import NAMES, Op, parse, run_grid
from lintf.ops import compiled_op_available, gated_linear_attention
from lintf.ops.gla.chunked import gla_chunked

MODULE = "gla_gpu"
TITLE = "Gated linear attention on a GPU"


def lintf_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_gate: torch.Tensor) -> torch.Tensor:
    return gated_linear_attention(q, k, v, log_gate, scale=1.0)


def lintf_pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_gate: torch.Tensor) -> torch.Tensor:
    out, _ = gla_chunked(q.float(), k.float(), v.float(), log_gate, 1.0, None)
    return out.to(v.dtype)


def fla_implementation() -> tuple[dict[str, Op], str]:
    """flash-linear-attention's chunk_gla, or nothing (and why)."""
    try:
        import fla
        from fla.ops.gla import chunk_gla
    except Exception as error:  # noqa: BLE001 (any import failure means: not available here)
        return {}, f"not available ({type(error).__name__}: {str(error)[:120]})"

    def fla_chunk_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_gate: torch.Tensor) -> torch.Tensor:
        q, k, v, g = (t.transpose(1, 2).contiguous() for t in (q, k, v, log_gate))  # FLA's [B, T, H, K] layout
        return chunk_gla(q, k, v, g=g, scale=1.0)[0].transpose(1, 2)

    return {"FLA": fla_chunk_gla}, f"fla {getattr(fla, '__version__', 'unknown version')}"


def inputs(batch_heads: int, n: int, dim: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """q, k, v, log_gate (fp32, per key feature) and the upstream gradient."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch_heads // HEADS, HEADS, n, dim)
    q, k = (torch.randn(shape, generator=gen, device="cuda") / dim**0.5 for _ in range(2))
    v, grad = (torch.randn(shape, generator=gen, device="cuda") for _ in range(2))
    log_gate = F.logsigmoid(torch.randn(shape, generator=gen, device="cuda") + 3)
    return [q.to(dtype), k.to(dtype), v.to(dtype), log_gate, grad.to(dtype)]


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse(argv, MODULE, __doc__)
    if not torch.cuda.is_available():
        sys.exit(f"benchmarks.{MODULE} needs a CUDA device (none is visible to torch here)")
    if not compiled_op_available("cuda"):
        sys.exit("the lintf op has no CUDA kernel here (built without a GPU or CUDA toolkit; see docs/gpu.md)")
    wanted = {"lintf cuda", *(args.impls or NAMES)}
    fla, fla_note = fla_implementation() if "FLA" in wanted else ({}, "not timed")
    impls = {"lintf cuda": lintf_cuda, "lintf pytorch": lintf_pytorch, **fla}
    impls = {name: op for name, op in impls.items() if name in wanted}
    run_grid(impls, inputs, fla_note, argv, args, MODULE, TITLE)

if __name__ == "__main__":
    main()
