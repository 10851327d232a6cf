"""Packed documents through the CUDA kernels, run on the CPU under the emulation of CUDA's execution model.

The CUDA ops serve a packed row the way every backend does: the row is re-laid into batches of documents
by length class, right-padded with zeros (``lintf.ops.common.documents``), and the batches go to the
kernels unchanged. Here the emulated kernels (tests/ops/causal/cuda_emulation/, as in each op's
test_cuda_emulated.py) take that re-layout, wrapped in autograd, and must give for each document what they
give on the document alone: outputs, final states and the gradients of every input, initial states
included, in fp32 on the tensor-core kernels. Documents of 1, 63, 64, 65 and 130 positions around the
kernels' 64-position chunks, and an empty one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from lintf.ops.common.documents import plan_documents, run_documents
from tests.ops.causal.cuda_emulation.loader import (
    CSRC,
    EMULATION,
    cuda_headers,
    load_emulated,
)

H, C, M = 2, 16, 16
LENGTHS = [1, 63, 0, 64, 65, 3, 130]
TOLERANCE = 1e-5  # fp32 kernels; the documents alone and packed run the same arithmetic up to summation order


def emulated_module(op: str):
    """The emulated module of ``op``'s CUDA kernels (built once per content, as by its own tests)."""
    inputs_h = CSRC / "common" / "inputs.h"
    if op == "causal":
        headers = [inputs_h, CSRC / "causal" / "causal_product.h", *cuda_headers("common/cuda", "causal/cuda")]
        return load_emulated("lintf_cuda_emulation", EMULATION / "emulated_op.cpp", headers)
    headers = [inputs_h, *cuda_headers("common/cuda", f"{op}/cuda")]
    return load_emulated(f"lintf_{op}_emulation", CSRC.parent / f"tests/ops/{op}/cuda_emulated_op.cpp", headers)


class Kernels:
    """One op's emulated forward and backward on (per-position tensors..., state parts...)."""

    def __init__(self, op: str, module: Any) -> None:
        self.op, self.module = op, module
        self.gates = {"causal": [], "decayed": ["log_decay"], "gla": ["log_gate"], "delta": ["beta", "log_decay"]}[op]
        self.state_parts = 2 if op == "causal" else 1

    def forward(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """out, the final state's parts, then what the backward needs besides the inputs."""
        m, inputs = self.module, [t.contiguous() for t in tensors]
        if self.op == "causal":
            q, k, v, kv, z = inputs
            out, den, kv_final, z_final = m.forward(q, k, v, 1e-6, True, kv, z)
            return [out, kv_final, z_final, den]
        if self.op == "gla":
            q, k, v, gate, state = inputs
            return list(m.forward(q, k, v, gate, C**-0.5, state))
        if self.op == "delta":
            q, k, v, beta, decay, state = inputs
            return list(m.forward(q, k, v, beta, decay, C**-0.5, state))
        return list(m.forward(*inputs))

    def backward(self, tensors: list[torch.Tensor], outs: list[torch.Tensor], grads: list) -> list[torch.Tensor]:
        m, inputs = self.module, [t.contiguous() for t in tensors]
        grads = [torch.zeros_like(o) if g is None else g.contiguous() for o, g in zip(outs, grads)]
        if self.op == "causal":
            q, k, v, kv, z = inputs
            return list(m.backward(grads[0], q, k, v, outs[0], outs[3], True, kv, z, grads[1], grads[2]))
        if self.op == "gla":
            q, k, v, gate, state = inputs
            return list(m.backward(grads[0], q, k, v, gate, C**-0.5, state, grads[1]))
        if self.op == "delta":
            q, k, v, beta, decay, state = inputs
            return list(m.backward(grads[0], q, k, v, beta, decay, C**-0.5, state, grads[1]))
        return list(m.backward(grads[0], *inputs, grads[1]))


class EmulatedOp(torch.autograd.Function):
    """The emulated kernels as an autograd function: (kernels, *inputs) -> (out, *final state parts)."""

    @staticmethod
    def forward(ctx: Any, kernels: Kernels, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # noqa: D102
        outs = kernels.forward(list(tensors))
        ctx.kernels, ctx.count = kernels, 1 + kernels.state_parts
        ctx.save_for_backward(*tensors, *outs)
        return tuple(outs[: ctx.count])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:  # noqa: D102
        saved = ctx.saved_tensors
        count = _inputs(ctx.kernels)
        tensors, outs = saved[:count], saved[count:]
        return (None, *ctx.kernels.backward(list(tensors), list(outs), list(grads)))


def _inputs(kernels: Kernels) -> int:
    return 3 + len(kernels.gates) + kernels.state_parts


def draw(kernels: Kernels, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    n, documents = sum(LENGTHS), len(LENGTHS)
    q, k = torch.randn(1, H, n, C, generator=gen), torch.randn(1, H, n, C, generator=gen)
    if kernels.op == "causal":
        q, k = F.elu(q) + 1, F.elu(k) + 1
    else:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    t = {"q": q, "k": k, "v": torch.randn(1, H, n, M, generator=gen)}
    gates = {"log_decay": -torch.rand(1, H, n, generator=gen), "log_gate": -torch.rand(1, H, n, C, generator=gen),
             "beta": 2 * torch.rand(1, H, n, generator=gen)}
    t.update({name: gates[name] for name in kernels.gates})
    t["S"] = torch.randn(documents, H, C, M, generator=gen)
    if kernels.op == "causal":
        t["z"] = 3 * torch.rand(documents, H, C, generator=gen)
    t = {name: x.requires_grad_() for name, x in t.items()}
    t["grad"] = [torch.randn(1, H, n, M, generator=gen), torch.randn(documents, H, C, M, generator=gen),
                 torch.randn(documents, H, C, generator=gen)]
    return t


def gradients(t: dict, out: torch.Tensor, finals: list[torch.Tensor]) -> list[torch.Tensor]:
    loss = sum((x * g).sum() for x, g in zip([out, *finals], t["grad"]))
    leaves = [x for name, x in t.items() if name != "grad"]
    return [out.detach(), *(f.detach() for f in finals), *torch.autograd.grad(loss, leaves)]


def packed(kernels: Kernels, t: dict) -> list[torch.Tensor]:
    bounds = [0, *torch.tensor(LENGTHS).cumsum(0).tolist()]
    per_position = {name: t[name] for name in ("q", "k", "v", *kernels.gates)}
    states = [t["S"], t["z"]] if kernels.op == "causal" else t["S"]

    def run(tensors: dict, state: object) -> tuple[torch.Tensor, object]:
        parts = list(state) if isinstance(state, tuple) else [state]
        out, *finals = EmulatedOp.apply(kernels, *tensors.values(), *parts)
        return out, tuple(finals) if kernels.op == "causal" else finals[0]

    out, finals = run_documents(run, per_position, plan_documents(bounds, torch.device("cpu")),
                                tuple(states) if kernels.op == "causal" else states, None)
    return gradients(t, out, list(finals) if kernels.op == "causal" else [finals])


def alone(kernels: Kernels, t: dict) -> list[torch.Tensor]:
    bounds = [0, *torch.tensor(LENGTHS).cumsum(0).tolist()]
    outs, finals = [], []
    for d, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        state = [t["S"][d : d + 1]] + ([t["z"][d : d + 1]] if kernels.op == "causal" else [])
        if start == end:
            finals.append(state)
            continue
        tensors = [t[name][:, :, start:end] for name in ("q", "k", "v", *kernels.gates)]
        out, *final = EmulatedOp.apply(kernels, *tensors, *state)
        outs.append(out)
        finals.append(final)
    return gradients(t, torch.cat(outs, dim=2), [torch.cat(parts) for parts in zip(*finals)])


@pytest.mark.parametrize("op", ["causal", "decayed", "gla", "delta"])
def test_packed_equals_each_document_alone(op):
    kernels = Kernels(op, emulated_module(op))
    t = draw(kernels)
    got, want = packed(kernels, t), alone(kernels, t)
    assert len(got) == len(want) == 4 + 2 * kernels.state_parts + len(kernels.gates)
    for index, (a, b) in enumerate(zip(got, want)):
        error = (a - b).abs().max().item() / max(1.0, b.abs().max().item())
        assert error <= TOLERANCE, f"{op}: tensor {index} (out, final state, gradients): scaled error {error:.2e}"
