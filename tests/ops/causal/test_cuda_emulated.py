"""The chunked CUDA kernels, run on the CPU under an emulation of CUDA's execution model.

csrc/causal/cuda/chunk*.cuh and their host code are compiled with the host compiler against the
stand-ins in tests/ops/causal/cuda_emulation/ (WMMA with its documented layout and alignment rules, fp16/bf16
types, one fiber per thread with real barriers in a random order) and checked against the fp64
reference: output, final state and every gradient, for each operand type. This proves the kernels'
indexing, tiling, padding, scaling and barriers (a missing barrier corrupts results under the random
thread order, a divergent one aborts) without a GPU. It cannot prove what only a GPU shows: that the
hardware's WMMA agrees with its documentation, memory-model effects, speed. tests/ops/causal/test_cuda*.py do
that on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.ops.causal.reference import (
    causal_dot_product_reference,
    causal_linear_attention_reference,
    final_state_reference,
)
from lintf.ops.causal.state import LinearAttentionState
from tests.ops.causal.cuda_emulation.cases import KINDS, PLANS, REFUSED, plan
from tests.ops.causal.cuda_emulation.loader import CSRC, EMULATION, cuda_headers, load_emulated
from tests.ops.scaled_error import scaled_error

# largest |error| / max(1, max |reference|) per operand type
TOLERANCE = {"fp32": 1e-5, "tf32": 3e-3, "bf16": 2e-2, "fp16": 4e-3}
SHAPES = [(1, 17, 33), (7, 17, 33), (130, 17, 33), (200, 64, 64), (100, 128, 100), (70, 3, 130)]  # (N, C, M)


@pytest.fixture(scope="module")
def emulated():
    headers = [CSRC / "common" / "inputs.h", CSRC / "causal" / "causal_product.h", *cuda_headers("common/cuda", "causal/cuda")]
    return load_emulated("lintf_cuda_emulation", EMULATION / "emulated_op.cpp", headers)


def inputs(n: int, c: int, m: int, dtype: torch.dtype, state: bool, seed: int = 0) -> dict:
    """Positive feature-mapped q, k, values, upstream gradients and (optionally) states of B=1, H=2."""
    gen = torch.Generator().manual_seed(seed)
    shape = (1, 2, n)
    data = {
        "q": (F.elu(torch.randn(*shape, c, generator=gen)) + 1).to(dtype),
        "k": (F.elu(torch.randn(*shape, c, generator=gen)) + 1).to(dtype),
        "v": torch.randn(*shape, m, generator=gen).to(dtype),
        "grad": torch.randn(*shape, m, generator=gen).to(dtype),
        "kv0": None, "z0": None, "grad_kv": None, "grad_z": None,
    }
    if state:
        data.update(kv0=torch.randn(1, 2, c, m, generator=gen), z0=torch.rand(1, 2, c, generator=gen),
                    grad_kv=torch.randn(1, 2, c, m, generator=gen), grad_z=torch.randn(1, 2, c, generator=gen))
    return data


def run_emulated(op, x: dict, normalize: bool, out: torch.Tensor | None = None, den: torch.Tensor | None = None):
    """Forward, then backward (from the given out and denominator, else the forward's)."""
    fwd = op.forward(x["q"], x["k"], x["v"], 1e-6, normalize, x["kv0"], x["z0"])
    out = fwd[0] if out is None else out
    den = fwd[1] if den is None else den
    bwd = op.backward(x["grad"], x["q"], x["k"], x["v"], out, den, normalize, x["kv0"], x["z0"], x["grad_kv"], x["grad_z"])
    return fwd, bwd


def run_reference(x: dict, normalize: bool) -> list[torch.Tensor]:
    """fp64 out, final kv, final normaliser, dq, dk, dv (and d_kv0, d_z0 with a state)."""
    q, k, v = (x[name].double().requires_grad_() for name in "qkv")
    leaves = [q, k, v]
    state = None
    if x["kv0"] is not None:
        state = LinearAttentionState(x["kv0"].double().requires_grad_(), x["z0"].double().requires_grad_())
        leaves += list(state)
    out = causal_linear_attention_reference(q, k, v, 1e-6, state) if normalize else causal_dot_product_reference(q, k, v, state)
    final = final_state_reference(k, v, state)
    loss = (out * x["grad"].double()).sum()
    if state is not None:
        loss = loss + (final.kv * x["grad_kv"].double()).sum() + (final.normaliser * x["grad_z"].double()).sum()
    return [out.detach(), final.kv.detach(), final.normaliser.detach(), *torch.autograd.grad(loss, leaves)]


def assert_close(got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    names = ["out", "final kv", "final normaliser", "dq", "dk", "dv", "d kv0", "d z0"]
    for name, g, w in zip(names, got, want):
        assert torch.isfinite(g).all(), f"{name}: not finite"
        error = scaled_error(g, w)
        assert error <= tolerance, f"{name}: error {error:.2e} > {tolerance:.0e}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-C{}-M{}".format(*s))
@pytest.mark.parametrize("normalize, state", [(True, True), (False, True), (True, False)], ids=["norm-state", "numerator-state", "norm"])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_reference(emulated, matmul_precision, kind, normalize, state, shape):
    dtype, precision = KINDS[kind]
    matmul_precision(precision)
    x = inputs(*shape, dtype, state)
    (out, den, kv, z), (dq, dk, dv, d_kv, d_z) = run_emulated(emulated, x, normalize)
    got = [out, kv, z, dq, dk, dv] + ([d_kv, d_z] if state else [])
    assert out.dtype == dq.dtype == dtype and kv.dtype == d_kv.dtype == torch.float32
    assert den.shape == ((1, 2, shape[0]) if normalize else (0,))
    assert_close(got, run_reference(x, normalize), TOLERANCE[kind])


def test_fp16_state_beyond_fp16_range(emulated, compiled_op):
    """A state far above fp16's 65504 stays finite (tiles are rescaled by powers of two).

    Values share a large offset, so the normalised gradients cancel across chunks: the kernel must
    match the CPU op given the same (rounded) output, whose rounding dominates the error against fp64.
    """
    gen = torch.Generator().manual_seed(0)
    n, c, m = 2048, 16, 16
    x = inputs(n, c, m, torch.float16, state=False)
    x.update(q=(torch.rand(1, 2, n, c, generator=gen) + 1).half(), k=(torch.rand(1, 2, n, c, generator=gen) + 1).half(),
             v=(torch.rand(1, 2, n, m, generator=gen) * 100 + 50).half(), grad=(torch.randn(1, 2, n, m, generator=gen) * 1e-3).half())
    out_cpu, den_cpu, *_ = torch.ops.lintf.causal_product(x["q"], x["k"], x["v"], 1e-6, True)
    (out, _, kv, _), grads = run_emulated(emulated, x, True, out_cpu, den_cpu)
    assert kv.abs().max() > 65504
    want = run_reference(x, True)
    assert_close([out], want[:1], 2e-3)
    cpu_grads = torch.ops.lintf.causal_product_backward(x["grad"], x["q"], x["k"], x["v"], out_cpu, den_cpu, True)
    for got, ref in zip(grads[:3], cpu_grads[:3]):
        assert ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item() < 2e-3


def test_results_do_not_depend_on_thread_order(emulated):
    x = inputs(150, 40, 80, torch.bfloat16, state=True)
    results = []
    for seed in (1, 2, 3):
        emulated.seed(seed)
        fwd, bwd = run_emulated(emulated, x, True)
        results.append([*fwd, *bwd])
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_non_contiguous_inputs(emulated):
    x = inputs(90, 24, 40, torch.bfloat16, state=True)
    strided = dict(x)
    for name in ("q", "k", "v", "grad"):
        strided[name] = x[name].transpose(1, 2).contiguous().transpose(1, 2)  # (B, H, N, F) over (B, N, H, F)
        assert not strided[name].is_contiguous()
    for a, b in zip(sum(run_emulated(emulated, x, True), []), sum(run_emulated(emulated, strided, True), [])):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype, n, c, m, expected", PLANS)
def test_plan(emulated, dtype, n, c, m, expected):
    assert plan(emulated, dtype, n, c, m) == expected


@pytest.mark.parametrize("dtype, c", REFUSED)
def test_plan_refuses_what_other_kernels_serve(emulated, dtype, c):
    with pytest.raises(RuntimeError, match="do not take"):
        plan(emulated, dtype, 10, c, 8)
