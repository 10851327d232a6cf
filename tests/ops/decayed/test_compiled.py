"""The compiled decayed product (lintf::decayed_product) against the naive references of lintf/ops/decayed/reference.py.

Every test skips when the compiled op is unavailable (LINTF_EXTENSION=off, no compiler, an older
build). The op works in chunks of 32 positions, so lengths above 32 cross chunk boundaries.
"""

from __future__ import annotations

import pytest
import torch

import lintf.ops
from lintf.ops.decayed import compiled as decayed_compiled
from lintf.ops.decayed.product import decayed_dot_product, decayed_linear_attention
from lintf.ops.decayed.reference import decayed_dot_product_reference, decayed_recurrence_reference
from lintf.ops.causal.reference import causal_dot_product_reference


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not decayed_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled decayed product is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


@pytest.fixture(params=[("recompute", 0), ("stored", 32), ("stored", 64)], ids=["recompute", "stored32", "stored64"])
def backward_mode(request, monkeypatch) -> None:
    """Runs a test with the backward recomputing chunk states, or starting from states kept every 32 or 64
    positions (so that the tests' lengths cross several spans)."""
    mode, spacing = request.param
    monkeypatch.setenv("LINTF_CPU_BACKWARD", mode)
    monkeypatch.setattr(decayed_compiled, "STATE_SPACING", spacing or decayed_compiled.STATE_SPACING)


def inputs(n: int, c: int = 5, m: int = 3, batch: int = 2, heads: int = 3, strength: float = 1.0, seed: int = 0):
    """fp64 leaves q, k (B, H, N, C), v (B, H, N, M), log_decay (B, H, N) in [-strength, 0], S0 (B, H, C, M)."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, heads, n, c, dtype=torch.float64, generator=generator) for _ in range(2))
    v = torch.randn(batch, heads, n, m, dtype=torch.float64, generator=generator)
    log_decay = -strength * torch.rand(batch, heads, n, dtype=torch.float64, generator=generator)
    state = torch.randn(batch, heads, c, m, dtype=torch.float64, generator=generator)
    return [t.requires_grad_() for t in (q, k, v, log_decay, state)]


def outputs_and_grads(fn, leaves: list[torch.Tensor], rounded_to: torch.dtype | None = None) -> list[torch.Tensor]:
    """out, final state, then the gradients of <out, U> + <state, W> for fixed random U, W (U rounded to
    rounded_to when given, as a low-precision output's gradient is), for all leaves."""
    out, state = fn(*leaves)
    generator = torch.Generator().manual_seed(1)
    upstream = [torch.randn(t.shape, dtype=torch.float64, generator=generator) for t in (out, state)]
    if rounded_to is not None:
        upstream[0] = upstream[0].to(rounded_to)
    upstream = [u.to(t.dtype) for u, t in zip(upstream, (out, state))]
    grads = torch.autograd.grad([out, state], leaves, upstream)
    return [out, state, *grads]


def compiled_with_state(q, k, v, log_decay, state):
    return decayed_dot_product(q, k, v, log_decay, initial_state=state, return_state=True)


def assert_close_scaled(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> None:
    """max |got - want| <= tolerance * max |want| (errors of low-precision runs scale with the values)."""
    error = (got.double() - want.double()).abs().max().item()
    assert error <= tolerance * want.double().abs().max().item() + 1e-12, (error, tolerance)


@pytest.mark.usefixtures("backward_mode")
@pytest.mark.parametrize("n", [1, 7, 64, 200])
@pytest.mark.parametrize("c, m", [(5, 3), (33, 17), (1, 1)])
def test_outputs_state_and_all_gradients_match_the_recurrence(n, c, m):
    leaves = inputs(n, c, m)
    for got, want in zip(outputs_and_grads(compiled_with_state, leaves),
                         outputs_and_grads(decayed_recurrence_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_without_state_matches_the_naive_matrix_form():
    q, k, v, log_decay, _ = inputs(70, c=8, m=6)
    got = decayed_dot_product(q, k, v, log_decay)
    want = decayed_dot_product_reference(q, k, v, log_decay)
    torch.testing.assert_close(got, want)
    upstream = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(got, (q, k, v, log_decay), upstream),
                    torch.autograd.grad(want, (q, k, v, log_decay), upstream)):
        torch.testing.assert_close(a, b)


@pytest.mark.usefixtures("backward_mode")
def test_gradcheck_across_chunks():
    leaves = inputs(37, c=3, m=2, batch=1, heads=2)
    with torch.no_grad():
        leaves[3].clamp_(max=-0.05)  # stays <= 0 under gradcheck's perturbations
    assert torch.autograd.gradcheck(compiled_with_state, leaves)


def test_double_backward_runs_the_pytorch_path():
    leaves = inputs(9, c=2, m=2, batch=1, heads=1)
    with torch.no_grad():
        leaves[3].clamp_(max=-0.05)
    assert torch.autograd.gradgradcheck(compiled_with_state, leaves)


@pytest.mark.usefixtures("backward_mode")
@pytest.mark.parametrize("split", [1, 15, 16, 17, 31, 32, 33, 64, 99])
def test_split_with_the_state_equals_one_pass(split):
    q, k, v, log_decay, state = inputs(100)

    def in_two_pieces(q, k, v, log_decay, state):
        first, middle = decayed_dot_product(q[:, :, :split], k[:, :, :split], v[:, :, :split], log_decay[:, :, :split],
                                            initial_state=state, return_state=True)
        second, last = decayed_dot_product(q[:, :, split:], k[:, :, split:], v[:, :, split:], log_decay[:, :, split:],
                                           initial_state=middle, return_state=True)
        return torch.cat([first, second], dim=2), last

    leaves = [q, k, v, log_decay, state]
    expected = outputs_and_grads(decayed_recurrence_reference, leaves)
    for got, want in zip(outputs_and_grads(in_two_pieces, leaves), expected):
        torch.testing.assert_close(got, want)


def test_recurrent_steps_equal_the_forward():
    q, k, v, log_decay, state = (t.detach() for t in inputs(40))
    outputs, running = [], state
    for i in range(40):
        step = slice(i, i + 1)
        out, running = decayed_dot_product(q[:, :, step], k[:, :, step], v[:, :, step], log_decay[:, :, step],
                                           initial_state=running, return_state=True)
        outputs.append(out)
    want, want_state = decayed_recurrence_reference(q, k, v, log_decay, state)
    torch.testing.assert_close(torch.cat(outputs, dim=2), want)
    torch.testing.assert_close(running, want_state)


@pytest.mark.usefixtures("backward_mode")
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_reduced_precision_against_fp64(dtype, tolerance):
    """Inputs rounded to dtype, fp64 reference on the rounded values: only accumulation and output rounding differ."""
    q, k, v, log_decay, state = (t.detach() for t in inputs(200, c=16, m=8))
    q, k, v = (t.to(dtype) for t in (q, k, v))
    log_decay, state = log_decay.float(), state.float()
    leaves = [t.requires_grad_() for t in (q, k, v, log_decay, state)]
    got = outputs_and_grads(compiled_with_state, leaves)
    assert got[0].dtype == dtype and got[1].dtype == torch.float32
    assert [g.dtype for g in got[2:]] == [dtype, dtype, dtype, torch.float32, torch.float32]
    wide = [t.detach().double().requires_grad_() for t in leaves]
    want = outputs_and_grads(decayed_recurrence_reference, wide, rounded_to=dtype)
    for a, b in zip(got, want):
        assert_close_scaled(a, b, tolerance)


def test_zero_decay_is_the_plain_causal_product():
    q, k, v, _, state = inputs(90)
    got = decayed_dot_product(q, k, v, torch.zeros(2, 3, 90, dtype=torch.float64), initial_state=state)
    want = causal_dot_product_reference(q, k, v, lintf.ops.LinearAttentionState(state, state[..., 0]))
    torch.testing.assert_close(got, want)


def test_very_strong_decay_stays_finite_and_exact():
    leaves = inputs(100, strength=0.0)
    with torch.no_grad():
        leaves[3].fill_(-30.0)
    got = outputs_and_grads(compiled_with_state, leaves)
    for a, b in zip(got, outputs_and_grads(decayed_recurrence_reference, leaves)):
        torch.testing.assert_close(a, b)
    low = outputs_and_grads(compiled_with_state, [t.detach().float().requires_grad_() for t in leaves])
    assert all(torch.isfinite(t).all() for t in low)
    diagonal = (leaves[0] * leaves[1]).sum(-1, keepdim=True) * leaves[2]  # exp(-30) leaves only j == i
    torch.testing.assert_close(low[0].double(), diagonal, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("backward_mode")
def test_non_contiguous_inputs():
    q, k, v, log_decay, state = (t.detach() for t in inputs(50, c=6, m=4))
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in (q, k, v))
    log_decay = torch.stack([log_decay, log_decay], dim=-1)[..., 0].requires_grad_()  # strided (B, H, N)
    state = state.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_()
    leaves = [q, k, v, log_decay, state]
    assert not any(t.is_contiguous() for t in leaves)
    for got, want in zip(outputs_and_grads(compiled_with_state, leaves),
                         outputs_and_grads(decayed_recurrence_reference, leaves)):
        torch.testing.assert_close(got, want)


def test_normalised_form_through_the_compiled_op():
    q, k, v, log_decay, _ = inputs(45)
    q, k = q.exp(), k.exp()  # positive features
    numerator = decayed_dot_product_reference(q, k, v, log_decay)
    denominator = decayed_dot_product_reference(q, k, torch.ones_like(v[..., :1]), log_decay)
    torch.testing.assert_close(decayed_linear_attention(q, k, v, log_decay), numerator / (denominator + 1e-6))


def assert_every_path_matches_the_recurrence(leaves: list[torch.Tensor], monkeypatch) -> None:
    """Outputs, state and gradients of every CPU vector path, in fp64 and fp32, against the fp64 recurrence."""
    want = outputs_and_grads(decayed_recurrence_reference, leaves)
    for path in lintf.ops.cpu_vector_paths():
        monkeypatch.setenv("LINTF_CPU_PATH", path)
        for precision in (torch.float64, torch.float32):
            low = [t.detach().to(precision).requires_grad_() for t in leaves]
            for a, b in zip(outputs_and_grads(compiled_with_state, low), want):
                assert_close_scaled(a, b, 1e-12 if precision == torch.float64 else 1e-5)


@pytest.mark.usefixtures("backward_mode")
def test_every_vector_path_matches(monkeypatch):
    leaves = inputs(70, c=9, m=5)
    assert_every_path_matches_the_recurrence(leaves, monkeypatch)


@pytest.mark.usefixtures("backward_mode")
@pytest.mark.parametrize("strength", [8.0, 25.0])
def test_decays_that_end_a_chunk_early_on_every_vector_path(monkeypatch, strength):
    """The kernel rescales its state when a chunk's decays pass exp(-20): several times per chunk here, and
    at single positions of decays stronger than that on their own (mixed with weak ones)."""
    leaves = inputs(150, c=17, m=9, strength=strength, seed=3)
    with torch.no_grad():
        leaves[3][..., ::7] *= 0.01  # weak decays between the strong ones
    assert_every_path_matches_the_recurrence(leaves, monkeypatch)


@pytest.mark.parametrize("batch, n, c, m", [(0, 5, 4, 3), (2, 0, 4, 3), (2, 5, 0, 3), (2, 5, 4, 0)])
def test_empty_dimensions(batch, n, c, m):
    q, k, v, log_decay, state = (t.detach() for t in inputs(n, c, m, batch=batch))
    out, final, states = torch.ops.lintf.decayed_product(q, k, v, log_decay, state, 32)
    assert states.shape == (batch, 3, -(-n // 32), c, m)
    cumulative = log_decay.cumsum(-1)  # (B, H, N)
    total = log_decay.sum(-1)[..., None]  # (B, H, 1)
    want = decayed_dot_product_reference(q, k, v, log_decay) + (q * cumulative.exp()[..., None]) @ state
    to_end = (k * (total - cumulative).exp()[..., None]).transpose(-1, -2) @ v  # (B, H, C, M)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(final, state * total.exp()[..., None] + to_end)


def test_cpu_tensors_take_the_compiled_op_unless_the_extension_is_off(monkeypatch):
    q, k, v, log_decay, _ = (t.detach() for t in inputs(10))
    calls = []
    original = decayed_compiled.decayed_product
    monkeypatch.setattr(decayed_compiled, "decayed_product", lambda *args: calls.append(1) or original(*args))
    decayed_dot_product(q, k, v, log_decay)
    assert calls == [1]
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    decayed_dot_product(q, k, v, log_decay)
    assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_state", [False, True])
def test_opcheck(dtype, with_state):
    q, k, v, log_decay, state = (t.detach().to(dtype).requires_grad_() for t in inputs(40, c=4, m=3, batch=1))
    args = (q, k, v, log_decay) + ((state,) if with_state else ())
    torch.library.opcheck(torch.ops.lintf.decayed_product.default, args)


def test_bad_inputs_raise_the_value_error():
    q, k, v, log_decay, _ = (t.detach() for t in inputs(6))
    with pytest.raises(ValueError, match="log_decay must be <= 0"):
        decayed_dot_product(q, k, v, -log_decay)
    with pytest.raises(ValueError, match="log_decay must be a float tensor"):
        decayed_dot_product(q, k, v, log_decay[..., :-1])
    with pytest.raises(ValueError, match="initial_state must be"):
        decayed_dot_product(q, k, v, log_decay, initial_state=torch.zeros(2, 3, 5, 4, dtype=torch.float64))
