"""What lintf.ops relies on from torch beyond its documented API, pinned so a torch release that changes it fails here.

The ops use no private torch API (``torch._C``, ``torch._ops``, ...): the loader records which
devices a build serves in its manifest instead of asking the dispatcher, an op tells whether the
loaded library defines it by ``hasattr(torch.ops.lintf, name)``, and the causal product's autocast
kernel turns autocast off with ``torch.autocast(..., enabled=False)`` instead of excluding the
dispatch key by hand. Each test below names the code that depends on the behaviour it checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import lintf.ops
from lintf.ops.extension import build

OPS = Path(lintf.ops.__file__).parent


def private_torch_uses(path: Path) -> list[str]:
    """``torch._x`` attributes and imports of ``torch._x`` modules in a source file, as 'file:line name'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            name = f"torch.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            name = node.module
        elif isinstance(node, ast.Import):
            name = next((alias.name for alias in node.names if alias.name.startswith("torch._")), "")
        else:
            continue
        if name.startswith("torch._") and not name.startswith("torch.__"):
            found.append(f"{path.relative_to(OPS.parent.parent)}:{node.lineno} {name}")
    return found


PINNED = {"torch._assert_async": "test_assert_async_raises_its_message_on_a_false_value"}
"""The private torch APIs lintf.ops uses, each with the test below that pins what the ops rely on."""


def test_the_ops_use_no_private_torch_api():
    found = [use for path in sorted(OPS.rglob("*.py")) for use in private_torch_uses(path)]
    unpinned = [use for use in found if use.split()[-1] not in PINNED]
    assert unpinned == [], (
        "lintf.ops calls private torch APIs, which change without notice between releases; use a public API "
        f"or pin the behaviour it relies on with a test in this file (and list it in PINNED): {unpinned}"
    )
    assert all(name in globals() for name in PINNED.values())


def test_assert_async_raises_its_message_on_a_false_value():
    """lintf.ops.common.arguments.check_range: on a GPU a value check is ``torch._assert_async`` (no host read);
    on the CPU, where the test can run it, a false value raises with the check's message and a true one passes."""
    torch._assert_async(torch.tensor(True), "never raised")
    with pytest.raises(RuntimeError, match="log-decays must be <= 0"):
        torch._assert_async(torch.tensor(False), "log-decays must be <= 0")


def test_an_op_a_library_does_not_define_is_an_attribute_error():
    """lintf.ops.decayed.compiled: an ahead-of-time build older than the decayed op is told by hasattr."""
    assert not hasattr(torch.ops.lintf, "no_such_op"), (
        "torch.ops.<namespace>.<undefined op> no longer raises AttributeError; lintf.ops.decayed.compiled "
        "needs another way to tell whether the loaded library defines lintf::decayed_product"
    )


@pytest.mark.usefixtures("compiled_op")
def test_loaded_libraries_lists_the_loaded_library():
    """lintf.ops.extension.load: a library this process loaded already is found there, never loaded twice."""
    names = [Path(p).name for p in torch.ops.loaded_libraries]
    assert any(name.startswith(f"{build.NAME}.") for name in names), (
        f"torch.ops.loaded_libraries no longer lists the libraries torch.ops.load_library loaded ({names}); "
        "lintf.ops.extension.load would load the library a second time"
    )


@pytest.fixture(scope="module")
def probe_op():
    """lintf_contract::probe(x, state) -> x * 2 with kernels for CPU and AutocastCPU, the latter like the causal
    product's: x cast to the autocast dtype, the state left alone, the op called again with autocast off."""
    calls: list[tuple[str, torch.dtype, torch.dtype, bool]] = []
    library = torch.library.Library("lintf_contract", "DEF")
    library.define("probe(Tensor x, Tensor state) -> Tensor")

    def cpu(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        calls.append(("CPU", x.dtype, state.dtype, torch.is_autocast_enabled("cpu")))
        return x * 2

    def autocast(x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        calls.append(("AutocastCPU", x.dtype, state.dtype, torch.is_autocast_enabled("cpu")))
        x = x.to(torch.get_autocast_dtype("cpu"))
        with torch.autocast("cpu", enabled=False):
            return torch.ops.lintf_contract.probe(x, state)

    library.impl("probe", cpu, "CPU")
    library.impl("probe", autocast, "AutocastCPU")
    library.impl("probe", autocast, "AutocastCUDA")  # the key name lintf.ops.common.compiled_op registers for CUDA
    yield calls
    del library  # its registrations go with it


def test_autocast_off_inside_an_autocast_kernel_reaches_the_device_kernel(probe_op):
    """lintf.ops.common.compiled_op.autocast_kernel: the op runs once in the autocast dtype, the fp32 state uncast."""
    x, state = torch.ones(3), torch.zeros(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.ops.lintf_contract.probe(x, state)
    want = [("AutocastCPU", torch.float32, torch.float32, True), ("CPU", torch.bfloat16, torch.float32, False)]
    assert probe_op == want, (
        "a kernel at the AutocastCPU key that turns autocast off (torch.autocast(..., enabled=False)) no longer "
        f"reaches the CPU kernel exactly once ({probe_op}); lintf.ops.common.compiled_op's autocast rule must change"
    )
    assert out.dtype == torch.bfloat16
    probe_op.clear()
    torch.ops.lintf_contract.probe(x, state)
    assert probe_op == [("CPU", torch.float32, torch.float32, False)], "the autocast kernel ran without autocast"
    probe_op.clear()


def test_register_fake_takes_the_frame_it_attributes_the_registration_to():
    """lintf.ops.common.compiled_op.register_rules: the fake kernels it registers count as the op's own module's.

    torch accepts a fake kernel only from the module the op's schema names (``set_python_module``);
    ``register_rules`` registers them for that module's caller with ``_stacklevel=2``."""
    import inspect

    parameters = inspect.signature(torch.library.register_fake).parameters
    assert "_stacklevel" in parameters, (
        "torch.library.register_fake lost its _stacklevel argument; lintf.ops.common.compiled_op.register_rules "
        "must register each op's fake kernels from the op's own compiled.py module instead"
    )
