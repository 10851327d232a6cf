"""GPU benchmark of the delta rule (DeltaNet, Gated DeltaNet): lintf's CUDA path against its PyTorch path and FLA.

    python -m benchmarks.delta_rule_gpu [--rule {delta,gated_delta}] [--heads 16 128 512]
        [--lengths 512 1024 2048 4096 16384 65536] [--dims 64 128] [--dtypes bf16 fp16 fp32] [--impls NAME ...]
        [--max-positions 8388608] [--repeats 10] [--out DIR]

u_t = beta_t (v_t - (a_t S_{t-1})^T k_t), S_t = a_t S_{t-1} + k_t u_t^T, out_t = S_t^T q_t (scale 1 here), with
a_t = 1 (--rule delta, DeltaNet) or exp(g_t), g = logsigmoid(x + 3) (gated_delta, Gated DeltaNet); B*H heads of
H = 16, C = M = dim, q, k Gaussian then L2-normalised, v Gaussian, beta = sigmoid(y), x, y Gaussian. For every
(dtype, dim, B*H, N), forward and forward+backward (gradients of q, k, v, beta and g) of:
  lintf cuda      lintf.ops.delta_rule: the compiled op (batched WY forms, sequential tensor-core state sweeps)
  lintf pytorch   lintf's pure-PyTorch chunked path (lintf.ops.delta.chunked) on the GPU, fp32 inside
  FLA             flash-linear-attention's chunk_delta_rule / chunk_gated_delta_rule (inputs transposed to its
                  [B, T, H, K] layout inside the timed call), when `fla` is importable
Every lintf call checks its gates' values (one read back to the host) and FLA's calls do not, which weighs on
lintf's times where a call is short. Times, ratios and the tables as in benchmarks.decayed_product_gpu (the
last column: lintf cuda / FLA, target at most 1.2); writes delta_rule_gpu_<rule>.{md,json} into --out (default
benchmarks/results).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from benchmarks.causal_product_gpu import HEADS
from benchmarks.decayed_product_gpu import NAMES, Op, parse, run_grid
from lintf.ops import compiled_op_available, delta_rule
from lintf.ops.delta.chunked import delta_rule_chunked

MODULE = "delta_rule_gpu"
RULES = {"delta": "The delta rule (DeltaNet) on a GPU", "gated_delta": "The gated delta rule (Gated DeltaNet) on a GPU"}


def split(gates: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """beta and log_decay (None for the plain rule) from the (B, H, N, 2) gates of the timed call."""
    return gates[..., 0], gates[..., 1] if gated else None


def implementations(gated: bool) -> tuple[dict[str, Op], str]:
    """Each implementation as op(q, k, v, gates), and what became of FLA."""

    def lintf_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        beta, log_decay = split(gates, gated)
        return delta_rule(q, k, v, beta, log_decay=log_decay, scale=1.0)

    def lintf_pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        beta, log_decay = split(gates, gated)
        out, _ = delta_rule_chunked(q.float(), k.float(), v.float(), beta, log_decay, 1.0, None)
        return out.to(v.dtype)

    impls = {"lintf cuda": lintf_cuda, "lintf pytorch": lintf_pytorch}
    try:
        import fla
        from fla.ops.delta_rule import chunk_delta_rule
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as error:  # noqa: BLE001 (any import failure means: not available here)
        return impls, f"not available ({type(error).__name__}: {str(error)[:120]})"

    def fla_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        q, k, v, gates = (t.transpose(1, 2).contiguous() for t in (q, k, v, gates))  # FLA's [B, T, H, K] layout
        beta, log_decay = split(gates, gated)
        if gated:
            return chunk_gated_delta_rule(q, k, v, g=log_decay, beta=beta, scale=1.0)[0].transpose(1, 2)
        return chunk_delta_rule(q, k, v, beta=beta, scale=1.0)[0].transpose(1, 2)

    return {**impls, "FLA": fla_chunk}, f"fla {getattr(fla, '__version__', 'unknown version')}"


def inputs(batch_heads: int, n: int, dim: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """L2-normalised q, k, v, the gates (B, H, N, 2) fp32: beta, log_decay, and the upstream gradient."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch_heads // HEADS, HEADS, n, dim)
    q, k = (F.normalize(torch.randn(shape, generator=gen, device="cuda"), dim=-1) for _ in range(2))
    v, grad = (torch.randn(shape, generator=gen, device="cuda") for _ in range(2))
    x = torch.randn(*shape[:3], 2, generator=gen, device="cuda")
    gates = torch.stack([torch.sigmoid(x[..., 0]), F.logsigmoid(x[..., 1] + 3)], dim=-1)
    return [q.to(dtype), k.to(dtype), v.to(dtype), gates, grad.to(dtype)]


def main(argv: list[str] | None = None) -> None:
    argv = argv if argv is not None else sys.argv[1:]

    def rule_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rule", choices=list(RULES), default="gated_delta",
                            help="delta (DeltaNet) or gated_delta (Gated DeltaNet, the default)")

    args = parse(argv, MODULE, __doc__, rule_option)
    if not torch.cuda.is_available():
        sys.exit(f"benchmarks.{MODULE} needs a CUDA device (none is visible to torch here)")
    if not compiled_op_available("cuda"):
        sys.exit("the lintf op has no CUDA kernel here (built without a GPU or CUDA toolkit; see docs/gpu.md)")
    wanted = {"lintf cuda", *(args.impls or NAMES)}
    impls, fla_note = implementations(args.rule == "gated_delta")
    impls = {name: op for name, op in impls.items() if name in wanted}
    fla_note = fla_note if "FLA" in wanted else "not timed"
    run_grid(impls, inputs, fla_note, argv, args, MODULE, RULES[args.rule], f"{MODULE}_{args.rule}")

if __name__ == "__main__":
    main()
