"""Fixtures of the op tests."""

from __future__ import annotations

import os

import pytest
import torch

from lintf.ops import compiled_op_available, extension


@pytest.fixture(scope="session")
def compiled_op() -> None:
    """Require the compiled CPU op (built on first use); skipped only when LINTF_EXTENSION=off."""
    if os.environ.get("LINTF_EXTENSION", "").lower() in {"0", "off", "false", "no"}:
        pytest.skip("LINTF_EXTENSION=off: the compiled op is disabled")
    assert compiled_op_available("cpu"), "the compiled causal-product op failed to build or load (see warnings)"


@pytest.fixture(params=["compiled", "pytorch"])
def op_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run lintf.ops through the compiled op, or through the pure-PyTorch path as without the extension."""
    if request.param == "compiled":
        request.getfixturevalue("compiled_op")
    else:
        monkeypatch.setattr(extension, "serves", lambda device_type: False)  # what every op asks
    return request.param


@pytest.fixture
def matmul_precision():
    """torch.set_float32_matmul_precision for the test, the precision before it restored afterwards."""
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)
