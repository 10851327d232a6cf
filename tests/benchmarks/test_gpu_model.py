"""The GPU performance model against the CUDA emulation (the same launch code on the CPU), and its budgets.

The emulation records every chunked-kernel launch (grid size) and a dispatch mode records the ATen
kernels the launch code runs between them: the model's launches must be exactly those, in order. The
budgets bound launches and bytes per call, so a change that adds a pass or traffic fails here first.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks import gpu_model
from benchmarks.gpu_model import Shape
from tests.ops.causal.cuda_emulation.loader import CSRC, EMULATION, cuda_headers, load_emulated

SHAPES = [(150, 17, 33), (64, 32, 80), (200, 64, 64)]  # (N, C, M): a partial chunk, two value tiles, whole tiles


class AtenKernels(TorchDispatchMode):
    """Names of the ATen ops that launch a kernel (no views, no allocations), in call order."""

    NO_KERNEL = {"empty", "empty_strided", "empty_like", "detach", "lift_fresh", "_unsafe_view"}

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.bytes = 0  # of every tensor each kernel takes or returns: at least what it reads and writes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not func.is_view and name not in self.NO_KERNEL:
            self.names.append(name)
            tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


@pytest.fixture(scope="module")
def causal_emulated():
    headers = [CSRC / "common" / "inputs.h", CSRC / "causal" / "causal_product.h",
               *cuda_headers("common/cuda", "causal/cuda")]
    return load_emulated("lintf_cuda_emulation", EMULATION / "emulated_op.cpp", headers)


@pytest.fixture(scope="module")
def decayed_emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "decayed/cuda")]
    return load_emulated("lintf_decayed_emulation", CSRC.parent / "tests/ops/decayed/cuda_emulated_op.cpp", headers)


@pytest.fixture(scope="module")
def gla_emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "gla/cuda")]
    return load_emulated("lintf_gla_emulation", CSRC.parent / "tests/ops/gla/cuda_emulated_op.cpp", headers)


@pytest.fixture(scope="module")
def delta_emulated():
    headers = [CSRC / "common" / "inputs.h", *cuda_headers("common/cuda", "delta/cuda")]
    return load_emulated("lintf_delta_emulation", CSRC.parent / "tests/ops/delta/cuda_emulated_op.cpp", headers)


def recorded(module, call) -> tuple[list[int], list[str]]:
    """The grid sizes of the chunked launches and the ATen kernels of call() on the emulated module."""
    module.take_launches()
    with AtenKernels() as aten:
        call()
    return [blocks for blocks, _, _ in module.take_launches()], aten.names


def modelled(launches: list[gpu_model.Launch]) -> tuple[list[int], list[str]]:
    return ([x.blocks for x in launches if x.blocks], [x.kernel.split()[0].removeprefix("aten.") for x in launches
                                                       if not x.blocks])


def qkv(n: int, c: int, m: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q, k = ((torch.rand(1, 2, n, c, generator=gen) + 0.1).bfloat16() for _ in range(2))
    v, grad = (torch.randn(1, 2, n, m, generator=gen).bfloat16() for _ in range(2))
    return [q, k, v, grad]


@pytest.mark.parametrize(("n", "c", "m"), SHAPES)
def test_the_causal_launches_are_the_emulated_ones(causal_emulated, n, c, m):
    q, k, v, grad = qkv(n, c, m)
    shape = Shape(2, n, c, m)
    assert causal_emulated.plan(q, v)[2:] == [shape.chunks, shape.value_tiles]
    fwd = []
    assert recorded(causal_emulated, lambda: fwd.extend(causal_emulated.forward(q, k, v, 1e-6, True, None, None))) \
        == modelled(gpu_model.causal_forward(shape))
    out, den = fwd[:2]
    backward = lambda: causal_emulated.backward(grad, q, k, v, out, den, True, None, None, None, None)  # noqa: E731
    assert recorded(causal_emulated, backward) == modelled(gpu_model.causal_backward(shape))


@pytest.mark.parametrize(("n", "c", "m"), SHAPES)
def test_the_decayed_launches_are_the_emulated_ones(decayed_emulated, n, c, m):
    q, k, v, grad = qkv(n, c, m)
    log_decay = -torch.rand(1, 2, n, generator=torch.Generator().manual_seed(1))
    shape = Shape(2, n, c, m)
    assert decayed_emulated.plan(q, v)[2:] == [shape.chunks, shape.value_tiles]
    assert recorded(decayed_emulated, lambda: decayed_emulated.forward(q, k, v, log_decay, None)) \
        == modelled(gpu_model.decayed_forward(shape))
    backward = lambda: decayed_emulated.backward(grad, q, k, v, log_decay, None, None)  # noqa: E731
    assert recorded(decayed_emulated, backward) == modelled(gpu_model.decayed_backward(shape))


@pytest.mark.parametrize(("n", "c", "m"), SHAPES)
def test_the_gla_launches_are_the_emulated_ones(gla_emulated, n, c, m):
    q, k, v, grad = qkv(n, c, m)
    log_gate = -torch.rand(1, 2, n, c, generator=torch.Generator().manual_seed(1))
    shape = Shape(2, n, c, m)
    assert gla_emulated.plan(q, v)[2:] == [shape.chunks, shape.value_tiles]
    assert recorded(gla_emulated, lambda: gla_emulated.forward(q, k, v, log_gate, c**-0.5, None)) \
        == modelled(gpu_model.gla_forward(shape))
    backward = lambda: gla_emulated.backward(grad, q, k, v, log_gate, c**-0.5, None, None)  # noqa: E731
    assert recorded(gla_emulated, backward) == modelled(gpu_model.gla_backward(shape))


# the design's budgets per fwd+bwd call at B*H = 128, C = M = 64, bf16: launches, and bytes moved over the
# bytes of the call's own inputs and outputs (per-chunk fp32 states and per-value-tile re-reads make the rest)
# (the delta rules: per-chunk kernels and batched fp32 ATen work around sequential sweeps)
BUDGETS = {"causal": (10, 6.0), "decayed": (14, 6.8), "gla": (14, 8.2), "delta": (29, 25.0), "gated_delta": (33, 30.5)}


@pytest.mark.parametrize("op", list(BUDGETS))
@pytest.mark.parametrize("n", [1024, 4096, 16384])
def test_launches_and_bytes_per_call_stay_within_the_budget(op, n):
    launches, traffic = BUDGETS[op]
    row = gpu_model.summary(op, Shape(128, n, 64, 64))
    assert row["launches"] <= launches
    assert row["bytes"] <= traffic * row["io_bytes"], f"{op} N={n}: {row['bytes'] / row['io_bytes']:.2f}x in/out"


def test_the_floor_is_the_slower_of_memory_and_tensor_cores():
    """Each launch's floor is bytes / bandwidth or FLOPs / rate, whichever is larger; the call's is their sum."""
    shape = Shape(128, 4096, 64, 64)
    row = gpu_model.summary("causal", shape)
    launches = gpu_model.causal_forward(shape) + gpu_model.causal_backward(shape)
    for gpu, rate in gpu_model.RATES.items():
        memory = sum(x.read + x.written for x in launches) / rate["bandwidth"]
        compute = sum(x.flops for x in launches) / rate["tensor"]
        assert max(memory, compute) * (1 - 1e-12) <= row[gpu] <= (memory + compute) * (1 + 1e-12)
    assert row["H200"] < row["H100 80GB HBM3"]  # memory-bound here: the faster memory wins


def test_the_table_is_written(tmp_path, capsys):
    gpu_model.main(["--lengths", "1024", "--dims", "64", "--out", str(tmp_path)])
    written = (tmp_path / "gpu_model.md").read_text()
    assert all(f"| {op} | 128 | 1024 | 64 |" in written for op in gpu_model.OPS)
    assert all(gpu in written for gpu in gpu_model.RATES)
    assert written.strip() == capsys.readouterr().out.strip()


def test_measured_rows_sit_beside_the_model(tmp_path, capsys):
    """--measure times each row's op as a user calls it (here on the CPU, where no floor applies)."""
    gpu_model.main(["--heads", "2", "--lengths", "64", "--dims", "16", "--measure", "cpu", "--out", str(tmp_path)])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| causal")]
    cells = rows[0].strip("|").split("|")
    assert "measured on cpu (ms)" in (tmp_path / "gpu_model.md").read_text()
    assert float(cells[-2]) > 0 and cells[-1].strip() == "-"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_measuring_on_a_missing_gpu_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        gpu_model.main(["--measure", "cuda", "--out", str(tmp_path)])
    assert exited.value.code == 2 and "no CUDA device is visible" in capsys.readouterr().err


def delta_inputs(n: int, c: int, m: int, decay: bool) -> list:
    q, k, v, grad = qkv(n, c, m)
    q, k = (torch.nn.functional.normalize(t.float(), dim=-1).bfloat16() for t in (q, k))
    gen = torch.Generator().manual_seed(2)
    beta, log_decay = torch.rand(1, 2, n, generator=gen), -0.1 * torch.rand(1, 2, n, generator=gen)
    return [q, k, v, beta, log_decay if decay else None, grad]


@pytest.mark.parametrize("decay", [False, True], ids=["delta", "gated_delta"])
@pytest.mark.parametrize(("n", "c", "m"), SHAPES + [(128, 32, 48)])
def test_the_delta_rule_launches_are_the_emulated_ones(delta_emulated, n, c, m, decay):
    """The sweeps' grids and every ATen kernel in order; where N fills whole chunks (no copy_ into a padded
    buffer, which the dispatch mode counts as read and written) also the ATen kernels' bytes, exactly."""
    q, k, v, beta, log_decay, grad = delta_inputs(n, c, m, decay)
    shape = Shape(2, n, c, m)
    forward, backward = gpu_model.OPS["gated_delta" if decay else "delta"]
    assert delta_emulated.plan(q, v)[2:] == [shape.chunks, shape.value_tiles]
    for call, launches in ((lambda: delta_emulated.forward(q, k, v, beta, log_decay, 0.125, None), forward(shape)),
                           (lambda: delta_emulated.backward(grad, q, k, v, beta, log_decay, 0.125, None, None),
                            backward(shape))):
        delta_emulated.take_launches()
        with AtenKernels() as aten:
            call()
        assert ([blocks for blocks, _, _ in delta_emulated.take_launches()], aten.names) == modelled(launches)
        if n % gpu_model.CHUNK == 0:
            assert aten.bytes == sum(x.read + x.written for x in launches if not x.blocks)
