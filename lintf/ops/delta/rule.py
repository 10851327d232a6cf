"""The delta rule's entry point: DeltaNet and Gated DeltaNet's recurrence over a whole sequence.

For each position t, with S_0 = ``initial_state`` (zeros when absent):

    S = exp(log_decay_t) S          (Gated DeltaNet; skipped without log_decay)
    u_t = beta_t (v_t - S^T k_t)    (the value stored for k_t is moved towards v_t by beta_t)
    S = S + k_t u_t^T
    o_t = scale S^T q_t

(Schlag et al. 2021; Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length"; Yang et al. 2025, "Gated Delta Networks"). Each step multiplies the state by
(I - beta_t k_t k_t^T), which for unit-norm keys and beta in [0, 2] never grows it: the attentions
L2-normalise q and k. Accumulates in fp32 (fp64 for fp64 inputs) with autocast's dtype in and out.

When the compiled op is built (``compiled.serves``, ``compiled.takes``) and ``LINTF_EXTENSION`` is not
``off``, ``lintf::delta_rule`` runs it (``compiled.py``, kernels in ``csrc/delta/``): on the CPU the same
chunked form in C++ with chunks of 32 positions and a backward that keeps one state per chunk; on CUDA
(fp32, fp16, bf16, C <= 128, compute capability 8.0+) chunks of 64 whose WY forms, outputs and gradients
are batched over all chunks and whose state passes run as sequential tensor-core sweeps, one per
(head, value tile).
Everything else (fp64 or wide heads on CUDA, no compiler, double backward) takes the pure-PyTorch path
(``chunked.py``, the WY form of each chunk). ``reference.py`` holds the naive recurrence the tests compare against,
``state.py`` the state.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.common.documents import packed_call
from lintf.ops.common.dtypes import accumulation_dtype
from lintf.ops.delta import compiled
from lintf.ops.common.arguments import check_range
from lintf.ops.delta.arguments import autocast_inputs, check_per_position, check_qkv, resolve_scale
from lintf.ops.delta.chunked import delta_rule_chunked
from lintf.ops.delta.state import check_matrix_state

OWNER = "delta rule"


def check_delta_rule_inputs(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, initial_state: object,
    check_ranges: bool = True,
) -> None:
    """Raise ValueError unless the delta rule's arguments agree (shapes, dtypes, devices, ranges)."""
    check_qkv(OWNER, q, k, v)
    check_per_position(OWNER, "beta", beta, q)
    if check_ranges:
        check_range(OWNER, "beta", beta, 0.0, 2.0, "in [0, 2] (the step moves a stored value by beta)")
    if log_decay is not None:
        check_per_position(OWNER, "log_decay", log_decay, q)
        if check_ranges:
            check_range(OWNER, "log_decay", log_decay, None, 0.0, "<= 0 (decays in (0, 1])")
    if initial_state is not None:
        check_matrix_state(initial_state, q, v, OWNER)


def delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    *,
    log_decay: Tensor | None = None,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
    check_ranges: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """The delta rule (gated when ``log_decay`` is given) over a sequence; differentiable in every input.

    Args:
        q: (B, H, N, C) queries (DeltaNet: L2-normalised).
        k: (B, H, N, C) keys (DeltaNet: L2-normalised).
        v: (B, H, N, M) values.
        beta: (B, H, N) writing strengths in [0, 2].
        log_decay: (B, H, N) log of the state's decay at each position, <= 0; None: no decay.
        scale: output scale; None is C ** -0.5.
        initial_state: (B, H, C, M) state before position 0, in the accumulation dtype (fp32, fp64 for fp64
            inputs); None is zeros.
        return_state: also return the state after the last position.
        cu_seqlens: (D + 1,) int32/int64 boundaries of D documents packed in one row (B = 1), from 0 to N,
            never decreasing (empty documents allowed), on the CPU or the inputs' device; the state restarts at
            each document, ``initial_state`` then holds one state per document (batch D) and the returned
            state is each document's final one. Read on the host once per call (one synchronisation on a
            GPU unless it is a CPU tensor); see ``lintf.ops.common.documents``.
        check_ranges: check that beta is in [0, 2] and log_decay <= 0 (a ValueError on the CPU, a device-side
            assertion on a GPU: one pass over them and a few kernel launches); False where the caller builds them in
            range (a sigmoid, minus a softplus).

    Returns:
        (B, H, N, M) in the dtype of v (under autocast: the autocast dtype); with ``return_state`` the pair
        (out, final state (B, H, C, M) in the accumulation dtype).
    """
    if cu_seqlens is not None:
        return _packed_delta_rule(q, k, v, beta, log_decay, scale, initial_state, return_state, cu_seqlens,
                                  check_ranges)
    q, k, v = autocast_inputs(q, k, v)
    check_delta_rule_inputs(q, k, v, beta, log_decay, initial_state, check_ranges)
    factor = resolve_scale(OWNER, scale, q.shape[-1])
    acc = accumulation_dtype(v.dtype)
    with torch.autocast(q.device.type, enabled=False):
        beta, decay = beta.to(acc), None if log_decay is None else log_decay.to(acc)
        if compiled.serves(q.device) and compiled.takes(q, v):
            out, state = compiled.delta_rule(q, k, v, beta, decay, factor, initial_state)
        else:
            out, state = delta_rule_chunked(q.to(acc), k.to(acc), v.to(acc), beta, decay, factor, initial_state)
    return (out.to(v.dtype), state) if return_state else out.to(v.dtype)


def _packed_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor | None, scale: float | None,
    initial_state: Tensor | None, return_state: bool, cu_seqlens: Tensor, check_ranges: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """``delta_rule`` of each document of a packed row (``lintf.ops.common.documents``)."""
    q, k, v = autocast_inputs(q, k, v)
    check_delta_rule_inputs(q, k, v, beta, log_decay, None, check_ranges)
    factor = resolve_scale(OWNER, scale, q.shape[-1])

    def run(tensors: dict[str, Tensor | None], state: Tensor | None) -> tuple[Tensor, Tensor]:
        return delta_rule(tensors["q"], tensors["k"], tensors["v"], tensors["beta"], log_decay=tensors["log_decay"],
                          scale=factor, initial_state=state, return_state=True, check_ranges=False)

    def zero_state(count: int) -> Tensor:
        return v.new_zeros(count, q.shape[1], q.shape[3], v.shape[3], dtype=accumulation_dtype(v.dtype))

    per_position = dict(q=q, k=k, v=v, beta=beta, log_decay=log_decay)
    return packed_call(OWNER, run, per_position, cu_seqlens, initial_state, return_state, zero_state)
