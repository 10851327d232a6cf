"""What every op's ``compiled.py`` shares: whether the library serves a device, the autocast rule, registration.

An op ``lintf::<name>`` of the compiled library comes with a backward op ``lintf::<name>_backward``
and, in Python, fake and autograd rules (and, for ops that take autocast's dtype, an autocast rule).
``serves`` tells whether the op runs a device's tensors now; ``register_rules`` registers the Python
rules once per process, when the loaded library defines the op. Each ``compiled.py`` hands its
registration to ``lintf.ops.extension.on_load``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lintf.ops import extension
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.common.recorded_gradients import not_differentiable
from lintf.ops.extension.environment import extension_disabled

AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}  # the dispatch key of each device's autocast
_REGISTERED: set[str] = set()
_KEEP_ALIVE: list[torch.library.Library] = []  # a Library's registrations last as long as the object


def serves(name: str, device: torch.device, device_types: tuple[str, ...] = ("cpu",)) -> bool:
    """Whether ``lintf::<name>`` runs tensors on device now.

    Args:
        name: the op's name in the ``lintf`` namespace, e.g. ``"delta_rule"``.
        device: the inputs' device.
        device_types: the device types the op has kernels for.

    Returns:
        True for a device of those types when ``LINTF_EXTENSION`` is not off (read on every call) and
        the library, loaded now if need be, serves the device and defines the op.
    """
    if device.type not in device_types or extension_disabled():
        return False
    return library_defines(name, device.type)


@torch.compiler.assume_constant_result
def library_defines(name: str, device_type: str) -> bool:
    """Whether the library is loaded for device_type and defines ``lintf::<name>`` (an older build may not).

    A constant under ``torch.compile``: the graph keeps the branch it took, with no guard on the library.
    """
    return extension.serves(device_type) and hasattr(torch.ops.lintf, name)


CUDA_TILE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the chunked CUDA kernels take
CUDA_MAX_FEATURES = 128  # C a block of the chunked CUDA kernels holds whole


def takes(name: str, q: Tensor, v: Tensor) -> bool:
    """Whether the kernels of ``lintf::<name>`` on q's device take q (B, H, N, C) and v (B, H, N, M).

    Every CPU call; on CUDA the chunked kernels' tiles: fp32, fp16 or bf16 with C <= 128 on compute
    capability 8.0 or newer, as far as the GPU's shared memory per block allows (the op's
    ``<name>_cuda_takes`` says; other calls take the PyTorch path).

    Args:
        name: the op's name in the ``lintf`` namespace.
        q: the queries.
        v: the values.
    """
    if q.device.type != "cuda":
        return True
    if q.dtype not in CUDA_TILE_DTYPES or q.shape[-1] > CUDA_MAX_FEATURES:
        return False
    return cuda_kernels_take(name, q.device, q.dtype, int(q.shape[-1]), int(v.shape[-1]))


@torch.compiler.assume_constant_result
def cuda_kernels_take(name: str, device: torch.device, dtype: torch.dtype, features: int, values: int) -> bool:
    """``lintf::<name>_cuda_takes``: the op's CUDA plan for these sizes (a constant under ``torch.compile``); False
    for a build without it."""
    query = f"{name}_cuda_takes"
    return hasattr(torch.ops.lintf, query) and bool(getattr(torch.ops.lintf, query)(device, dtype, features, values))


def fake_state(q: Tensor, v: Tensor) -> Tensor:
    """An empty (B, H, C, M) state in the accumulation dtype, for q (B, H, N, C) and v (B, H, N, M): fake kernels."""
    batch, heads, _, features = q.shape
    return q.new_empty(batch, heads, features, v.shape[-1], dtype=accumulation_dtype(v.dtype))


def autocast_kernel(name: str, device_type: str) -> Callable[..., tuple[Tensor, ...]]:
    """The autocast rule of ``lintf::<name>(q, k, v, ...)`` on device_type: q, k, v in autocast's dtype.

    fp64 inputs and every argument after v (states, decays, gates: the accumulation dtype) stay as they
    are, and the kernel accumulates in fp32 itself; ``torch.library.register_autocast`` would cast the
    fp32 state too. Autocast turned off inside the rule excludes the device's autocast dispatch key, so
    the call below reaches the device's kernel.

    Args:
        name: the op's name in the ``lintf`` namespace.
        device_type: the device type whose autocast the rule serves ("cpu", "cuda").
    """

    op = getattr(torch.ops.lintf, name)

    def kernel(q: Tensor, k: Tensor, v: Tensor, *args: object, **kwargs: object) -> tuple[Tensor, ...]:
        dtype = torch.get_autocast_dtype(device_type)
        if torch.float64 not in (q.dtype, k.dtype, v.dtype):
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        with torch.autocast(device_type, enabled=False):
            return op(q, k, v, *args, **kwargs)

    return kernel


def register_rules(
    name: str,
    fake: Callable[..., tuple],
    fake_backward: Callable[..., tuple],
    backward: Callable[..., tuple],
    setup_context: Callable[..., None],
    *,
    autocast: bool,
) -> None:
    """Register the Python rules of ``lintf::<name>`` and its backward op, once, if the loaded library defines it.

    Call it from the module the op's schema names (``set_python_module``): torch takes the fake kernels
    to come from the caller's module and checks that it is that one.

    Args:
        name: the op's name in the ``lintf`` namespace; its backward op is ``<name>_backward``.
        fake: the op's fake kernel (shapes and dtypes of its outputs).
        fake_backward: the backward op's fake kernel.
        backward: the op's autograd backward (``torch.library.register_autograd``).
        setup_context: what the op's forward saves for backward.
        autocast: whether to register ``autocast_kernel`` at every key of ``AUTOCAST_KEYS``.
    """
    if name in _REGISTERED or not hasattr(torch.ops.lintf, name):
        return
    op, backward_op = f"lintf::{name}", f"lintf::{name}_backward"
    # torch checks that the fake kernels come from the module the schema names (set_python_module): the
    # caller's, one frame up
    torch.library.register_fake(op, fake, _stacklevel=2)
    torch.library.register_fake(backward_op, fake_backward, _stacklevel=2)
    torch.library.register_autograd(op, backward, setup_context=setup_context)
    torch.library.register_autograd(backward_op, not_differentiable(backward_op, op))
    if autocast:
        library = torch.library.Library("lintf", "IMPL")
        for device_type, key in AUTOCAST_KEYS.items():
            library.impl(name, autocast_kernel(name, device_type), key)
        _KEEP_ALIVE.append(library)
    _REGISTERED.add(name)
