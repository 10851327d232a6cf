"""The delta rule's CUDA launches for the performance model (benchmarks/gpu_model.py).

``csrc/delta/cuda/chunk_launch.cuh`` runs the forward as three kernels (``chunk.cuh``: each chunk's UT
transform and the sweep's operands, one block per (head, chunk); the sweep, one block per (head, value tile)
walking the chunks in order, ``sweeps.cuh``; the outputs, one block per (head, chunk, value tile)), and the
backward as the same chunk kernel (writing the chunks' terms too), batched fp32 ATen kernels (``aten.h``: the
backward sweep's operands, the outputs' and gradients' terms) around both sweeps, and one kernel for the
per-row terms d beta and d log_decay (``row_terms.cuh``). This module lists those launches in the order the launch code makes them, with
the bytes each reads and writes: an ATen kernel reads its operands and writes its result once (an in-place
one reads and writes its tensor), a block reads the whole-width key operands and its value columns of its
chunks. The ATen products run fp32 on CUDA cores (torch's default, no TF32), the kernels' products as 3xTF32
(three TF32 products each). The list is checked against the CUDA emulation's launches and ATen kernels
(tests/benchmarks/test_gpu_model.py).
"""

from __future__ import annotations

from benchmarks.gpu_launches import CHUNK, F32, Launch, Shape


class _Call:
    """The launches of one call on shape ``s``, with or without log_decay; sizes in elements unless named bytes."""

    def __init__(self, s: Shape, decay: bool) -> None:
        self.s, self.decay, self.padded = s, decay, s.n % CHUNK != 0
        self.launches: list[Launch] = []
        per_chunk = s.heads * s.chunks
        self.whole = per_chunk  # exp(B_c)
        self.row = per_chunk * CHUNK  # one value per position of whole chunks
        self.mat = self.row * CHUNK  # one CHUNK x CHUNK matrix per chunk
        self.key, self.value = self.row * s.c, self.row * s.m  # chunked fp32 (heads, chunks, CHUNK, c or m)
        self.state = per_chunk * s.c * s.m  # S_c or dS_c per chunk

    def aten(self, name: str, written: int, *read: int, flops: int = 0) -> None:
        """An fp32 ATen kernel writing ``written`` and reading ``read`` elements."""
        self.launches.append(Launch(f"aten.{name}", 0, F32 * sum(read), F32 * written, flops, "fp32"))

    def product(self, rows: int, inner: int, cols: int, written: int, *read: int, name: str = "bmm") -> None:
        """A batched (rows x inner) (inner x cols) product per chunk."""
        self.aten(name, written, *read, flops=2 * self.whole * rows * inner * cols)

    def chunked(self, features: int, size: int) -> None:
        """aten.h's chunked(): an input of ``size``-byte elements to fp32 chunks."""
        given, whole = self.s.heads * self.s.n * features, self.row * features
        if self.padded:
            self.launches.append(Launch("aten.copy_", 0, size * given, F32 * given))
            self.aten("zero_", whole - given)
        elif size != F32:
            self.launches.append(Launch("aten._to_copy", 0, size * given, F32 * whole))

    def unchunked(self, features: int, size: int) -> None:
        """aten.h's unchunked(): fp32 chunks back to (B, H, N, features) in ``size``-byte elements."""
        given = self.s.heads * self.s.n * features
        if size != F32 or self.padded:
            self.launches.append(Launch("aten._to_copy" if size != F32 else "aten.clone", 0, F32 * given, size * given))

    def weighted(self, elements: int) -> None:
        """weighted(): a row factor e or f times a tensor, only with decay."""
        if self.decay:
            self.aten("mul", elements, self.row, elements)

    def prepare(self, for_backward: bool) -> None:
        """delta_prepare_kernel: k, v, beta, log_decay in; U0, W, F, b, exp(B) out, and for the backward e, f, D,
        h, a, T, diag(e) K and diag(beta e) K (e, f, D and diag(e) K only with decay)."""
        s = self.s
        read = s.heads * s.n * (s.c + s.m) * s.size + (2 if self.decay else 1) * F32 * s.heads * s.n
        written = self.value + 2 * self.key + self.row + self.whole
        if for_backward:
            written += 3 * self.mat + self.key + ((2 * self.row + self.mat + self.key) if self.decay else 0)
        products = 2 * self.whole * CHUNK * CHUNK * (2 * s.c + s.m)  # K K^T, W, U0
        self.launches.append(Launch("delta_prepare", self.whole, read, F32 * written,
                                    3 * products + 2 * self.whole * CHUNK**3 // 3, "tf32"))

    def sweep(self, name: str, values: int, keys: int, products: int) -> None:
        """A sweep reading ``values`` fp32 elements, ``keys`` whole key operands per value tile, writing S_c, rows,
        S_N; ``products`` CHUNK x c x m products per chunk, each three TF32 ones."""
        s = self.s
        read = F32 * (values + keys * self.key * s.value_tiles + self.whole)
        written = F32 * (self.state + self.value + s.heads * s.c * s.m)
        flops = 3 * products * 2 * self.row * s.c * s.m
        self.launches.append(Launch(name, s.heads * s.value_tiles, read, written, flops, "tf32"))


def _forward(s: Shape, decay: bool) -> list[Launch]:
    """delta_prepare_kernel, the forward sweep, delta_output_kernel."""
    call = _Call(s, decay)
    call.prepare(False)
    call.sweep("delta_forward_sweep", call.value, 2, 2)
    tiles = s.value_tiles
    read = 2 * s.heads * s.n * s.c * s.size * tiles + F32 * (call.row * tiles + call.state + call.value)
    products = 2 * call.whole * CHUNK * (CHUNK * s.c * tiles + s.c * s.m + CHUNK * s.m)  # Q K^T, Q S_c, P U_c
    call.launches.append(Launch("delta_output", call.whole * tiles, read, s.heads * s.n * s.m * s.size,
                                3 * products, "tf32"))
    return call.launches


def _gradients(call: _Call) -> None:
    """aten.h's gradients() (dq, dk, dv and the row terms' operands), then the row terms' kernel."""
    s, mat, row, key, value, state = call.s, call.mat, call.row, call.key, call.value, call.state
    call.product(CHUNK, s.m, CHUNK, mat, value, value)  # dP = dO U^T
    call.aten("mul", mat, mat, mat) if call.decay else call.aten("tril", mat, mat)  # dP o D
    call.product(CHUNK, s.m, s.c, key, value, state)  # dO S^T
    call.product(CHUNK, s.m, s.c, key, value, state)  # U dS^T
    call.product(CHUNK, s.m, CHUNK, mat, value, value)  # na = (dR U^T) strictly lower
    call.aten("tril_", mat, mat)
    call.aten("mul", value, row, value)  # dv = diag(beta) dR
    call.product(CHUNK, s.m, s.c, key, value, state)  # dX S^T
    call.aten("mul", mat, mat, row)  # -dH = na diag(beta) (o D)
    if call.decay:
        call.aten("mul", mat, mat, mat)
    call.weighted(key)  # dq
    call.product(CHUNK, CHUNK, s.c, key, key, mat, key, name="baddbmm")
    call.weighted(key)  # dk
    call.weighted(key)
    call.aten("sub", key, key, key)
    call.product(CHUNK, CHUNK, s.c, key, key, mat, key, name="baddbmm")
    call.aten("add", mat, mat, mat)
    call.product(CHUNK, CHUNK, s.c, key, key, mat, key, name="baddbmm")
    call.product(CHUNK, s.c, s.m, value, value, key, state, name="baddbmm")  # X = V - diag(e) K S_c
    call.unchunked(s.c, s.size)
    call.unchunked(s.c, s.size)
    call.unchunked(s.m, s.size)
    _row_terms(call)


def _row_terms(call: _Call) -> None:
    """delta_row_terms_kernel (d beta; with decay d log_decay), one block per (head, chunk), then both to (B, H, N)."""
    read = 2 * call.mat + 2 * call.value  # na, h; dR, X
    if call.decay:
        read += 3 * call.mat + 6 * call.key + 2 * call.state + call.whole  # dP, P, a; six key terms; S_c, dS_c; exp(B)
    written = (2 if call.decay else 1) * call.row
    call.launches.append(Launch("delta_row_terms", call.whole, F32 * read, F32 * written, read, "fp32"))
    call.unchunked(1, F32)
    if call.decay:
        call.unchunked(1, F32)


def _backward(s: Shape, decay: bool) -> list[Launch]:
    call = _Call(s, decay)
    call.prepare(True)
    for features, size in ((s.c, s.size), (s.c, s.size), (s.m, s.size), (1, F32)):  # q, k, v, beta in chunks
        call.chunked(features, size)
    call.sweep("delta_forward_sweep", call.value, 2, 2)
    # delta_backward_operands_kernel: q, k, grad_out, b, T, F in; P, Qe, dO, R0, Rt out
    read = s.heads * s.n * (2 * s.c + s.m) * s.size + F32 * (call.row + call.mat + call.key)
    written = F32 * (call.mat + 2 * call.key + 2 * call.value)
    products = 2 * call.whole * CHUNK * CHUNK * (s.c + s.c + 2 * s.m)  # Q K^T, T^T F, P^T dO, T^T (P^T dO)
    call.launches.append(Launch("delta_backward_operands", call.whole, read, written, 3 * products, "tf32"))
    call.sweep("delta_backward_sweep", 2 * call.value, 3, 3)
    _gradients(call)
    return call.launches


def delta_forward(s: Shape) -> list[Launch]:
    """lintf::delta_rule's forward without log_decay (DeltaNet)."""
    return _forward(s, False)


def delta_backward(s: Shape) -> list[Launch]:
    return _backward(s, False)


def gated_delta_forward(s: Shape) -> list[Launch]:
    """lintf::delta_rule's forward with one log-decay per position (Gated DeltaNet)."""
    return _forward(s, True)


def gated_delta_backward(s: Shape) -> list[Launch]:
    return _backward(s, True)
