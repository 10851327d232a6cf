"""Python side of the compiled op ``lintf::causal_product``: fake, autograd and autocast rules.

The schema and the CPU/CUDA kernels live in ``csrc/`` (``TORCH_LIBRARY(lintf, ...)``)::

    lintf::causal_product(q, k, v, eps, normalize) -> (out, denominator)
    lintf::causal_product_backward(grad_out, q, k, v, out, denominator, normalize) -> (dq, dk, dv)

q, k: (B, H, N, C); v, out, grad_out: (B, H, N, M); denominator: (B, H, N) in the accumulation
dtype when normalize, else (0,). The C++ library names this module (``set_python_module``) so
torch imports it whenever it needs the fake kernels; ``_ext.load_extension`` calls
``register_python_parts`` right after loading the library.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.fallback import accumulation_dtype

_OP = "lintf::causal_product"
_BACKWARD_OP = "lintf::causal_product_backward"
_AUTOCAST_DEVICES = ("cpu", "cuda")
_registered = False


def causal_product(q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool) -> Tensor:
    """Run the compiled op; (B, H, N, M) in v's dtype. Inputs must already be validated."""
    return torch.ops.lintf.causal_product(q, k, v, eps, normalize)[0]


def _fake_forward(q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool) -> tuple[Tensor, Tensor]:
    batch, heads, length, _ = q.shape
    denominator_shape = (batch, heads, length) if normalize else (0,)
    denominator = q.new_empty(denominator_shape, dtype=accumulation_dtype(v.dtype))
    return v.new_empty(v.shape), denominator


def _fake_backward(
    grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, denominator: Tensor, normalize: bool
) -> tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:  # noqa: ANN001 (torch ctx)
    q, k, v, _, normalize = inputs
    out, denominator = output
    ctx.save_for_backward(q, k, v, out, denominator)
    ctx.normalize = normalize
    ctx.mark_non_differentiable(denominator)


def _backward(ctx, grad_out: Tensor, _grad_denominator: Tensor | None) -> tuple:  # noqa: ANN001 (torch ctx)
    q, k, v, out, denominator = ctx.saved_tensors
    dq, dk, dv = torch.ops.lintf.causal_product_backward(grad_out, q, k, v, out, denominator, ctx.normalize)
    return dq, dk, dv, None, None


def _autocast_kernel(device_type: str):  # noqa: ANN202 (dispatcher kernel)
    """Run in the autocast dtype (fp32 accumulation is inside the kernel); fp64 stays fp64."""
    key = getattr(torch._C.DispatchKey, "Autocast" + torch._C._dispatch_key_for_device(device_type))

    def kernel(_keyset, q: Tensor, k: Tensor, v: Tensor, eps: float, normalize: bool) -> tuple[Tensor, Tensor]:
        dtype = torch.get_autocast_dtype(device_type)
        if torch.float64 not in (q.dtype, k.dtype, v.dtype):
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return torch.ops.lintf.causal_product(q, k, v, eps, normalize)

    return kernel


def register_python_parts() -> None:
    """Register fake, autograd and autocast rules for the loaded library (idempotent)."""
    global _registered
    if _registered:
        return
    torch.library.register_fake(_OP, _fake_forward)
    torch.library.register_fake(_BACKWARD_OP, _fake_backward)
    torch.library.register_autograd(_OP, _backward, setup_context=_setup_context)
    library = torch.library.Library("lintf", "IMPL")
    for device_type in _AUTOCAST_DEVICES:
        key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        library.impl("causal_product", _autocast_kernel(device_type), key, with_keyset=True)
    _KEEP_ALIVE.append(library)
    _registered = True


_KEEP_ALIVE: list[torch.library.Library] = []
