"""The CUDA gated linear attention's kernels, run on the CPU under the emulation of CUDA's execution model.

csrc/gla/cuda/chunk*.cuh and their host code are compiled with the host compiler against the stand-ins
of tests/ops/causal/cuda_emulation/ (WMMA with its documented layout and alignment rules, fp16/bf16
types, one fiber per thread with barriers in a random order) and checked against the fp64 recurrence
S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, out_t = scale S_t^T q_t: outputs, final state and the
gradients of q, k, v, log_gate and the initial state, for each operand type. A GPU run (test_cuda.py)
shows what the emulation cannot: the hardware's WMMA, memory effects, speed.
"""

from __future__ import annotations

import math

import pytest
import torch

from lintf.ops.gla.reference import gated_linear_attention_reference
from tests.ops.causal.cuda_emulation.cases import (
    A100_SHARED, KINDS, PLANS, REFUSED, SM86_SHARED, assert_plan_on_a_gpu_with, plan,
)
from tests.ops.causal.cuda_emulation.loader import CSRC, cuda_headers, load_emulated
from tests.ops.scaled_error import assert_all_close

# largest |error| / max(1, max |reference|) per operand type
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 3e-2, "fp16": 5e-3}
# log_gate drawn log-uniformly from these ranges per (position, feature): strong gates forget within a few
# positions (and would overflow exp(-cumulative) within a chunk), weak ones carry the state across chunks
GATES = {"strong": (-5.0, -0.5), "weak": (-1e-3, -1e-4)}
# (N, C, M): N = 1, N not a multiple of the 64-position chunk, C and M from 16 to 128
SHAPES = [(1, 16, 16), (130, 16, 64), (70, 48, 128), pytest.param((65, 128, 128), marks=pytest.mark.slow)]
NAMES = ["out", "final state", "dq", "dk", "dv", "d log_gate", "d initial state"]


@pytest.fixture(scope="module")
def emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "gla/cuda")]
    return load_emulated("lintf_gla_emulation", CSRC.parent / "tests/ops/gla/cuda_emulated_op.cpp", headers)


def inputs(n: int, c: int, m: int, dtype: torch.dtype, gates: str, state: bool = True, seed: int = 0) -> dict:
    """q, k, v, upstream gradients (dtype), log_gate and the states (fp32) of B=1, H=2."""
    gen = torch.Generator().manual_seed(seed)
    low, high = (math.log(-bound) for bound in GATES[gates])
    log_gate = -torch.exp(torch.empty(1, 2, n, c, dtype=torch.float64).uniform_(high, low, generator=gen))
    data = {
        "q": torch.randn(1, 2, n, c, generator=gen).to(dtype),
        "k": (torch.randn(1, 2, n, c, generator=gen) / c**0.5).to(dtype),
        "v": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "log_gate": log_gate.float(),
        "grad": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "scale": c**-0.5,
        "state0": None, "grad_state": None,
    }
    if state:
        data.update(state0=torch.randn(1, 2, c, m, generator=gen), grad_state=torch.randn(1, 2, c, m, generator=gen))
    return data


def run(op, x: dict) -> list[torch.Tensor]:
    """out, final state, dq, dk, dv, d log_gate, d initial state of one forward and backward."""
    tensors = (x["q"], x["k"], x["v"], x["log_gate"], x["scale"])
    out, final_state = op.forward(*tensors, x["state0"])
    return [out, final_state, *op.backward(x["grad"], *tensors, x["state0"], x["grad_state"])]


def reference(x: dict) -> list[torch.Tensor]:
    """The same seven tensors from the fp64 recurrence and autograd (d initial state zeros-based without one)."""
    q, k, v, log_gate = (x[name].double().requires_grad_() for name in ("q", "k", "v", "log_gate"))
    c, m = q.shape[-1], v.shape[-1]
    state0 = x["state0"].double() if x["state0"] is not None else torch.zeros(1, 2, c, m, dtype=torch.float64)
    state0.requires_grad_()
    out, final_state = gated_linear_attention_reference(q, k, v, log_gate, state0, x["scale"])
    loss = (out * x["grad"].double()).sum()
    if x["grad_state"] is not None:
        loss = loss + (final_state * x["grad_state"].double()).sum()
    grads = torch.autograd.grad(loss, [q, k, v, log_gate, state0])
    return [out.detach(), final_state.detach(), *grads]


def assert_close(got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    assert_all_close(NAMES, got, want, tolerance)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-C{}-M{}".format(*s))
@pytest.mark.parametrize("gates", GATES)
@pytest.mark.parametrize("kind", KINDS)
def test_chunked_kernels_match_the_recurrence(emulated, matmul_precision, kind, gates, shape):
    dtype, precision = KINDS[kind]
    matmul_precision(precision)
    x = inputs(*shape, dtype, gates)
    got = run(emulated, x)
    assert got[0].dtype == got[2].dtype == dtype and got[1].dtype == got[5].dtype == torch.float32
    assert_close(got, reference(x), TOLERANCE[kind])


def test_without_initial_state(emulated):
    x = inputs(90, 24, 40, torch.float32, "weak", state=False)
    assert_close(run(emulated, x), reference(x), TOLERANCE["fp32"])


def test_results_do_not_depend_on_thread_order(emulated):
    x = inputs(150, 40, 80, torch.bfloat16, "strong")
    results = []
    for seed in (1, 2):
        emulated.seed(seed)
        results.append(run(emulated, x))
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("dtype, n, c, m, expected", PLANS)
def test_plan(emulated, dtype, n, c, m, expected):
    got = plan(emulated, dtype, n, c, m)
    # GLA's kernels keep the gates of a chunk in shared memory too: its value tiles may be narrower
    assert got[0] == expected[0] and got[2] == expected[2] and got[1] <= expected[1]
    assert got[1] % 16 == 0 and got[3] == -(-m // got[1])


@pytest.mark.parametrize("dtype, c", REFUSED)
def test_plan_leaves_fp64_and_wide_heads_to_another_path(emulated, dtype, c):
    with pytest.raises(RuntimeError, match="do not take"):
        plan(emulated, dtype, 10, c, 8)


# (shared memory per block, dtype, C, whether the kernels take it); what does not fit takes the PyTorch path
SMALLER_GPUS = [
    (A100_SHARED, torch.bfloat16, 128, True), (A100_SHARED, torch.float32, 128, False),
    (A100_SHARED, torch.float32, 96, True), (SM86_SHARED, torch.bfloat16, 64, True),
    (SM86_SHARED, torch.bfloat16, 128, False), (SM86_SHARED, torch.float32, 64, False),
]


@pytest.mark.parametrize("shared, dtype, c, taken", SMALLER_GPUS)
def test_plan_follows_the_gpus_shared_memory(emulated, shared, dtype, c, taken):
    assert_plan_on_a_gpu_with(emulated, shared, dtype, c, taken)
