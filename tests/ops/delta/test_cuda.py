"""The delta rule's CUDA op against the naive fp64 recurrence and the CPU (skipped without a GPU).

Its sweeps run under the CPU emulation and its ATen part on CPU tensors in test_cuda_emulated.py; this
file checks the op on the hardware: outputs, final state and every gradient (q, k, v, beta, log_decay,
initial state) with and without decay, state continuation, opcheck, the PyTorch path for what the
kernels refuse, autocast, torch.compile and the delta_net and gated_delta_net attentions on CUDA
tensors (CUDA-graph capture: tests/ops/common/test_cuda_graphs.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.ops import delta_rule
from lintf.ops.delta import compiled
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.cuda_checks import assert_attention_on_cuda_matches_the_cpu
from tests.ops.scaled_error import scaled_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# largest |error| / max(1, max |reference|) against the fp64 recurrence of the same (rounded) inputs; the
# CUDA path computes in fp32 whatever the inputs, so 16-bit inputs add the rounding of their outputs
TOLERANCE = {torch.float64: 1e-10, torch.float32: 5e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
# (B, H, N, C, M): N = 1, N not a multiple of the 64-position chunk, C, M from 16 to 128, a head too wide
# for the kernels (the PyTorch path)
SHAPES = [(1, 2, 1, 16, 16), (2, 3, 130, 16, 64), (1, 2, 300, 64, 128), (1, 1, 200, 128, 16), (1, 2, 70, 200, 8)]


@pytest.fixture(scope="module", autouse=True)
def cuda_op() -> None:
    assert compiled.serves(torch.device("cuda")), "the op was built without its CUDA kernels (is CUDA_HOME set?)"


def leaves(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype, decay: bool) -> list:
    """L2-normalised q, k and v (dtype), beta, log_decay (or None) and an initial state on the CPU, requiring grad."""
    gen = torch.Generator().manual_seed(0)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    q, k = (F.normalize(torch.randn(b, h, n, c, generator=gen), dim=-1).to(dtype) for _ in range(2))
    v = torch.randn(b, h, n, m, generator=gen).to(dtype)
    beta = (2 * torch.rand(b, h, n, generator=gen)).to(acc)
    log_decay = F.logsigmoid(torch.randn(b, h, n, generator=gen) + 2).to(acc) if decay else None
    state = torch.randn(b, h, c, m, generator=gen).to(acc)
    return [t.requires_grad_() if t is not None else None for t in (q, k, v, beta, log_decay, state)]


def op(q, k, v, beta, log_decay, state):
    return delta_rule(q, k, v, beta, log_decay=log_decay, initial_state=state, return_state=True)


def reference(q, k, v, beta, log_decay, state):
    return delta_rule_reference(q, k, v, beta, log_decay, state, q.shape[-1] ** -0.5)


def outputs_and_grads(tensors: list, upstream: list[torch.Tensor], fn=op) -> list[torch.Tensor]:
    """out, final state and the gradients of every leaf (log_decay when given) for the upstream gradients."""
    out, final = fn(*tensors)
    return [out, final, *torch.autograd.grad([out, final], [t for t in tensors if t is not None], upstream)]


@pytest.mark.parametrize("decay", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cuda_matches_the_recurrence(shape, dtype, decay):
    cpu = leaves(*shape, dtype, decay)
    b, h, n, c, m = shape
    upstream = [torch.randn(b, h, n, m).to(dtype), torch.randn(b, h, c, m).to(cpu[3].dtype)]
    exact = [t.detach().double().requires_grad_() if t is not None else None for t in cpu]
    want = outputs_and_grads(exact, [u.double() for u in upstream], reference)
    gpu = [t.detach().cuda().requires_grad_() if t is not None else None for t in cpu]
    got = outputs_and_grads(gpu, [u.cuda() for u in upstream])
    names = ["out", "final", "dq", "dk", "dv", "d beta"] + (["d log_decay"] if decay else []) + ["d state"]
    for name, g, w in zip(names, got, want, strict=True):
        assert g.device.type == "cuda"
        error = scaled_error(g, w)
        assert error <= TOLERANCE[dtype], f"{name}: scaled error {error:.2e} ({dtype}, shape {shape})"


def test_state_continuation_equals_one_pass():
    q, k, v, beta, log_decay, state = (t.detach().cuda() for t in leaves(2, 2, 200, 32, 32, torch.float32, True))
    whole, final = op(q, k, v, beta, log_decay, state)
    cut = [(t[:, :, :77], t[:, :, 77:]) for t in (q, k, v, beta, log_decay)]
    first, middle = op(*(a for a, _ in cut), state)
    second, last = op(*(b for _, b in cut), middle)
    assert scaled_error(torch.cat([first, second], 2), whole) < 1e-5 and scaled_error(last, final) < 1e-5


@pytest.mark.parametrize("decay", [False, True], ids=["plain", "gated"])
def test_opcheck(decay):
    q, k, v, beta, log_decay, state = (t.detach().cuda().requires_grad_() if t is not None else None
                                       for t in leaves(1, 2, 70, 16, 8, torch.float32, decay))
    torch.library.opcheck(torch.ops.lintf.delta_rule.default, (q, k, v, beta, log_decay, 0.25, state))


def test_inputs_the_kernels_refuse_get_a_clear_error_from_the_op():
    q, k, v, beta, _, _ = (t.detach().cuda() if t is not None else None
                           for t in leaves(1, 1, 10, 200, 8, torch.float32, False))
    with pytest.raises(RuntimeError, match="at most 128 features"):
        torch.ops.lintf.delta_rule(q, k, v, beta, None, 0.1, None)


def test_under_autocast_bf16_inputs_run_with_fp32_accumulation():
    q, k, v, beta, log_decay, _ = (t.detach().cuda() for t in leaves(1, 2, 130, 32, 32, torch.bfloat16, True))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = delta_rule(q, k, v, beta, log_decay=log_decay)
    want, _ = reference(*(t.double() for t in (q, k, v, beta, log_decay)), None)
    assert out.dtype == torch.bfloat16 and scaled_error(out, want) < TOLERANCE[torch.bfloat16]


def test_torch_compile_fullgraph_matches_eager():
    q, k, v, beta, log_decay, _ = (t.detach().cuda() for t in leaves(2, 2, 100, 32, 16, torch.bfloat16, True))

    def fn(q, k, v, beta, log_decay):
        return delta_rule(q, k, v, beta, log_decay=log_decay)

    compiled_fn = torch.compile(fn, fullgraph=True)
    assert torch.equal(compiled_fn(q, k, v, beta, log_decay), fn(q, k, v, beta, log_decay))


@pytest.mark.parametrize("name", ["delta_net", "gated_delta_net"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attentions_on_cuda_match_the_cpu(name, dtype):
    assert_attention_on_cuda_matches_the_cpu(name, dtype, 2 * TOLERANCE[dtype])


def test_cuda_tensors_take_the_compiled_op(monkeypatch):
    calls = []
    monkeypatch.setattr(compiled, "delta_rule", lambda *args: calls.append(args) or (args[2].clone(), None))
    q = F.normalize(torch.randn(1, 1, 8, 4, device="cuda"), dim=-1)
    delta_rule(q, q, q, torch.full((1, 1, 8), 0.5, device="cuda"))
    assert len(calls) == 1


def test_fp64_on_cuda_takes_the_pytorch_path(monkeypatch):
    monkeypatch.setattr(compiled, "delta_rule", lambda *args: pytest.fail("fp64 reached the CUDA kernels"))
    q = F.normalize(torch.randn(1, 1, 8, 4, device="cuda", dtype=torch.float64), dim=-1)
    delta_rule(q, q, q, torch.full((1, 1, 8), 0.5, device="cuda", dtype=torch.float64))
