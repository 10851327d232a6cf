"""Packed documents read nothing back from a device: the boundaries come from a CPU cu_seqlens, the rest stays queued.

As in test_host_syncs.py: each op with cu_seqlens runs forward and backward on fake tensors (``FakeTensorMode``,
where a read of a value fails) with the value checks taking the GPU branch, through the compiled ops and
the PyTorch path, and every aten call that reads a value or copies one to another device is recorded. The
boundaries are a real CPU tensor, read by the plan without waiting for any device. On a GPU the same runs
pass ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)

from lintf.ops.common import arguments
from tests.ops.common.test_host_syncs import HostReads
from tests.ops.packed_cases import OPS, boundaries, document_state, draw, op_call

LENGTHS = [3, 0, 40, 1, 17]


def packed_step(op: str, cu_seqlens: torch.Tensor, device: str = "cpu") -> None:
    """Forward and backward of the op on a packed row, initial states and final states included."""
    x = draw(op, LENGTHS)["leaves"]
    leaves = {key: t.detach().to(device).requires_grad_() for key, t in x.items()}
    per_position = {key: t for key, t in leaves.items() if key not in ("S", "z")}
    out, final = op_call(op)(per_position, document_state(leaves, slice(None)), cu_seqlens)
    parts = list(final) if isinstance(final, tuple) else [final]
    (out.square().sum() + sum(part.square().sum() for part in parts)).backward()


@pytest.mark.parametrize("op", OPS)
def test_a_packed_step_reads_no_value_back(op, op_path, monkeypatch):
    monkeypatch.setattr(arguments, "reads_without_waiting", lambda tensor: False)
    recorder, cu_seqlens = HostReads(), boundaries(LENGTHS)  # a real CPU tensor
    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            with recorder:
                packed_step(op, cu_seqlens)
        except (DataDependentOutputException, DynamicOutputShapeException) as error:
            recorder.calls.append(f"{type(error).__name__}: {error}")
    assert recorder.calls == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_a_cuda_packed_step_passes_the_sync_debug_mode(op):
    cu_seqlens = boundaries(LENGTHS)
    packed_step(op, cu_seqlens, "cuda")  # first calls: builds, caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        packed_step(op, cu_seqlens, "cuda")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_boundaries_on_the_device_are_read_as_documented(monkeypatch):
    """The recorder is not blind here: a cu_seqlens that lives with the inputs is read back, once per call."""
    monkeypatch.setattr(arguments, "reads_without_waiting", lambda tensor: False)
    recorder = HostReads()
    with FakeTensorMode(allow_non_fake_inputs=True):
        cu_seqlens = torch.zeros(len(LENGTHS) + 1, dtype=torch.int64)  # a fake tensor: its values are on the device
        with recorder, pytest.raises(DataDependentOutputException):
            packed_step("delta_rule", cu_seqlens)
    assert recorder.calls == ["aten._local_scalar_dense.default"]
