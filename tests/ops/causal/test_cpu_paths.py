"""The compiled CPU op's vector paths (AVX-512, AVX2, portable) and its thread scheduling.

Each path this CPU runs is forced through LINTF_CPU_PATH and checked against the naive reference
(values, the final state and every gradient, fp64 and fp32); thread counts that split heads into
segments must give the one-thread numbers; the library's baseline code must not use wider
instructions than the build machine's defaults, so one build runs on any x86-64.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lintf.ops import (LinearAttentionState, causal_dot_product, causal_linear_attention, cpu_vector_path,
                       cpu_vector_paths)
from lintf.ops.causal.chunked import causal_linear_attention_pytorch
from lintf.ops.causal.reference import (causal_dot_product_reference, causal_linear_attention_reference,
                                        final_state_reference)
from lintf.ops.extension import build, load_library

pytestmark = pytest.mark.usefixtures("compiled_op")

ALL_PATHS = ["avx512", "avx2", "portable"]
OPS = {
    "normalised": (causal_linear_attention, causal_linear_attention_reference),
    "numerator": (causal_dot_product, causal_dot_product_reference),
}


def supported() -> list[str]:
    return cpu_vector_paths() if load_library() else []


def inputs(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """q, k (positive), v, and an initial state (S0, z0) in the accumulation dtype, all requiring grad."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    generator = torch.Generator().manual_seed(b * 1000 + n)
    tensors = [torch.rand(b, h, n, c, dtype=dtype, generator=generator),
               torch.rand(b, h, n, c, dtype=dtype, generator=generator),
               torch.randn(b, h, n, m, dtype=dtype, generator=generator),
               torch.randn(b, h, c, m, dtype=acc, generator=generator),
               n * torch.rand(b, h, c, dtype=acc, generator=generator)]
    return [t.requires_grad_() for t in tensors]


def outputs_and_grads(op: str, tensors: list[torch.Tensor], reference: bool = False) -> list[torch.Tensor]:
    """Output, final state and the gradients of all five inputs for a fixed random upstream gradient."""
    fast, naive = OPS[op]
    q, k, v, kv, z = tensors
    state = LinearAttentionState(kv, z)
    if reference:
        outs = [naive(q, k, v, initial_state=state), *final_state_reference(k, v, state)]
    else:
        out, final = fast(q, k, v, initial_state=state, return_state=True)
        outs = [out, *final]
    generator = torch.Generator().manual_seed(1)
    upstream = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) for o in outs]
    return [o.detach() for o in outs] + list(torch.autograd.grad(outs, tensors, upstream))


@pytest.fixture(params=ALL_PATHS)
def forced_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force one vector path for the test (the op reads LINTF_CPU_PATH on every call)."""
    if request.param not in supported():
        pytest.skip(f"this CPU does not run the {request.param} path (it runs {supported()})")
    monkeypatch.setenv("LINTF_CPU_PATH", request.param)
    return request.param


SHAPES = [  # (B, H, N, C, M)
    (2, 3, 37, 8, 5),  # N not a multiple of the chunk, C != M, padding on every path
    (1, 2, 200, 64, 64),  # full register blocks: rows used in place, no packing
    (1, 1, 70, 33, 17),  # widths one past a register block
    (1, 2, 45, 20, 80),  # values wider than one state tile: wide and narrow tiles side by side
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.usefixtures("backward_mode")
def test_each_path_matches_the_reference(forced_path, op, shape, dtype):
    assert cpu_vector_path() == forced_path
    tensors = inputs(*shape, dtype=dtype)
    got, want = outputs_and_grads(op, tensors), outputs_and_grads(op, tensors, reference=True)
    for name, a, b in zip(["out", "kv", "z", "dq", "dk", "dv", "dkv0", "dz0"], got, want):
        # fp32: rounding of sums of many terms, relative to the largest entry
        tol = {} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5 * b.abs().max().item()}
        torch.testing.assert_close(a, b, **tol, msg=lambda text, name=name: f"{forced_path} {name}: {text}")


@pytest.mark.parametrize("shape, dtype", [
    ((1, 1, 16384, 64, 64), torch.float32),  # 4 MiB gradients: streamed past the caches
    ((1, 1, 8192, 64, 64), torch.float64),
    ((1, 1, 32768, 40, 40), torch.float32),  # rows of 40: streamed where 40 is whole vectors, else stored
], ids=str)
def test_outputs_larger_than_the_caches_match_the_pytorch_path(forced_path, shape, dtype):
    b, h, n, c, m = shape
    generator = torch.Generator().manual_seed(n)
    q, k = (torch.rand(b, h, n, c, dtype=dtype, generator=generator).requires_grad_() for _ in range(2))
    v = torch.randn(b, h, n, m, dtype=dtype, generator=generator).requires_grad_()
    upstream = torch.randn(b, h, n, m, dtype=dtype, generator=generator)
    out = causal_linear_attention(q, k, v)
    got = [out.detach(), *torch.autograd.grad(out, (q, k, v), upstream)]
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = causal_linear_attention_pytorch(*wide)
    want = [out.detach(), *torch.autograd.grad(out, wide, upstream.double())]
    for name, a, w in zip(["out", "dq", "dk", "dv"], got, want):
        tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-4 * w.abs().max().item()}
        torch.testing.assert_close(a.double(), w, **tol, msg=lambda text, name=name: f"{forced_path} {name}: {text}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.usefixtures("backward_mode")
def test_each_path_runs_half_inputs_in_fp32(forced_path, dtype):
    low = [t.detach().to(dtype).requires_grad_() if i < 3 else t for i, t in enumerate(inputs(1, 2, 90, 8, 6, torch.float32))]
    got = outputs_and_grads("normalised", low)
    wide = [t.detach().double().requires_grad_() for t in low]
    want = outputs_and_grads("normalised", wide, reference=True)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=2e-2)


def test_paths_agree_to_fp32_rounding():
    """The same fp32 call on every path: only the order of additions differs."""
    tensors = inputs(1, 2, 500, 24, 40, torch.float32)
    results = {}
    for path in supported():
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("LINTF_CPU_PATH", path)
            results[path] = outputs_and_grads("normalised", tensors)
    first, *others = results
    for path in others:
        for a, b in zip(results[first], results[path]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_an_unknown_path_is_refused(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_PATH", "sse9")
    q = torch.rand(1, 1, 4, 2)
    with pytest.raises(ValueError, match="LINTF_CPU_PATH=sse9 is not a vector path; choose one of avx512, avx2, portable"):
        causal_dot_product(q, q, q)


@pytest.mark.parametrize("path", ALL_PATHS)
def test_a_path_this_cpu_lacks_is_refused_naming_what_it_runs(path, monkeypatch):
    if path in supported():
        pytest.skip(f"this CPU runs the {path} path")
    monkeypatch.setenv("LINTF_CPU_PATH", path)
    q = torch.rand(1, 1, 4, 2)
    with pytest.raises(ValueError, match=f"LINTF_CPU_PATH={path} asks for a vector path this CPU .* runs: {supported()[0]}"):
        causal_dot_product(q, q, q)
    with pytest.raises(ValueError, match=f"LINTF_CPU_PATH={path}"):
        cpu_vector_path()


def test_the_widest_path_runs_by_default(monkeypatch):
    monkeypatch.delenv("LINTF_CPU_PATH", raising=False)
    assert supported()[-1] == "portable"
    assert cpu_vector_path() == supported()[0]


THREAD_CASES = [  # (B, H, N, threads): fewer heads than threads splits each head into segments
    (1, 8, 600, 2),  # heads >= threads: one segment per head
    (1, 1, 4000, 2),  # one head over two threads
    (1, 3, 2000, 4),  # heads do not divide the threads
    (2, 1, 3000, 8),  # more threads than heads and segments: the state pass is split further
]


@pytest.mark.parametrize("b, h, n, threads", THREAD_CASES, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.usefixtures("backward_mode")
def test_thread_counts_give_the_one_thread_result(b, h, n, threads, op):
    tensors = inputs(b, h, n, 16, 8, torch.float64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = outputs_and_grads(op, tensors)
        torch.set_num_threads(threads)
        several = outputs_and_grads(op, tensors)
        again = outputs_and_grads(op, tensors)
    finally:
        torch.set_num_threads(before)
    for a, b_, c in zip(single, several, again):
        torch.testing.assert_close(b_, a, rtol=1e-12, atol=1e-10)
        assert torch.equal(b_, c), "the same thread count must give the same bits"
    for a, b_ in zip(several, outputs_and_grads(op, tensors, reference=True)):
        torch.testing.assert_close(a, b_)


def test_fp32_thread_counts_agree_to_rounding():
    tensors = inputs(1, 2, 3000, 32, 32, torch.float32)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = outputs_and_grads("normalised", tensors)
        torch.set_num_threads(2)
        double = outputs_and_grads("normalised", tensors)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(single, double):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def loaded_build_dir() -> Path:
    library = next(Path(p) for p in torch.ops.loaded_libraries if Path(p).name.startswith(build.NAME))
    return library.parent


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the wide paths are x86-64 only")
def test_only_the_vector_path_objects_use_wide_registers():
    """Baseline objects hold no AVX/AVX-512 instruction; each wide object exports nothing but its table,
    so no inline function compiled for a wider ISA can stand in for a baseline one at link time."""
    if shutil.which("objdump") is None or shutil.which("nm") is None:
        pytest.skip("binutils (objdump, nm) not installed")
    build = loaded_build_dir()
    if not (build / "cpu_path.o").is_file():
        pytest.skip(f"no object files beside the loaded library in {build}")

    def disassembly(name: str) -> str:
        return subprocess.run(["objdump", "-d", str(build / name)], capture_output=True, text=True, check=True).stdout

    objects = sorted(p.name for p in build.glob("*.o"))  # every op's: <op>_avx2.o and <op>_avx512.o are its wide paths
    wide = {name: "%zmm" if name.endswith("_avx512.o") else "%ymm" for name in objects
            if name.endswith(("_avx2.o", "_avx512.o"))}
    assert {"causal_product_avx2.o", "causal_product_avx512.o", "decayed_product_avx2.o"} <= set(wide), objects
    for name in (name for name in objects if name not in wide):
        assert "%ymm" not in disassembly(name) and "%zmm" not in disassembly(name), name
    for name, register in wide.items():
        assert register in disassembly(name), name
        symbols = subprocess.run(["nm", "--defined-only", "-C", str(build / name)], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
        # DW.ref.__gxx_personality_v0: a data pointer to the C++ unwinder that every object with cleanups
        # may carry; it holds no code of the wide ISA
        exported = [line for line in symbols if line.split()[1] in "TWVui" and "(anonymous namespace)" not in line
                    and not line.split()[-1].startswith("DW.ref.")]
        assert len(exported) == 1 and "_path()" in exported[0], (name, exported)


def test_builds_carry_no_march_unless_asked(monkeypatch):
    monkeypatch.delenv("LINTF_CPU_ARCH", raising=False)
    assert not any(flag.startswith("-march") for flag in build.cflags())
    monkeypatch.setenv("LINTF_CPU_ARCH", "x86-64-v3")
    assert "-march=x86-64-v3" in build.cflags()


def test_without_the_compiled_op_no_path_is_reported():
    code = "from lintf.ops import cpu_vector_path, cpu_vector_paths\nprint(cpu_vector_path(), cpu_vector_paths())\n"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LINTF_EXTENSION": "off"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "[]"]
