"""Packed rows of documents for the op tests: inputs, each op with cu_seqlens, and each document run alone.

Every recurrent op with ``cu_seqlens`` must give, for each document, what the op gives on that document
alone (from that document's initial state): outputs, final states and the gradients of every input,
initial states and gates included. ``packed`` runs the op once on the row, ``alone`` once per document
(an empty document's final state is its initial state); both return the same list of tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from lintf.ops import (
    LinearAttentionState,
    causal_dot_product,
    causal_linear_attention,
    decayed_dot_product,
    decayed_linear_attention,
    delta_rule,
    gated_linear_attention,
)

H, C, M = 2, 5, 3
# 1, chunk - 1, chunk, chunk + 1 for the CPU kernels' 32-position chunks and the PyTorch paths' 64, an empty
# document, short ones between and a long one: every length class from 1 to 256
LENGTHS = [1, 31, 32, 33, 0, 63, 64, 65, 2, 150, 5]


def op_call(name: str) -> Callable[[dict, object, torch.Tensor | None], tuple[torch.Tensor, object]]:
    """(tensors, initial_state, cu_seqlens) -> (out, final state) for the op ``name``."""
    calls = {
        "causal_linear_attention": lambda t, s, cu: causal_linear_attention(
            t["q"], t["k"], t["v"], initial_state=s, return_state=True, cu_seqlens=cu),
        "causal_dot_product": lambda t, s, cu: causal_dot_product(
            t["q"], t["k"], t["v"], initial_state=s, return_state=True, cu_seqlens=cu),
        "decayed_dot_product": lambda t, s, cu: decayed_dot_product(
            t["q"], t["k"], t["v"], t["log_decay"], initial_state=s, return_state=True, cu_seqlens=cu),
        "decayed_linear_attention": lambda t, s, cu: decayed_linear_attention(
            t["q"], t["k"], t["v"], t["log_decay"], initial_state=s, return_state=True, cu_seqlens=cu),
        "gated_linear_attention": lambda t, s, cu: gated_linear_attention(
            t["q"], t["k"], t["v"], t["log_gate"], initial_state=s, return_state=True, cu_seqlens=cu),
        "delta_rule": lambda t, s, cu: delta_rule(
            t["q"], t["k"], t["v"], t["beta"], initial_state=s, return_state=True, cu_seqlens=cu),
        "gated_delta_rule": lambda t, s, cu: delta_rule(
            t["q"], t["k"], t["v"], t["beta"], log_decay=t["log_decay"], initial_state=s, return_state=True,
            cu_seqlens=cu),
    }
    return calls[name]


OPS = ["causal_linear_attention", "causal_dot_product", "decayed_dot_product", "decayed_linear_attention",
       "gated_linear_attention", "delta_rule", "gated_delta_rule"]
GATES = {"decayed_dot_product": ["log_decay"], "decayed_linear_attention": ["log_decay"],
         "gated_linear_attention": ["log_gate"], "delta_rule": ["beta"], "gated_delta_rule": ["beta", "log_decay"]}
LINEAR_STATE = {"causal_linear_attention", "causal_dot_product", "decayed_linear_attention"}


def boundaries(lengths: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """cu_seqlens of documents of these lengths."""
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype)


def draw(name: str, lengths: list[int], dtype: torch.dtype = torch.float64, seed: int = 0) -> dict:
    """The op's packed inputs (1, H, N, ...), one initial state per document and upstream gradients, all leaves."""
    gen = torch.Generator().manual_seed(seed)
    n, documents = sum(lengths), len(lengths)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    tensors = {"q": rand(1, H, n, C), "k": rand(1, H, n, C), "v": rand(1, H, n, M) - 0.5}
    if name.startswith(("delta", "gated_delta")):
        tensors["k"] = F.normalize(tensors["k"] - 0.5, dim=-1)
    gates = {"log_decay": -rand(1, H, n), "log_gate": -rand(1, H, n, C), "beta": 2 * rand(1, H, n)}
    tensors.update({g: gates[g] for g in GATES.get(name, [])})
    tensors = {key: t.to(dtype) for key, t in tensors.items()}
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tensors["S"] = torch.randn(documents, H, C, M, generator=gen, dtype=torch.float64).to(acc)
    if name in LINEAR_STATE:
        tensors["z"] = (rand(documents, H, C) * 3).to(acc)
    leaves = {key: t.requires_grad_() for key, t in tensors.items()}
    upstream = {"out": torch.randn(1, H, n, M, generator=gen, dtype=torch.float64).to(dtype),
                "S": torch.randn(documents, H, C, M, generator=gen, dtype=torch.float64).to(acc),
                "z": torch.randn(documents, H, C, generator=gen, dtype=torch.float64).to(acc)}
    return {"leaves": leaves, "upstream": upstream}


def document_state(leaves: dict, rows: slice) -> object:
    """The drawn initial states of the documents ``rows`` (a LinearAttentionState or a matrix)."""
    if "z" in leaves:
        return LinearAttentionState(leaves["S"][rows], leaves["z"][rows])
    return leaves["S"][rows]


def _parts(state: object) -> list[torch.Tensor]:
    return list(state) if isinstance(state, tuple) else [state]


def _with_gradients(x: dict, out: torch.Tensor, finals: list[torch.Tensor]) -> list[torch.Tensor]:
    """out, the final state's parts and the gradients of every leaf for the drawn upstream gradients."""
    upstream = x["upstream"]
    loss = (out * upstream["out"]).sum() + (finals[0] * upstream["S"]).sum()
    if len(finals) > 1:
        loss = loss + (finals[1] * upstream["z"]).sum()
    leaves = list(x["leaves"].values())
    gradients = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)  # an empty row uses none
    return [out.detach(), *(f.detach() for f in finals), *gradients]


def packed(name: str, x: dict, cu_seqlens: torch.Tensor) -> list[torch.Tensor]:
    """The op on the packed row with cu_seqlens."""
    leaves = x["leaves"]
    per_position = {key: t for key, t in leaves.items() if key not in ("S", "z")}
    out, final = op_call(name)(per_position, document_state(leaves, slice(None)), cu_seqlens)
    return _with_gradients(x, out, _parts(final))


def alone(name: str, x: dict, cu_seqlens: torch.Tensor) -> list[torch.Tensor]:
    """The op on each document alone, outputs laid end to end and final states stacked."""
    leaves = x["leaves"]
    bounds = cu_seqlens.tolist()
    outs, finals = [], []
    for d, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        state = document_state(leaves, slice(d, d + 1))
        if end == start:
            finals.append(_parts(state))
            continue
        per_position = {key: t[:, :, start:end] for key, t in leaves.items() if key not in ("S", "z")}
        out, final = op_call(name)(per_position, state, None)
        outs.append(out)
        finals.append(_parts(final))
    out = torch.cat(outs, dim=2) if outs else leaves["v"][:, :, :0] * 0
    return _with_gradients(x, out, [torch.cat(parts, dim=0) for parts in zip(*finals)])


def names(op: str) -> list[str]:
    """What ``packed`` and ``alone`` return, for messages."""
    state = ["final S", "final z"] if op in LINEAR_STATE else ["final S"]
    leaves = ["q", "k", "v", *GATES.get(op, []), "S0", *(["z0"] if op in LINEAR_STATE else [])]
    return ["out", *state, *(f"d{leaf}" for leaf in leaves)]


def assert_same(op: str, got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    """Each tensor within ``tolerance`` of the other, relative to max(1, its largest magnitude)."""
    assert len(got) == len(want) == len(names(op))
    for label, a, b in zip(names(op), got, want):
        assert a.shape == b.shape, f"{op} {label}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
        error = (a - b).abs().max().item() / scale if b.numel() else 0.0
        assert error <= tolerance, f"{op} {label}: scaled error {error:.2e} > {tolerance:.0e}"
