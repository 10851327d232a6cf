"""Packed documents: every recurrent op with cu_seqlens equals each document run alone, on every CPU backend.

fp64; outputs, final states and the gradients of every input (q, k, v, gates, initial states) against the
same op on each document alone from that document's initial state, through the compiled CPU op on each
vector path this CPU runs (LINTF_CPU_PATH) and through the pure-PyTorch paths. The CUDA kernels are
checked the same way under their emulation (test_packed_cuda_emulated.py), the sequence-parallel forms
in test_packed_sequence_parallel.py.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import cpu_vector_paths, decayed_linear_attention, extension
from tests.ops.packed_cases import (
    LENGTHS,
    OPS,
    alone,
    assert_same,
    boundaries,
    draw,
    packed,
)

BACKENDS = ["avx512", "avx2", "portable", "pytorch"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled CPU op on one vector path, or the pure-PyTorch paths (as without the extension)."""
    if request.param == "pytorch":
        monkeypatch.setattr(extension, "serves", lambda device_type: False)
    else:
        request.getfixturevalue("compiled_op")
        if request.param not in cpu_vector_paths():
            pytest.skip(f"this CPU does not run the {request.param} path (it runs {cpu_vector_paths()})")
        monkeypatch.setenv("LINTF_CPU_PATH", request.param)
    return request.param


@pytest.mark.parametrize("op", OPS)
def test_packed_equals_each_document_alone(backend, op):
    cu_seqlens = boundaries(LENGTHS)
    x = draw(op, LENGTHS)
    assert_same(op, packed(op, x, cu_seqlens), alone(op, x, cu_seqlens), 1e-12)


@pytest.mark.parametrize("lengths", [[7], [0, 7, 0], [1, 1, 1, 1], [0], [3, 0, 0]], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_few_and_empty_documents(backend, op, lengths):
    """One document (the row itself), documents of one position, empty documents, a row of no positions."""
    cu_seqlens = boundaries(lengths, torch.int32)
    x = draw(op, lengths, seed=1)
    assert_same(op, packed(op, x, cu_seqlens), alone(op, x, cu_seqlens), 1e-12)


@pytest.mark.parametrize("op", ["causal_linear_attention", "gated_delta_rule"])
def test_fp32_packed_equals_each_document_alone(op):
    """fp32 through the default backend: the re-layout itself is exact, so the only differences are rounding."""
    cu_seqlens = boundaries(LENGTHS)
    x = draw(op, LENGTHS, dtype=torch.float32)
    assert_same(op, packed(op, x, cu_seqlens), alone(op, x, cu_seqlens), 1e-5)


def test_without_initial_state_documents_start_from_zeros():
    """No initial state: each document starts from zeros, and its final state is returned (zeros if empty)."""
    lengths = [4, 0, 9]
    cu_seqlens = boundaries(lengths)
    x = draw("decayed_linear_attention", lengths)
    q, k, v, log_decay = (x["leaves"][key].detach() for key in ("q", "k", "v", "log_decay"))
    out, final = decayed_linear_attention(q, k, v, log_decay, return_state=True, cu_seqlens=cu_seqlens)
    assert final.kv.shape == (3, *q.shape[1:2], q.shape[3], v.shape[3]) and final.normaliser.shape == (3, 2, 5)
    for d, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        if start == end:
            assert not final.kv[d].any() and not final.normaliser[d].any()
            continue
        part = slice(start, end)
        want, want_final = decayed_linear_attention(q[:, :, part], k[:, :, part], v[:, :, part],
                                                    log_decay[:, :, part], return_state=True)
        torch.testing.assert_close(out[:, :, part], want, rtol=0, atol=1e-13)
        torch.testing.assert_close(final.kv[d : d + 1], want_final.kv, rtol=0, atol=1e-13)


def test_the_state_does_not_cross_a_boundary():
    """Changing one document's inputs leaves every other document's outputs as they were."""
    lengths = [5, 6, 7]
    cu_seqlens = boundaries(lengths)
    x = draw("gated_delta_rule", lengths)
    t = {key: value.detach().clone() for key, value in x["leaves"].items()}
    from lintf.ops import delta_rule

    def run() -> torch.Tensor:
        return delta_rule(t["q"], t["k"], t["v"], t["beta"], log_decay=t["log_decay"], cu_seqlens=cu_seqlens)

    before = run()
    t["v"][:, :, 5:11] += 1.0  # the second document's values
    after = run()
    assert torch.equal(before[:, :, :5], after[:, :, :5]) and torch.equal(before[:, :, 11:], after[:, :, 11:])
    assert not torch.equal(before[:, :, 5:11], after[:, :, 5:11])
