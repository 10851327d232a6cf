"""The compiled delta rule on unequal and wide head widths, against the naive recurrence on every vector path.

The CPU backward keeps per chunk the entering state, X, h and tinv, and multiplies the (C, M) states
from both sides (dS U^T, S_in [dO; dX]^T), so C != M and widths over one register block exercise
products the square, narrow cases of test_compiled.py do not. Several heads per call share the kept
memory one after another.
"""

from __future__ import annotations

import pytest
import torch

import lintf.ops
from lintf.ops.delta import compiled as delta_compiled
from lintf.ops.delta.reference import delta_rule_reference
from tests.ops.delta.cases import inputs, op, outputs_and_grads


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not delta_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled delta rule is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")


def scaled_errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[float]:
    return [((a.double() - b).abs().max() / b.abs().max().clamp_min(1)).item() for a, b in zip(got, want)]


@pytest.mark.parametrize("n, c, m, decay", [(70, 20, 40, True), (45, 40, 20, False), (33, 33, 3, True)])
def test_unequal_widths_match_on_every_vector_path(monkeypatch, n, c, m, decay):
    leaves = inputs(n, c=c, m=m, batch=1, heads=3, decay=decay)
    want = outputs_and_grads(delta_rule_reference, leaves)
    for path in lintf.ops.cpu_vector_paths():
        monkeypatch.setenv("LINTF_CPU_PATH", path)
        for precision, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            low = [None if t is None else t.detach().to(precision).requires_grad_() for t in leaves]
            assert max(scaled_errors(outputs_and_grads(op, low), want)) < tolerance, (path, precision)
