"""lintf.ops.common.compiled_op: when a compiled op serves, and its registration once per process.

The ops' own tests (tests/ops/delta, tests/ops/gla) check the rules it registers: opcheck (fake and
autograd), autocast and torch.compile.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops.common import compiled_op
from lintf.ops.delta import compiled as delta_compiled


def test_no_op_serves_a_device_type_it_has_no_kernel_for():
    assert not compiled_op.serves("delta_rule", torch.device("meta"))
    assert not compiled_op.serves("delta_rule", torch.device("cpu"), device_types=("cuda",))


def test_no_op_serves_with_the_extension_off(monkeypatch):
    monkeypatch.setenv("LINTF_EXTENSION", "off")
    assert not compiled_op.serves("delta_rule", torch.device("cpu"))


def test_an_op_the_library_does_not_define_does_not_serve():
    assert not compiled_op.serves("no_such_op", torch.device("cpu"))
    compiled_op.register_rules("no_such_op", None, None, None, None, autocast=True)  # nothing to register
    assert "no_such_op" not in compiled_op._REGISTERED


def test_registering_twice_registers_once():
    if not delta_compiled.serves(torch.device("cpu")):
        pytest.skip("the compiled delta rule is unavailable (LINTF_EXTENSION=off, no compiler or an older build)")
    assert "delta_rule" in compiled_op._REGISTERED  # registered when the library loaded
    keep_alive = list(compiled_op._KEEP_ALIVE)
    delta_compiled.register_python_parts()  # a second fake registration would raise
    assert compiled_op._KEEP_ALIVE == keep_alive
