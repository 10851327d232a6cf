"""Each CUDA kernel against the fp64 reference and against the CPU op (skipped without a GPU).

LINTF_CUDA_KERNEL selects the kernel (chunked: tensor cores; scan: the sequential one); forward, final
state and every gradient (q, k, v, initial state) are compared for N from 1 to 16384, odd head sizes,
with and without a state, both normalisations. Then: non-contiguous inputs, autocast, torch.compile,
opcheck, the automatic choice of kernel, and the fallbacks for shapes the kernels do not take.
Errors are measured as max |got - want| / max(1, max |want|).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention, compiled_op_available
from lintf.ops.causal.reference import (
    causal_dot_product_reference,
    causal_linear_attention_reference,
    final_state_reference,
)
from tests.ops.scaled_error import scaled_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}
KERNEL_DTYPES = [("chunked", d) for d in (torch.float32, torch.bfloat16, torch.float16)] + [
    ("scan", d) for d in (torch.float64, torch.float32, torch.bfloat16, torch.float16)
]
LENGTHS = [1, 7, 64, 1000, 16384]
HEADS = [(17, 33), (64, 64)]
MODES = [(True, True), (False, True), (True, False)]  # (normalize, state)


@pytest.fixture(scope="module", autouse=True)
def cuda_op() -> None:
    assert compiled_op_available("cuda"), "the op was built without its CUDA kernel (is CUDA_HOME set?)"


def use_kernel(monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    monkeypatch.setenv("LINTF_CUDA_KERNEL", kernel)  # read by the op on every call


@functools.lru_cache(maxsize=8)
def master(n: int, c: int, m: int, state: bool) -> tuple[torch.Tensor, ...]:
    """fp64 q, k (positive, elu+1), v, upstream gradient; with state also kv0, z0 and their gradients."""
    gen = torch.Generator().manual_seed(n * 1000 + c)
    tensors = [F.elu(torch.randn(1, 2, n, c, generator=gen, dtype=torch.float64)) + 1 for _ in range(2)]
    tensors += [torch.randn(1, 2, n, m, generator=gen, dtype=torch.float64) for _ in range(2)]
    if state:
        tensors += [torch.randn(1, 2, c, m, generator=gen, dtype=torch.float64), torch.rand(1, 2, c, generator=gen, dtype=torch.float64)]
        tensors += [torch.randn(1, 2, c, m, generator=gen, dtype=torch.float64), torch.randn(1, 2, c, generator=gen, dtype=torch.float64)]
    return tuple(tensors)


def inputs(n: int, c: int, m: int, state: bool, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    """q, k, v, grad in dtype; states and their gradients in the accumulation dtype."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return [t.to(dtype if i < 4 else acc).to(device) for i, t in enumerate(master(n, c, m, state))]


def run(x: list[torch.Tensor], normalize: bool) -> list[torch.Tensor]:
    """out, final kv, final normaliser, dq, dk, dv (and d kv0, d z0) through the public op."""
    q, k, v, grad, *state = [t.detach() for t in x]
    leaves = [t.requires_grad_() for t in (q, k, v, *state[:2])]
    fn = causal_linear_attention if normalize else causal_dot_product
    initial = LinearAttentionState(*leaves[3:]) if state else None
    out, final = fn(*leaves[:3], initial_state=initial, return_state=True)
    outputs, upstream = [out, *final][: 3 if state else 1], [grad, *state[2:]]
    grads = torch.autograd.grad(outputs, leaves, upstream)
    return [out.detach(), *(t.detach() for t in final), *grads]


@functools.lru_cache(maxsize=16)
def reference(n: int, c: int, m: int, state: bool, dtype: torch.dtype, normalize: bool) -> tuple[torch.Tensor, ...]:
    """fp64 results for the inputs rounded to dtype (computed on the GPU: N = 16384 needs (N, N) matrices)."""
    q, k, v, grad, *states = [t.double() for t in inputs(n, c, m, state, dtype, "cuda")]
    leaves = [t.requires_grad_() for t in (q, k, v, *states[:2])]
    initial = LinearAttentionState(*leaves[3:]) if state else None
    if normalize:
        out = causal_linear_attention_reference(*leaves[:3], 1e-6, initial)
    else:
        out = causal_dot_product_reference(*leaves[:3], initial)
    final = final_state_reference(leaves[1], leaves[2], initial)
    loss = (out * grad).sum()
    if state:
        loss = loss + (final.kv * states[2]).sum() + (final.normaliser * states[3]).sum()
    return (out.detach(), final.kv.detach(), final.normaliser.detach(), *torch.autograd.grad(loss, leaves))


NAMES = ("out", "final kv", "final normaliser", "dq", "dk", "dv", "d kv0", "d z0")


def assert_close(got, want, tolerance: float, what: str, names: tuple[str, ...] = NAMES) -> None:
    for name, g, w in zip(names, got, want):
        error = scaled_error(g, w)
        assert torch.isfinite(g).all() and error <= tolerance, f"{what} {name}: error {error:.2e} > {tolerance:.0e}"


@pytest.mark.parametrize("normalize, state", MODES, ids=["norm-state", "numerator-state", "norm"])
@pytest.mark.parametrize("c, m", HEADS, ids=lambda x: str(x))
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("kernel, dtype", KERNEL_DTYPES, ids=lambda x: str(x).replace("torch.", ""))
def test_kernel_matches_reference_and_cpu(monkeypatch, kernel, dtype, n, c, m, normalize, state):
    use_kernel(monkeypatch, kernel)
    got = run(inputs(n, c, m, state, dtype, "cuda"), normalize)
    for g in got[:1] + got[3:6]:
        assert g.device.type == "cuda" and g.dtype == dtype
    assert_close(got, reference(n, c, m, state, dtype, normalize), TOLERANCE[dtype], "vs fp64")
    assert_close(got, run(inputs(n, c, m, state, dtype, "cpu"), normalize), TOLERANCE[dtype], "vs CPU op")


@pytest.mark.parametrize("kernel", ["chunked", "scan"])
def test_non_contiguous_inputs(monkeypatch, kernel):
    use_kernel(monkeypatch, kernel)
    x = inputs(300, 17, 33, True, torch.bfloat16, "cuda")
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in x[:3])  # (B, H, N, F) views of (B, N, H, F)
    wide = torch.zeros(*v.shape[:3], 66, dtype=v.dtype, device="cuda")
    wide[..., ::2] = v
    strided = [q, k, wide[..., ::2]]  # v: every other column
    assert not any(t.is_contiguous() for t in strided)
    for a, b in zip(run(x, True), run(strided + x[3:], True)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["chunked", "scan"])
def test_autocast(monkeypatch, kernel, dtype):
    """fp32 leaves under autocast (Lightning's bf16-mixed / 16-mixed): the op runs in the autocast dtype."""
    use_kernel(monkeypatch, kernel)
    q, k, v, grad = (t.float().requires_grad_() for t in inputs(1000, 17, 33, False, torch.float32, "cuda")[:4])
    with torch.autocast("cuda", dtype=dtype):
        out = causal_linear_attention(q, k, v)
    assert out.dtype == dtype
    grads = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    assert all(g.dtype == torch.float32 for g in grads)
    want = reference(1000, 17, 33, False, dtype, True)
    assert_close([out.detach(), *grads], [want[0], *want[3:6]], TOLERANCE[dtype], "autocast", ("out", "dq", "dk", "dv"))


@pytest.mark.parametrize("kernel", ["chunked", "scan"])
def test_torch_compile_fullgraph(monkeypatch, kernel):
    use_kernel(monkeypatch, kernel)

    def step(q, k, v, kv, z):
        out, final = causal_linear_attention(q, k, v, initial_state=LinearAttentionState(kv, z), return_state=True)
        return out, final.kv, final.normaliser

    x = inputs(200, 17, 33, True, torch.bfloat16, "cuda")
    compiled = torch.compile(step, fullgraph=True)
    results = []
    for fn in (step, compiled):
        leaves = [t.detach().requires_grad_() for t in x[:3] + x[4:6]]
        outs = fn(*leaves)
        results.append([*(o.detach() for o in outs), *torch.autograd.grad(outs, leaves, [x[3], *x[6:8]])])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("kernel", ["chunked", "scan"])
def test_opcheck(monkeypatch, kernel, normalize):
    use_kernel(monkeypatch, kernel)
    q, k, v = (torch.rand(1, 2, 100, 17, device="cuda", requires_grad=True) for _ in range(3))
    kv = torch.randn(1, 2, 17, 17, device="cuda", requires_grad=True)
    z = torch.rand(1, 2, 17, device="cuda", requires_grad=True)
    for args in ((q, k, v, 1e-6, normalize), (q, k, v, 1e-6, normalize, kv, z)):
        torch.library.opcheck(torch.ops.lintf.causal_product.default, args)


def cuda_kernel_names(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        fn()
        torch.cuda.synchronize()
    return [event.name for event in profile.events() if event.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("setting, n, dtype, expected", [
    ("", 1, torch.float32, "chunk_output_kernel"),  # auto: chunked wherever it applies, one position too
    ("", 100, torch.float32, "chunk_output_kernel"),
    ("auto", 100, torch.float64, "causal_product_kernel"),  # fp64 has no tensor-core path
    ("scan", 100, torch.bfloat16, "causal_product_kernel"),
    ("chunked", 8, torch.float16, "chunk_output_kernel"),
])
def test_kernel_choice(monkeypatch, setting, n, dtype, expected):
    use_kernel(monkeypatch, setting)
    q, k, v = inputs(n, 17, 33, False, dtype, "cuda")[:3]
    names = cuda_kernel_names(lambda: causal_linear_attention(q, k, v))
    assert any(expected in name for name in names), names


def test_unknown_kernel_setting_names_the_allowed_ones(monkeypatch):
    use_kernel(monkeypatch, "fast")
    q = torch.rand(1, 1, 10, 4, device="cuda")
    with pytest.raises(RuntimeError, match="allowed: auto, chunked, scan"):
        causal_linear_attention(q, q, q)


@pytest.mark.parametrize("n, c, m", [(10, 300, 7), (10, 20000, 3), (10, 3, 20000), (0, 8, 8), (5, 0, 8), (5, 8, 0)])
def test_shapes_beyond_the_kernels(n, c, m):
    """Wide heads fall back to the scan, then to ATen matmuls; empty sizes work: never an error."""
    x = inputs(n, c, m, True, torch.float32, "cuda")
    assert_close(run(x, True), reference(n, c, m, True, torch.float32, True), 1e-4, "vs fp64")


@pytest.mark.parametrize("kernel", ["chunked", "scan"])
def test_fp16_state_beyond_fp16_range(monkeypatch, kernel):
    """A normaliser and state far above fp16's 65504 (long sequence, values with a large offset) stay finite."""
    use_kernel(monkeypatch, kernel)
    gen = torch.Generator().manual_seed(0)
    q, k = ((torch.rand(1, 2, 4096, 16, generator=gen) + 1).half().cuda() for _ in range(2))
    v = (torch.rand(1, 2, 4096, 16, generator=gen) * 100 + 50).half().cuda()
    out, final = causal_linear_attention(q, k, v, return_state=True)
    assert final.kv.abs().max() > 65504 and torch.isfinite(out).all()
    want = causal_linear_attention_reference(q.double(), k.double(), v.double())
    assert ((out.double() - want).abs().max() / want.abs().max()).item() < 2e-3
