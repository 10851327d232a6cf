"""Cases that every op's emulated chunked kernels are checked on: operand types and the chunk plan."""

from __future__ import annotations

import pytest
import torch

# (dtype, fp32 matmul precision): fp32 runs as 3xTF32 by default and as TF32 when torch allows it
KINDS = {
    "fp32": (torch.float32, "highest"),
    "tf32": (torch.float32, "high"),
    "bf16": (torch.bfloat16, "highest"),
    "fp16": (torch.float16, "highest"),
}

# (dtype, N, C, M, the plan's [cp, mt, chunks, value_tiles])
PLANS = [
    (torch.bfloat16, 130, 17, 33, [32, 48, 3, 1]),  # c padded to 16s, value tile = m padded
    (torch.float16, 64, 64, 200, [64, 64, 1, 4]),  # value tiles of 64 columns
    (torch.float32, 10, 128, 128, [128, 32, 1, 4]),  # fp32 at 128 features: narrower tiles fit shared memory
]

# (dtype, C) that the chunked kernels leave to another path: fp64, more than 128 features
REFUSED = [(torch.float64, 8), (torch.float32, 129)]


def plan(op, dtype: torch.dtype, n: int, c: int, m: int) -> list[int]:
    """The emulated op's plan for q (1, 1, N, C) and v (1, 1, N, M) of dtype.

    Args:
        op: the emulated module (its ``plan`` raises RuntimeError "do not take" where the kernels refuse).
        dtype: the inputs' dtype.
        n: positions.
        c: features of q and k.
        m: value columns.
    """
    return op.plan(torch.zeros(1, 1, n, c, dtype=dtype), torch.zeros(1, 1, n, m, dtype=dtype))


# shared memory per block (opt-in) of GPUs the chunked kernels run on: an H100 (what the emulation reports
# unless told otherwise), an A100, and sm_86/sm_89 GPUs (A10, L4, RTX 30 and 40)
H100_SHARED, A100_SHARED, SM86_SHARED = 227 * 1024, 163 * 1024, 99 * 1024


def assert_plan_on_a_gpu_with(op, shared: int, dtype: torch.dtype, c: int, taken: bool) -> None:
    """The emulated op's plan for C features and 128 value columns on a GPU offering `shared` bytes per block:
    C padded to 16 where the kernels take it, a "do not take" refusal where they do not.

    Args:
        op: the emulated module (``plan`` and ``set_shared_bytes``).
        shared: the GPU's shared memory per block.
        dtype: the inputs' dtype.
        c: features of q and k.
        taken: whether the kernels fit.
    """
    op.set_shared_bytes(shared)
    try:
        if taken:
            assert plan(op, dtype, 10, c, 128)[0] == -(-c // 16) * 16
        else:
            with pytest.raises(RuntimeError, match="do not take"):
                plan(op, dtype, 10, c, 128)
    finally:
        op.set_shared_bytes(H100_SHARED)
