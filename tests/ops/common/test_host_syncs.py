"""A training step of every causal attention reads no value back to the host on the path a GPU tensor takes.

A read-back (``.item()``, ``bool(tensor)``, ``.tolist()``, a copy to the CPU) makes the host wait for
every kernel queued before it: once per layer and step, the GPU idles while Python catches up. The
test runs a TransformerEncoder's forward and backward on fake tensors (``FakeTensorMode``: shapes
and dtypes only, so any read of a value fails) with the ops' device predicate
(``reads_without_waiting``) saying "GPU", through the compiled ops (their fake kernels, as a CUDA
build routes them) and through the PyTorch path (what a CUDA tensor takes without the CUDA build), and
records every aten call that reads a value or copies one to the host. On a GPU the same step runs
under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from lintf.models.transformer import TransformerEncoder
from lintf.ops.common import arguments
from lintf.ops.gla.product import gated_linear_attention
from lintf.registry import ATTENTIONS, LAYERS
from tests.conftest import causal_attention_names

READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default, torch.ops.aten.item.default}
COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default, torch.ops.aten.to.device}
# attentions whose sparsity pattern or clusters are built from values on every call (torch.unique,
# k-means assignments read back): not recurrent, and they do synchronise; strict, so a fix shows
SYNCING = {
    "axial": "pattern keys via torch.unique",
    "bigbird": "pattern keys via torch.unique",
    "blockwise": "pattern keys via torch.unique",
    "longformer": "pattern keys via torch.unique",
    "sparse_fixed": "pattern keys via torch.unique",
    "sparse_strided": "pattern keys via torch.unique",
    "routing": "k-means cluster sizes read back",
}


class HostReads(TorchDispatchMode):
    """Records the aten calls that read a tensor's value on the host or copy a tensor to another device."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS:
            self.calls.append(str(func))
        out = func(*args, **kwargs)
        if func in COPIES:
            sources = {t.device for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            targets = {t.device for t in tree_leaves(out) if isinstance(t, torch.Tensor)}
            if targets - sources:
                self.calls.append(f"{func} to {targets - sources}")
        return out


class DeviceChecks(TorchDispatchMode):
    """Records the device-side assertions (``torch._assert_async``): a pass over a tensor and a few launches each."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "_assert_async":
            self.calls.append(str(args[1]) if len(args) > 1 else str(func))
        return func(*args, **(kwargs or {}))


def training_step_reads(name: str, layer: str = "projections", recorder: TorchDispatchMode | None = None) -> list[str]:
    """The host reads (or ``recorder``'s calls) of one forward + backward of a 2-layer encoder on fake tensors.

    Args:
        name: the attention of both layers.
        layer: "projections" (the bare formula) or "recipe".
        recorder: what to record; None records host reads.
    """
    config = dict(d_model=16, n_heads=2, n_layers=2, attention=name, dropout=0.0, layer=layer)
    encoder = TransformerEncoder(config)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.randn(2, 24, 16, requires_grad=True)
        recorder = HostReads() if recorder is None else recorder
        try:
            with recorder:
                encoder(x, causal=True).square().mean().backward()
        except (DataDependentOutputException, DynamicOutputShapeException) as error:
            recorder.calls.append(f"{type(error).__name__}: {error}")
    return recorder.calls


@pytest.fixture
def as_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ops' value checks take the branch of a device whose reads stall the host."""
    monkeypatch.setattr(arguments, "reads_without_waiting", lambda tensor: False)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(reason=SYNCING[n], strict=True)) if n in SYNCING else n
     for n in causal_attention_names()],
)
def test_a_training_step_reads_no_value_back(name, op_path, as_on_a_gpu):
    assert training_step_reads(name) == []


def built_in(name: str) -> bool:
    return ATTENTIONS.get(name).__module__.startswith("lintf.")


@pytest.mark.parametrize(
    ("name", "layer"),
    [(n, "projections") for n in causal_attention_names() if built_in(n) and n not in SYNCING]
    + [(n, "recipe") for n in LAYERS.names()],
)
def test_gates_built_in_range_are_not_checked_on_the_device(name, layer, op_path, as_on_a_gpu):
    """lintf's attentions build their gates in range (log-sigmoids, sigmoids, fixed decays) and skip the op's check."""
    assert training_step_reads(name, layer, DeviceChecks()) == []


def test_an_op_called_directly_checks_its_gates_on_the_device(as_on_a_gpu):
    """The recorder is not blind: a user's call of the op, whose gates are unknown, gets the device-side check."""
    with FakeTensorMode(), DeviceChecks() as recorder:
        q = torch.randn(1, 2, 8, 4)
        gated_linear_attention(q, q, q, -torch.rand(1, 2, 8, 4))
    assert recorder.calls == ["gated linear attention: log_gate must be <= 0 (gates in (0, 1])"]


def test_the_recorder_sees_each_kind_of_read(as_on_a_gpu):
    """The recorder is not blind: every kind of read-back the rule forbids shows up."""
    for read in (lambda t: t.sum().item(), lambda t: bool(t.sum() > 0), lambda t: t.tolist()):
        with FakeTensorMode(), HostReads() as recorder:
            with pytest.raises(DataDependentOutputException):
                read(torch.randn(3))
        assert recorder.calls, read
    with FakeTensorMode(), HostReads() as recorder:
        torch.randn(3).to("meta")
    assert recorder.calls == ["aten._to_copy.default to {device(type='meta')}"]


def test_a_bad_gate_on_a_gpu_becomes_a_device_assertion(as_on_a_gpu):
    """On the GPU branch a bad value is refused without a read: torch._assert_async, which the CPU runs at once."""
    bad = torch.full((1, 1, 4), 0.5)
    with pytest.raises(RuntimeError, match=r"decayed product: log_decay must be <= 0") as caught:
        arguments.check_range("decayed product", "log_decay", bad, None, 0.0, "<= 0 (decays in (0, 1])")
    assert caught.type is RuntimeError  # not the CPU branch's ValueError
    arguments.check_range("decayed product", "log_decay", -bad, None, 0.0, "<= 0 (decays in (0, 1])")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", [n for n in causal_attention_names() if n not in SYNCING])
def test_a_cuda_training_step_passes_the_sync_debug_mode(name):
    encoder = TransformerEncoder(dict(d_model=64, n_heads=2, n_layers=2, attention=name, dropout=0.0)).cuda()
    x = torch.randn(2, 128, 64, device="cuda", requires_grad=True)
    encoder(x, causal=True).square().mean().backward()  # first calls: builds, caches, plans
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = encoder(x, causal=True).square().mean()
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(x.grad).all()
