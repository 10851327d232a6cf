"""The decayed product's CUDA op against the naive fp64 recurrence and the CPU op (skipped without a GPU).

Its kernels run under the CPU emulation in test_cuda_emulated.py; this file checks them on the hardware:
outputs, final state and every gradient (q, k, v, log_decay, initial state), state continuation,
autocast, torch.compile and the gated_linear and retention attentions on CUDA tensors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.ops import decayed_dot_product
from lintf.ops.decayed import compiled
from lintf.ops.decayed.reference import decayed_recurrence_reference
from tests.ops.cuda_checks import assert_attention_on_cuda_matches_the_cpu
from tests.ops.scaled_error import scaled_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# largest |error| / max(1, max |reference|) against the fp64 recurrence of the same (rounded) inputs
TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}
# (B, H, N, C, M): N = 1, N not a multiple of the 64-position chunk, C, M from 16 to 128, a head too
# wide for the chunked kernels (the ATen form)
SHAPES = [(1, 2, 1, 16, 16), (2, 3, 130, 16, 64), (1, 2, 300, 64, 128), (1, 1, 200, 128, 16), (1, 2, 70, 200, 8)]


@pytest.fixture(scope="module", autouse=True)
def cuda_op() -> None:
    assert compiled.serves(torch.device("cuda")), "the op was built without its CUDA kernels (is CUDA_HOME set?)"


def leaves(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype, decay: tuple[float, float]) -> list:
    """q, k, v (dtype), log_decay and an initial state (the accumulation dtype) on the CPU, requiring grad."""
    gen = torch.Generator().manual_seed(0)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    low, high = decay
    q, k = ((torch.randn(b, h, n, c, generator=gen) / c**0.5).to(dtype) for _ in range(2))
    v = torch.randn(b, h, n, m, generator=gen).to(dtype)
    log_decay = (torch.rand(b, h, n, generator=gen) * (high - low) + low).to(acc)
    state = torch.randn(b, h, c, m, generator=gen).to(acc)
    return [t.requires_grad_() for t in (q, k, v, log_decay, state)]


def outputs_and_grads(tensors: list[torch.Tensor], upstream: list[torch.Tensor], fn=None) -> list[torch.Tensor]:
    """out, final state and the gradients of every leaf for the given upstream gradients."""
    q, k, v, log_decay, state = tensors
    if fn is None:
        out, final = decayed_dot_product(q, k, v, log_decay, initial_state=state, return_state=True)
    else:
        out, final = fn(q, k, v, log_decay, state)
    return [out, final, *torch.autograd.grad([out, final], tensors, upstream)]


@pytest.mark.parametrize("decay", [(-5.0, -1.0), (-1e-3, -1e-4)], ids=["strong", "weak"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cuda_matches_the_recurrence(shape, dtype, decay):
    cpu = leaves(*shape, dtype, decay)
    b, h, n, c, m = shape
    upstream = [torch.randn(b, h, n, m).to(dtype), torch.randn(b, h, c, m).to(cpu[3].dtype)]
    exact = [t.detach().double().requires_grad_() for t in cpu]
    want = outputs_and_grads(exact, [u.double() for u in upstream], decayed_recurrence_reference)
    gpu = [t.detach().cuda().requires_grad_() for t in cpu]
    got = outputs_and_grads(gpu, [u.cuda() for u in upstream])
    for name, g, w in zip(["out", "final", "dq", "dk", "dv", "d log_decay", "d state"], got, want):
        assert g.device.type == "cuda"
        error = scaled_error(g, w)
        assert error <= TOLERANCE[dtype], f"{name}: scaled error {error:.2e} ({dtype}, shape {shape})"


def test_state_continuation_equals_one_pass():
    q, k, v, log_decay, state = (t.detach().cuda() for t in leaves(2, 2, 200, 32, 32, torch.float32, (-0.1, -1e-3)))
    whole, final = decayed_dot_product(q, k, v, log_decay, initial_state=state, return_state=True)
    first, middle = decayed_dot_product(q[:, :, :77], k[:, :, :77], v[:, :, :77], log_decay[:, :, :77],
                                        initial_state=state, return_state=True)
    second, last = decayed_dot_product(q[:, :, 77:], k[:, :, 77:], v[:, :, 77:], log_decay[:, :, 77:],
                                       initial_state=middle, return_state=True)
    assert scaled_error(torch.cat([first, second], 2), whole) < 1e-5 and scaled_error(last, final) < 1e-5


def test_opcheck():
    q, k, v, log_decay, state = (t.detach().cuda().requires_grad_() for t in leaves(1, 2, 70, 16, 8, torch.float32,
                                                                                         (-1.0, -0.01)))
    torch.library.opcheck(torch.ops.lintf.decayed_product.default, (q, k, v, log_decay, state, 0))


def test_state_spacing_is_refused_on_cuda():
    q, k, v, log_decay, _ = (t.detach().cuda() for t in leaves(1, 1, 64, 16, 16, torch.float32, (-1.0, -0.1)))
    with pytest.raises(RuntimeError, match="state_spacing must be 0 on CUDA"):
        torch.ops.lintf.decayed_product(q, k, v, log_decay, None, 64)


def test_under_autocast_bf16_inputs_run_with_fp32_accumulation():
    """Inputs that autocast made bf16 (as its projections would) and fp32 log-decays, inside an autocast region."""
    q, k, v, log_decay, _ = (t.detach().cuda() for t in leaves(1, 2, 130, 32, 32, torch.bfloat16, (-1.0, -0.01)))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = decayed_dot_product(q, k, v, log_decay)
    want, _ = decayed_recurrence_reference(*(t.double() for t in (q, k, v, log_decay)))
    assert out.dtype == torch.bfloat16 and scaled_error(out, want) < TOLERANCE[torch.bfloat16]


def test_torch_compile_fullgraph_matches_eager():
    q, k, v, log_decay, _ = (t.detach().cuda() for t in leaves(2, 2, 100, 32, 16, torch.bfloat16, (-1.0, -0.01)))

    def fn(q, k, v, log_decay):
        return decayed_dot_product(q, k, v, log_decay)

    compiled_fn = torch.compile(fn, fullgraph=True)
    assert torch.equal(compiled_fn(q, k, v, log_decay), fn(q, k, v, log_decay))


@pytest.mark.parametrize("name", ["gated_linear", "retention"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attentions_on_cuda_match_the_cpu(name, dtype):
    assert_attention_on_cuda_matches_the_cpu(name, dtype, 2 * TOLERANCE[dtype])


def test_cuda_tensors_take_the_compiled_op(monkeypatch):
    calls = []
    monkeypatch.setattr(compiled, "decayed_product", lambda *args: calls.append(args) or (args[2].clone(), None))
    q = torch.randn(1, 1, 8, 4, device="cuda")
    decayed_dot_product(q, q, q, -F.softplus(torch.randn(1, 1, 8, device="cuda")))
    assert len(calls) == 1
