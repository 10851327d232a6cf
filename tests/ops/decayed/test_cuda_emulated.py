"""The CUDA decayed product's kernels, run on the CPU under the emulation of CUDA's execution model.

csrc/decayed/cuda/chunk*.cuh and their host code are compiled with the host compiler against the
stand-ins of tests/ops/causal/cuda_emulation/ (WMMA with its documented layout and alignment rules,
fp16/bf16 types, one fiber per thread with barriers in a random order; see test_cuda_emulated.py there)
and checked against the fp64 recurrence S_i = exp(a_i) S_{i-1} + k_i v_i^T, out_i = q_i S_i: outputs,
final state and the gradients of q, k, v, log_decay and the initial state, for each operand type. The
ATen form the CUDA op runs for fp64 and wide heads (aten.h) is checked the same way on CPU tensors.
A GPU run (test_cuda.py) shows what the emulation cannot: the hardware's WMMA, memory effects, speed.
"""

from __future__ import annotations

import math

import pytest
import torch

from lintf.ops.decayed.reference import decayed_recurrence_reference
from tests.ops.causal.cuda_emulation.cases import KINDS, PLANS, REFUSED, plan
from tests.ops.causal.cuda_emulation.loader import CSRC, cuda_headers, load_emulated
from tests.ops.scaled_error import assert_all_close

# largest |error| / max(1, max |reference|) per operand type
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 3e-2, "fp16": 5e-3}
# log_decay drawn log-uniformly from these ranges: strong decays forget within a few positions, weak ones
# carry the state across chunks almost whole
DECAYS = {"strong": (-5.0, -0.5), "weak": (-1e-3, -1e-4)}
# (N, C, M): N = 1, N not a multiple of the 64-position chunk, C and M from 16 to 128
SHAPES = [(1, 16, 16), (130, 16, 64), (70, 64, 128), (100, 128, 16), pytest.param((65, 128, 128), marks=pytest.mark.slow)]
NAMES = ["out", "final state", "dq", "dk", "dv", "d log_decay", "d initial state"]


@pytest.fixture(scope="module")
def emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "decayed/cuda")]
    return load_emulated("lintf_decayed_emulation", CSRC.parent / "tests/ops/decayed/cuda_emulated_op.cpp", headers)


def inputs(n: int, c: int, m: int, dtype: torch.dtype, decay: str, state: bool = True, seed: int = 0) -> dict:
    """q, k, v, upstream gradients (dtype), log_decay and the states (accumulation dtype) of B=1, H=2."""
    gen = torch.Generator().manual_seed(seed)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    low, high = (math.log(-bound) for bound in DECAYS[decay])
    log_decay = -torch.exp(torch.empty(1, 2, n, dtype=torch.float64).uniform_(high, low, generator=gen))
    data = {
        "q": (torch.randn(1, 2, n, c, generator=gen) / c**0.5).to(dtype),
        "k": (torch.randn(1, 2, n, c, generator=gen) / c**0.5).to(dtype),
        "v": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "log_decay": log_decay.to(acc),
        "grad": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "state0": None, "grad_state": None,
    }
    if state:
        data.update(state0=torch.randn(1, 2, c, m, generator=gen).to(acc),
                    grad_state=torch.randn(1, 2, c, m, generator=gen).to(acc))
    return data


def run(forward, backward, x: dict) -> list[torch.Tensor]:
    """out, final state, dq, dk, dv, d log_decay, d initial state of one forward and backward."""
    tensors = (x["q"], x["k"], x["v"], x["log_decay"])
    out, final_state = forward(*tensors, x["state0"])
    return [out, final_state, *backward(x["grad"], *tensors, x["state0"], x["grad_state"])]


def reference(x: dict) -> list[torch.Tensor]:
    """The same seven tensors from the fp64 recurrence and autograd (d initial state zeros-based without one)."""
    q, k, v, log_decay = (x[name].double().requires_grad_() for name in ("q", "k", "v", "log_decay"))
    c, m = q.shape[-1], v.shape[-1]
    state0 = (x["state0"].double() if x["state0"] is not None else torch.zeros(1, 2, c, m, dtype=torch.float64))
    state0.requires_grad_()
    out, final_state = decayed_recurrence_reference(q, k, v, log_decay, state0)
    loss = (out * x["grad"].double()).sum()
    if x["grad_state"] is not None:
        loss = loss + (final_state * x["grad_state"].double()).sum()
    grads = torch.autograd.grad(loss, [q, k, v, log_decay, state0])
    return [out.detach(), final_state.detach(), *grads]


def assert_close(got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    assert_all_close(NAMES, got, want, tolerance)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-C{}-M{}".format(*s))
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("kind", KINDS)
def test_chunked_kernels_match_the_recurrence(emulated, matmul_precision, kind, decay, shape):
    dtype, precision = KINDS[kind]
    matmul_precision(precision)
    x = inputs(*shape, dtype, decay)
    got = run(emulated.forward, emulated.backward, x)
    assert got[0].dtype == got[2].dtype == dtype and got[1].dtype == got[5].dtype == torch.float32
    assert_close(got, reference(x), TOLERANCE[kind])


def test_without_initial_state(emulated):
    x = inputs(90, 24, 40, torch.float32, "weak", state=False)
    assert_close(run(emulated.forward, emulated.backward, x), reference(x), TOLERANCE["fp32"])


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize(
    "shape", [(1, 3, 5), (64, 16, 16), pytest.param((130, 200, 7), marks=pytest.mark.slow)], ids=lambda s: "N{}-C{}-M{}".format(*s)
)
@pytest.mark.parametrize("decay", DECAYS)
def test_aten_form_matches_the_recurrence(emulated, dtype, tolerance, shape, decay):
    x = inputs(*shape, dtype, decay)
    got = run(emulated.aten_forward, emulated.aten_backward, x)
    assert_close(got, reference(x), tolerance)


def test_results_do_not_depend_on_thread_order(emulated):
    x = inputs(150, 40, 80, torch.bfloat16, "strong")
    results = []
    for seed in (1, 2):
        emulated.seed(seed)
        results.append(run(emulated.forward, emulated.backward, x))
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("dtype, n, c, m, expected", PLANS)
def test_plan(emulated, dtype, n, c, m, expected):
    assert plan(emulated, dtype, n, c, m) == expected


@pytest.mark.parametrize("dtype, c", REFUSED)
def test_plan_leaves_fp64_and_wide_heads_to_the_aten_form(emulated, dtype, c):
    with pytest.raises(RuntimeError, match="do not take"):
        plan(emulated, dtype, 10, c, 8)
