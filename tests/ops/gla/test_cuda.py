"""Gated linear attention's CUDA op against the naive fp64 recurrence and the CPU (skipped without a GPU).

Its kernels run under the CPU emulation in test_cuda_emulated.py; this file checks them on the hardware:
outputs, final state and every gradient (q, k, v, log_gate, initial state), state continuation, the
PyTorch path for what the kernels refuse, autocast, torch.compile and the `gla` attention on CUDA tensors
(CUDA-graph capture: tests/ops/common/test_cuda_graphs.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.ops import gated_linear_attention
from lintf.ops.gla import compiled
from lintf.ops.gla.reference import gated_linear_attention_reference
from tests.ops.cuda_checks import assert_attention_on_cuda_matches_the_cpu
from tests.ops.scaled_error import scaled_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# largest |error| / max(1, max |reference|) against the fp64 recurrence of the same (rounded) inputs
TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}
# (B, H, N, C, M): N = 1, N not a multiple of the 64-position chunk, C, M from 16 to 128, a head too wide
# for the kernels (the PyTorch path)
SHAPES = [(1, 2, 1, 16, 16), (2, 3, 130, 16, 64), (1, 2, 300, 64, 128), (1, 1, 200, 128, 16), (1, 2, 70, 200, 8)]
GATES = {"strong": (-5.0, -1.0), "weak": (-1e-3, -1e-4)}


@pytest.fixture(scope="module", autouse=True)
def cuda_op() -> None:
    assert compiled.serves(torch.device("cuda")), "the op was built without its CUDA kernels (is CUDA_HOME set?)"


def leaves(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype, gates: tuple[float, float]) -> list:
    """q, k, v (dtype), log_gate and an initial state (the accumulation dtype) on the CPU, requiring grad."""
    gen = torch.Generator().manual_seed(0)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    low, high = gates
    q = torch.randn(b, h, n, c, generator=gen).to(dtype)
    k = (torch.randn(b, h, n, c, generator=gen) / c**0.5).to(dtype)
    v = torch.randn(b, h, n, m, generator=gen).to(dtype)
    log_gate = (torch.rand(b, h, n, c, generator=gen) * (high - low) + low).to(acc)
    state = torch.randn(b, h, c, m, generator=gen).to(acc)
    return [t.requires_grad_() for t in (q, k, v, log_gate, state)]


def op(q, k, v, log_gate, state):
    return gated_linear_attention(q, k, v, log_gate, initial_state=state, return_state=True)


def reference(q, k, v, log_gate, state):
    return gated_linear_attention_reference(q, k, v, log_gate, state, q.shape[-1] ** -0.5)


def outputs_and_grads(tensors: list[torch.Tensor], upstream: list[torch.Tensor], fn=op) -> list[torch.Tensor]:
    """out, final state and the gradients of every leaf for the given upstream gradients."""
    out, final = fn(*tensors)
    return [out, final, *torch.autograd.grad([out, final], tensors, upstream)]


@pytest.mark.parametrize("gates", GATES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cuda_matches_the_recurrence(shape, dtype, gates):
    cpu = leaves(*shape, dtype, GATES[gates])
    b, h, n, c, m = shape
    upstream = [torch.randn(b, h, n, m).to(dtype), torch.randn(b, h, c, m).to(cpu[3].dtype)]
    exact = [t.detach().double().requires_grad_() for t in cpu]
    want = outputs_and_grads(exact, [u.double() for u in upstream], reference)
    gpu = [t.detach().cuda().requires_grad_() for t in cpu]
    got = outputs_and_grads(gpu, [u.cuda() for u in upstream])
    for name, g, w in zip(["out", "final", "dq", "dk", "dv", "d log_gate", "d state"], got, want):
        assert g.device.type == "cuda"
        error = scaled_error(g, w)
        assert error <= TOLERANCE[dtype], f"{name}: scaled error {error:.2e} ({dtype}, shape {shape})"


def test_state_continuation_equals_one_pass():
    q, k, v, log_gate, state = (t.detach().cuda() for t in leaves(2, 2, 200, 32, 32, torch.float32, (-0.1, -1e-3)))
    whole, final = op(q, k, v, log_gate, state)
    first, middle = op(q[:, :, :77], k[:, :, :77], v[:, :, :77], log_gate[:, :, :77], state)
    second, last = op(q[:, :, 77:], k[:, :, 77:], v[:, :, 77:], log_gate[:, :, 77:], middle)
    assert scaled_error(torch.cat([first, second], 2), whole) < 1e-5 and scaled_error(last, final) < 1e-5


def test_opcheck():
    q, k, v, log_gate, state = (t.detach().cuda().requires_grad_()
                                for t in leaves(1, 2, 70, 16, 8, torch.float32, (-1.0, -0.01)))
    torch.library.opcheck(torch.ops.lintf.gated_linear_attention.default, (q, k, v, log_gate, 0.25, state))


def test_inputs_the_kernels_refuse_get_a_clear_error_from_the_op():
    q, k, v, log_gate, _ = (t.detach().cuda() for t in leaves(1, 1, 10, 200, 8, torch.float32, (-1.0, -0.1)))
    with pytest.raises(RuntimeError, match="at most 128 features"):
        torch.ops.lintf.gated_linear_attention(q, k, v, log_gate, 0.1, None)


def test_under_autocast_bf16_inputs_run_with_fp32_accumulation():
    q, k, v, log_gate, _ = (t.detach().cuda() for t in leaves(1, 2, 130, 32, 32, torch.bfloat16, (-1.0, -0.01)))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = gated_linear_attention(q, k, v, log_gate)
    want, _ = reference(*(t.double() for t in (q, k, v, log_gate)), None)
    assert out.dtype == torch.bfloat16 and scaled_error(out, want) < TOLERANCE[torch.bfloat16]


def test_torch_compile_fullgraph_matches_eager():
    q, k, v, log_gate, _ = (t.detach().cuda() for t in leaves(2, 2, 100, 32, 16, torch.bfloat16, (-1.0, -0.01)))

    def fn(q, k, v, log_gate):
        return gated_linear_attention(q, k, v, log_gate)

    compiled_fn = torch.compile(fn, fullgraph=True)
    assert torch.equal(compiled_fn(q, k, v, log_gate), fn(q, k, v, log_gate))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gla_attention_on_cuda_matches_the_cpu(dtype):
    assert_attention_on_cuda_matches_the_cpu("gla", dtype, 2 * TOLERANCE[dtype])


def test_cuda_tensors_take_the_compiled_op(monkeypatch):
    calls = []
    monkeypatch.setattr(compiled, "gated_linear_attention", lambda *args: calls.append(args) or (args[2].clone(), None))
    q = torch.randn(1, 1, 8, 4, device="cuda")
    gated_linear_attention(q, q, q, -F.softplus(torch.randn(1, 1, 8, 4, device="cuda")))
    assert len(calls) == 1


def test_fp64_on_cuda_takes_the_pytorch_path(monkeypatch):
    monkeypatch.setattr(compiled, "gated_linear_attention", lambda *args: pytest.fail("fp64 reached the CUDA kernels"))
    q = torch.randn(1, 1, 8, 4, device="cuda", dtype=torch.float64)
    gated_linear_attention(q, q, q, -F.softplus(torch.randn(1, 1, 8, 4, device="cuda", dtype=torch.float64)))
