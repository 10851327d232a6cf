"""The CUDA delta rule, run on the CPU: its sequential sweeps under the emulation of CUDA's execution model.

csrc/delta/cuda/sweeps.cuh is compiled with the host compiler against the stand-ins of
tests/ops/causal/cuda_emulation/ (WMMA with its documented layout and alignment rules, one fiber per
thread with barriers in a random order), its ATen part (aten.h) runs on CPU tensors, and together they
are checked against the fp64 recurrence u_t = beta_t (v_t - (a_t S_{t-1})^T k_t), S_t = a_t S_{t-1} +
k_t u_t^T, out_t = scale S_t^T q_t, with and without decay: outputs, final state and the gradients of
q, k, v, beta, log_decay and the initial state, for each input type. A GPU run (test_cuda.py) shows what
the emulation cannot.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.causal.cuda_emulation.cases import (
    A100_SHARED, KINDS, REFUSED, SM86_SHARED, assert_plan_on_a_gpu_with, plan,
)
from tests.ops.causal.cuda_emulation.loader import CSRC, cuda_headers, load_emulated
from tests.ops.scaled_error import assert_all_close

# largest |error| / max(1, max |reference|) per input type: the sweeps and the ATen part run fp32 throughout,
# so 16-bit inputs add the rounding of the 16-bit outputs (out, dq, dk, dv) and little else
TOLERANCE = {"fp32": 2e-5, "tf32": 5e-3, "bf16": 4e-3, "fp16": 5e-4}
# (N, C, M): N = 1, N not a multiple of the 64-position chunk, whole chunks (no padding copy), C and M 16 to 128
SHAPES = [(1, 16, 16), (130, 32, 48), (128, 32, 32), (70, 64, 128),
          pytest.param((65, 128, 128), marks=pytest.mark.slow)]
NAMES = ["out", "final state", "dq", "dk", "dv", "d beta", "d log_decay", "d initial state"]


@pytest.fixture(scope="module")
def emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "delta/cuda")]
    return load_emulated("lintf_delta_emulation", CSRC.parent / "tests/ops/delta/cuda_emulated_op.cpp", headers)


def inputs(n: int, c: int, m: int, dtype: torch.dtype, decay: bool, state: bool = True, seed: int = 0) -> dict:
    """L2-normalised q, k (DeltaNet's), v and upstream gradients (dtype), beta in (0, 2), log_decay and states (fp32)."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (F.normalize(torch.randn(1, 2, n, c, generator=gen), dim=-1) for _ in range(2))
    data = {
        "q": q.to(dtype), "k": k.to(dtype),
        "v": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "beta": 2 * torch.rand(1, 2, n, generator=gen),
        "log_decay": F.logsigmoid(torch.randn(1, 2, n, generator=gen) + 2) if decay else None,
        "grad": torch.randn(1, 2, n, m, generator=gen).to(dtype),
        "scale": c**-0.5,
        "state0": None, "grad_state": None,
    }
    if state:
        data.update(state0=torch.randn(1, 2, c, m, generator=gen), grad_state=torch.randn(1, 2, c, m, generator=gen))
    return data


def run(op, x: dict) -> list[torch.Tensor]:
    """out, final state, dq, dk, dv, d beta, d log_decay (if any), d initial state of one forward and backward."""
    tensors = (x["q"], x["k"], x["v"], x["beta"], x["log_decay"], x["scale"])
    out, final_state = op.forward(*tensors, x["state0"])
    grads = op.backward(x["grad"], *tensors, x["state0"], x["grad_state"])
    return [out, final_state, *grads]


def reference(x: dict) -> list[torch.Tensor]:
    """The same tensors from the fp64 recurrence and autograd (d log_decay empty without decay)."""
    q, k, v, beta = (x[name].double().requires_grad_() for name in ("q", "k", "v", "beta"))
    log_decay = x["log_decay"].double().requires_grad_() if x["log_decay"] is not None else None
    c, m = q.shape[-1], v.shape[-1]
    state0 = x["state0"].double() if x["state0"] is not None else torch.zeros(1, 2, c, m, dtype=torch.float64)
    state0.requires_grad_()
    out, final_state = delta_rule_reference(q, k, v, beta, log_decay, state0, x["scale"])
    loss = (out * x["grad"].double()).sum()
    if x["grad_state"] is not None:
        loss = loss + (final_state * x["grad_state"].double()).sum()
    leaves = [q, k, v, beta] + ([log_decay] if log_decay is not None else []) + [state0]
    grads = list(torch.autograd.grad(loss, leaves))
    if log_decay is None:
        grads.insert(4, torch.zeros(0, dtype=torch.float64))
    return [out.detach(), final_state.detach(), *grads]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}-C{}-M{}".format(*s))
@pytest.mark.parametrize("decay", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_path_matches_the_recurrence(emulated, matmul_precision, kind, decay, shape):
    dtype, precision = KINDS[kind]
    matmul_precision(precision)
    x = inputs(*shape, dtype, decay)
    got = run(emulated, x)
    assert got[0].dtype == got[2].dtype == dtype and got[1].dtype == got[5].dtype == torch.float32
    assert_all_close(NAMES, got, reference(x), TOLERANCE[kind])


def test_without_initial_state(emulated):
    x = inputs(90, 24, 40, torch.float32, True, state=False)
    assert_all_close(NAMES, run(emulated, x), reference(x), TOLERANCE["fp32"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_inputs_are_left_as_they_were(emulated, dtype):
    """fp32 inputs of whole chunks are read in place (no copy): nothing may write to them."""
    x = inputs(128, 16, 16, dtype, True)
    before = {name: t.clone() for name, t in x.items() if isinstance(t, torch.Tensor)}
    run(emulated, x)
    assert all(torch.equal(x[name], t) for name, t in before.items())


def test_results_do_not_depend_on_thread_order(emulated):
    x = inputs(150, 40, 80, torch.bfloat16, True)
    results = []
    for seed in (1, 2):
        emulated.seed(seed)
        results.append(run(emulated, x))
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("dtype, c", REFUSED)
def test_plan_leaves_fp64_and_wide_heads_to_another_path(emulated, dtype, c):
    with pytest.raises(RuntimeError, match="do not take"):
        plan(emulated, dtype, 10, c, 8)


# (shared memory per block, dtype, C, whether the kernels take it); what does not fit takes the PyTorch path
SMALLER_GPUS = [
    (A100_SHARED, torch.float32, 128, True), (SM86_SHARED, torch.float32, 96, True),
    (SM86_SHARED, torch.float32, 128, False), (SM86_SHARED, torch.bfloat16, 128, False),
]


@pytest.mark.parametrize("shared, dtype, c, taken", SMALLER_GPUS)
def test_plan_follows_the_gpus_shared_memory(emulated, shared, dtype, c, taken):
    assert_plan_on_a_gpu_with(emulated, shared, dtype, c, taken)
