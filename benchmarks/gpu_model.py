"""A performance model of lintf's chunked CUDA kernels that runs without a GPU: traffic, FLOPs, launches, floors.

    python -m benchmarks.gpu_model [--heads 128] [--lengths 1024 4096 16384] [--dims 64 128] [--measure cuda]
        [--out DIR]

For every launch a forward or backward call of an op makes (the chunked kernels of
``csrc/<op>/cuda/chunk_launch.cuh`` with the grid ``csrc/common/cuda/chunk_plan.cuh`` plans, and the ATen
kernels that launch code runs between them), the bytes it reads and writes in global memory and its
FLOPs. Each block is taken to read the tiles its arguments name once (no reuse through L2 counted), so a
tensor that every value-tile block of a (head, chunk) reads is read once per value tile; the FLOPs count
the tensor-core products of whole 64 x 64 chunk tiles, the masked half included. The launches (kernels,
grid sizes, ATen kernels) are checked against the CUDA emulation, which runs the same launch code on the CPU
(tests/benchmarks/test_gpu_model.py). The floor of a call is max(bytes / bandwidth, FLOPs / tensor-core
rate) over its launches, with each GPU's rates (RATES; fp32 and TF32 products at theirs). Ops: the
normalised causal product (``lintf::causal_product``, as linear attention calls it), the decayed product
(``lintf::decayed_product``), gated linear attention (``lintf::gated_linear_attention``) and the delta rule
(``lintf::delta_rule``) without decay (delta) and with it (gated_delta; launches in
benchmarks/gpu_model_delta.py), bf16, no initial state. With --measure cuda each row also gets the op's
measured fwd+bwd (as a user calls it) and its ratio to the floor of the GPU it ran on. Writes gpu_model.md to
--out (benchmarks/results).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.gpu_launches import CHUNK, F32, Launch, Shape
from benchmarks.gpu_model_delta import delta_backward, delta_forward, gated_delta_backward, gated_delta_forward

RESULTS = Path(__file__).parent / "results"
THREADS = 256  # threads of a scan block
ROW_TERMS_ROWS = 8  # rows per block of row_terms_kernel and leaving_products_kernel: one warp each

# measured on the machines these kernels ran on: a device-to-device copy through PyTorch (bytes read and
# written) and an 8192^3 bf16 matrix product on random data (mean of ten after three warm-ups) as "tensor";
# "tf32" is half that, as the data sheets rate TF32 against BF16, and "fp32" (CUDA cores, for fp32 ATen products
# without TF32) is the data sheets' 67 TFLOP/s: neither was measured
RATES = {
    "H100 80GB HBM3": {"bandwidth": 3.0e12, "tensor": 798e12, "tf32": 399e12, "fp32": 67e12},
    "H200": {"bandwidth": 4.3e12, "tensor": 788e12, "tf32": 394e12, "fp32": 67e12},
}


def _sizes(s: Shape) -> dict[str, int]:
    """Bytes of the tensors the launch code moves (states fp32, one per chunk and head)."""
    return {
        "qk": s.heads * s.n * s.c * s.size,  # q, k, dq, dk
        "v": s.heads * s.n * s.m * s.size,  # v, out, grad_out, dv
        "states": s.heads * s.chunks * s.c * s.m * F32,
        "norms": s.heads * s.chunks * s.c * F32,
        "state": s.heads * s.c * s.m * F32,
        "norm": s.heads * s.c * F32,
        "rows": s.heads * s.n * F32,  # per position fp32: denominators, log-decays, their gradients
        "rows_padded": s.heads * s.chunks * CHUNK * F32,
    }


def _scan(s: Shape, name: str, width: int, states: int, start: int, total: int) -> Launch:
    """A scan of (heads, chunks, width) fp32 states in place (of two: widths summed), one thread per (head, column)."""
    return Launch(name, math.ceil(s.heads * width / THREADS), states + start, states + total,
                  s.heads * s.chunks * width)


def _intra_flops(s: Shape, products: int) -> int:
    """FLOPs of ``products`` 64 x 64 x C-or-M tensor-core products per (head, chunk) (c for q k^T, m for P v)."""
    return 2 * s.heads * s.chunks * CHUNK * CHUNK * products


def causal_forward(s: Shape) -> list[Launch]:
    """chunk_state_kernel, the kv and z scans (one launch), chunk_output_kernel (normalised)."""
    b, blocks = _sizes(s), s.heads * s.chunks * s.value_tiles
    return [
        Launch("chunk_state", blocks, b["qk"] * s.value_tiles + b["v"], b["states"] + b["norms"],
               2 * s.heads * s.n * s.c * s.m),
        _scan(s, "state_scan kv z", s.c * s.m + s.c, b["states"] + b["norms"], 0, b["state"] + b["norm"]),
        Launch("chunk_output", blocks, 2 * b["qk"] * s.value_tiles + b["v"] + b["states"] + b["norms"] * s.value_tiles,
               b["v"] + b["rows"], _intra_flops(s, s.c * s.value_tiles + s.m) + 2 * s.heads * s.n * s.c * s.m),
    ]


def causal_backward(s: Shape) -> list[Launch]:
    """row_terms_kernel (the normaliser's terms), both sweeps' states and scans, chunk_dq_kernel, chunk_dkv_kernel."""
    b, blocks = _sizes(s), s.heads * s.chunks * s.value_tiles
    per_chunk = s.heads * s.chunks
    states_flops = 2 * s.heads * s.n * s.c * s.m
    return [
        # r = 1 / denominator and -(grad . out), one warp per row
        Launch("row_terms", math.ceil(s.heads * s.n / ROW_TERMS_ROWS), b["rows"] + 2 * b["v"], 2 * b["rows"],
               2 * s.heads * s.n * s.m),
        Launch("chunk_state kv", blocks, b["qk"] * s.value_tiles + b["v"], b["states"] + b["norms"], states_flops),
        Launch("chunk_state dkv", blocks, b["qk"] * s.value_tiles + b["v"] + 2 * b["rows"], b["states"] + b["norms"],
               states_flops),
        _scan(s, "state_scan kv z", s.c * s.m + s.c, b["states"] + b["norms"], 0, 0),
        _scan(s, "state_scan dkv dz", s.c * s.m + s.c, b["states"] + b["norms"], 0, b["state"] + b["norm"]),
        Launch("chunk_dq", per_chunk, b["qk"] + 2 * b["v"] + b["states"] + b["norms"] + 2 * b["rows"], b["qk"],
               _intra_flops(s, s.m + s.c) + states_flops),
        Launch("chunk_dkv", per_chunk, 2 * b["qk"] + 2 * b["v"] + b["states"] + b["norms"] + 2 * b["rows"],
               2 * b["qk"], _intra_flops(s, 2 * s.c + 2 * s.m) + 2 * states_flops),
    ]


def _cumulative_gates(s: Shape, width: int) -> list[Launch]:
    """b_t: the log-decays (width 1) or log-gates (width C) padded to whole chunks and cumsum'd per chunk."""
    b = _sizes(s)
    return [
        Launch("aten.constant_pad_nd", 0, b["rows"] * width, b["rows_padded"] * width),
        Launch("aten.cumsum", 0, b["rows_padded"] * width, b["rows_padded"] * width),
    ]


def _gated_forward(s: Shape, op: str, width: int) -> list[Launch]:
    """The cumulative gates, <op>_state_kernel, the scan, <op>_output_kernel (decayed: width 1, GLA: width C)."""
    b, blocks = _sizes(s), s.heads * s.chunks * s.value_tiles
    gates = b["rows_padded"] * width
    return _cumulative_gates(s, width) + [
        Launch(f"{op}_state", blocks, (b["qk"] + gates) * s.value_tiles + b["v"], b["states"],
               2 * s.heads * s.n * s.c * s.m),
        _scan(s, "chunk_scan", s.c * s.m, b["states"] + gates, 0, b["state"]),
        Launch(f"{op}_output", blocks, (2 * b["qk"] + gates) * s.value_tiles + b["v"] + b["states"], b["v"],
               _intra_flops(s, s.c * s.value_tiles + s.m) + 2 * s.heads * s.n * s.c * s.m),
    ]


def _gated_backward(s: Shape, op: str, width: int) -> list[Launch]:
    """The cumulative gates, both sweeps' states and scans, the gate-gradient terms, the dq and dkv kernels."""
    b, blocks = _sizes(s), s.heads * s.chunks * s.value_tiles
    gates, per_chunk = b["rows_padded"] * width, s.heads * s.chunks
    states_flops = 2 * s.heads * s.n * s.c * s.m
    return _cumulative_gates(s, width) + [
        Launch(f"{op}_state kv", blocks, (b["qk"] + gates) * s.value_tiles + b["v"], b["states"], states_flops),
        Launch(f"{op}_state dkv", blocks, (b["qk"] + gates) * s.value_tiles + b["v"], b["states"], states_flops),
        _scan(s, "chunk_scan kv", s.c * s.m, b["states"] + gates, 0, b["state"]),
        _scan(s, "chunk_scan dkv", s.c * s.m, b["states"] + gates, 0, b["state"]),
        # sum(R_c o S_{c+1}) per decay: one warp each, S_{c+1} the state leaving chunk c
        Launch("leaving_products", math.ceil(per_chunk * width / ROW_TERMS_ROWS), 2 * b["states"],
               per_chunk * width * F32, 2 * s.heads * s.chunks * s.c * s.m),
        Launch(f"{op}_dq", per_chunk, b["qk"] + 2 * b["v"] + 2 * b["states"] + gates, b["qk"] + b["rows"] * width,
               _intra_flops(s, s.m + s.c) + states_flops),
        Launch(f"{op}_dkv", per_chunk, 2 * b["qk"] + 2 * b["v"] + 2 * b["states"] + gates,
               2 * b["qk"] + b["v"] + b["rows"] * width, _intra_flops(s, 2 * s.c + 2 * s.m) + 2 * states_flops),
    ]


def decayed_forward(s: Shape) -> list[Launch]:
    """lintf::decayed_product's forward: one log-decay per position."""
    return _gated_forward(s, "decayed", 1)


def decayed_backward(s: Shape) -> list[Launch]:
    return _gated_backward(s, "decayed", 1)


def gla_forward(s: Shape) -> list[Launch]:
    """lintf::gated_linear_attention's forward: one log-gate per position and key feature."""
    return _gated_forward(s, "gla", s.c)


def gla_backward(s: Shape) -> list[Launch]:
    return _gated_backward(s, "gla", s.c)


OPS: dict[str, tuple[Callable[[Shape], list[Launch]], Callable[[Shape], list[Launch]]]] = {
    "causal": (causal_forward, causal_backward),
    "decayed": (decayed_forward, decayed_backward),
    "gla": (gla_forward, gla_backward),
    "delta": (delta_forward, delta_backward),
    "gated_delta": (gated_delta_forward, gated_delta_backward),
}


def io_bytes(op: str, s: Shape) -> int:
    """Bytes a fwd+bwd must move at least: q, k, v, out read or written once, their gradients, the decays."""
    b = _sizes(s)
    tensors = 2 * (2 * b["qk"] + 2 * b["v"])  # q, k, v, out and dq, dk, dv, grad_out
    # the gates (beta and log_decay for the delta rules) and their gradients
    gates = {"decayed": 2 * b["rows"], "gla": 2 * b["rows"] * s.c, "delta": 2 * b["rows"],
             "gated_delta": 4 * b["rows"]}.get(op, 0)
    return tensors + gates


def summary(op: str, s: Shape) -> dict:
    """Launches, bytes, FLOPs of a fwd+bwd call and the floors they imply on each GPU."""
    launches = [launch for part in OPS[op] for launch in part(s)]
    moved = sum(launch.read + launch.written for launch in launches)
    flops = sum(launch.flops for launch in launches)
    row = {"op": op, "heads": s.heads, "n": s.n, "c": s.c, "launches": len(launches), "bytes": moved,
           "io_bytes": io_bytes(op, s), "flops": flops}
    for gpu, rate in RATES.items():
        row[gpu] = sum(max((x.read + x.written) / rate["bandwidth"], x.flops / rate[x.rate]) for x in launches)
    return row


def table(rows: list[dict], measured_on: str | None) -> list[str]:
    gpus = list(RATES)
    heads = " | ".join(f"floor {g} (ms)" for g in gpus)
    more = f" measured on {measured_on} (ms) | x floor |" if measured_on else ""
    lines = [f"| op | B*H | N | C = M | launches | GB moved | x in/out | GFLOP | {heads} |{more}",
             "|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * (len(gpus) + (2 if measured_on else 0))]
    floor_of = next((g for g in gpus if measured_on and g.split()[0] in measured_on), None)
    for r in rows:
        floors = " | ".join(f"{r[g] * 1e3:.3f}" for g in gpus)
        if measured_on:
            ratio = f"{r['measured'] / r[floor_of]:.1f}" if floor_of else "-"
            floors += f" | {r['measured'] * 1e3:.3f} | {ratio}"
        lines.append(f"| {r['op']} | {r['heads']} | {r['n']} | {r['c']} | {r['launches']} | {r['bytes'] / 1e9:.3f} | "
                     f"{r['bytes'] / r['io_bytes']:.1f} | {r['flops'] / 1e9:.1f} | {floors} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_model", description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[128], help="B*H")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128], help="C = M")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for gpu_model.md")
    parser.add_argument("--measure", choices=["cuda", "cpu"], help="also time each row's fwd+bwd on this device")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from benchmarks.gpu_model_measure import device_name, measured_seconds

    measured_on = device_name(parser, args.measure)
    for name, values in (("--heads", args.heads), ("--lengths", args.lengths), ("--dims", args.dims)):
        if any(v < 1 for v in values):
            parser.error(f"{name}: every value must be a positive int, got {values}")
    rows = [summary(op, Shape(h, n, d, d)) for op in OPS for h in args.heads for n in args.lengths for d in args.dims]
    for row in rows if measured_on else []:
        row["measured"] = measured_seconds(row["op"], Shape(row["heads"], row["n"], row["c"], row["c"]), args.measure)
    rates = "; ".join(f"{g}: {r['bandwidth'] / 1e12:.1f} TB/s, {r['tensor'] / 1e12:.0f} TFLOP/s (TF32 "
                      f"{r['tf32'] / 1e12:.0f}, fp32 {r['fp32'] / 1e12:.0f})" for g, r in RATES.items())
    lines = [
        "# Performance model of the chunked CUDA kernels (fwd+bwd, bf16, no GPU needed)", "",
        f"`python -m benchmarks.gpu_model {' '.join(sys.argv[1:] if argv is None else argv)}`".replace(" `", "`"), "",
        f"Rates (measured: device-to-device copy, 8192^3 bf16 matmul on random data; TF32 half the bf16 rate, "
        f"fp32 CUDA cores from the data sheet): {rates}.",
        "GB moved: global-memory bytes read + written by every launch; x in/out: that over the bytes of q, k, v, "
        "out and their gradients (the fwd+bwd's own inputs and outputs); floor: the sum over launches of "
        "max(bytes / bandwidth, FLOPs / tensor-core rate).", "", *table(rows, measured_on),
    ]
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_model.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
