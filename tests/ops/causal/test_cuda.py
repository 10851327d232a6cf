"""The CUDA op, with its automatic choice of kernel, against the CPU op (skipped without a GPU).

Each kernel on its own, and against the fp64 reference: test_cuda_kernels.py.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention, compiled_op_available
from tests.ops.scaled_error import scaled_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


# Both ops round in the input dtype, so each differs from the exact result by about its rounding unit
# times the tensor's scale; the bound is the sum of the two ops' errors against fp64.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 4e-2, torch.float16: 1.5e-2}


def assert_scaled_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype | None = None) -> None:
    """scaled_error(got, want) within the tolerance of dtype (default: want's dtype)."""
    error = scaled_error(got, want)
    assert error <= TOLERANCE[dtype or want.dtype], f"scaled error {error:.2e} ({want.dtype}, shape {tuple(want.shape)})"


@pytest.fixture(scope="module", autouse=True)
def cuda_op() -> None:
    assert compiled_op_available("cuda"), "the op was built without its CUDA kernel (is CUDA_HOME set?)"


@pytest.mark.parametrize("fn", [causal_linear_attention, causal_dot_product])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 3, 37, 8, 5), (1, 1, 300, 64, 64), (1, 2, 20, 200, 3)], ids=str)
def test_cuda_matches_cpu(fn, dtype, shape):
    b, h, n, c, m = shape
    cpu = [torch.rand(b, h, n, c, dtype=dtype), torch.rand(b, h, n, c, dtype=dtype), torch.randn(b, h, n, m, dtype=dtype)]
    cpu = [t.requires_grad_() for t in cpu]
    gpu = [t.detach().cuda().requires_grad_() for t in cpu]
    upstream = torch.randn(b, h, n, m, dtype=dtype)
    want = [fn(*cpu)]
    want += torch.autograd.grad(want[0], cpu, upstream)
    got = [fn(*gpu)]
    got += torch.autograd.grad(got[0], gpu, upstream.cuda())
    for a, w in zip(got, want):
        assert a.dtype == dtype and a.device.type == "cuda"
        assert_scaled_close(a.cpu(), w)


def test_cuda_opcheck():
    q, k, v = (torch.rand(1, 2, 33, 4, device="cuda", requires_grad=True) for _ in range(3))
    torch.library.opcheck(torch.ops.lintf.causal_product.default, (q, k, v, 1e-6, True))


@pytest.mark.parametrize("fn", [causal_linear_attention, causal_dot_product])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cuda_state_matches_cpu(fn, dtype):
    """Initial state in, final state out, and the gradients of both (N = 37: the chunked kernel)."""
    b, h, n, c, m = 2, 3, 37, 8, 5
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    cpu = [torch.rand(b, h, n, c, dtype=dtype), torch.rand(b, h, n, c, dtype=dtype),
           torch.randn(b, h, n, m, dtype=dtype), torch.randn(b, h, c, m, dtype=acc), torch.rand(b, h, c, dtype=acc)]
    cpu = [t.requires_grad_() for t in cpu]
    gpu = [t.detach().cuda().requires_grad_() for t in cpu]
    upstream = [torch.randn(b, h, n, m, dtype=dtype), torch.randn(b, h, c, m, dtype=acc),
                torch.randn(b, h, c, dtype=acc)]

    def run(tensors: list[torch.Tensor], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        q, k, v, kv, z = tensors
        out, final = fn(q, k, v, initial_state=LinearAttentionState(kv, z), return_state=True)
        return [out, *final, *torch.autograd.grad([out, *final], tensors, grads)]

    want = run(cpu, upstream)
    got = run(gpu, [g.cuda() for g in upstream])
    for a, w in zip(got, want):
        assert a.dtype == w.dtype and a.device.type == "cuda"
        assert_scaled_close(a.cpu(), w, dtype)


def test_cuda_opcheck_with_state():
    q, k, v = (torch.rand(1, 2, 33, 4, device="cuda", requires_grad=True) for _ in range(3))
    kv = torch.randn(1, 2, 4, 4, device="cuda", requires_grad=True)
    z = torch.rand(1, 2, 4, device="cuda", requires_grad=True)
    for normalize in (True, False):
        torch.library.opcheck(torch.ops.lintf.causal_product.default, (q, k, v, 1e-6, normalize, kv, z))
