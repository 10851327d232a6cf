"""``python -m lintf.ops.common [--features C] [--values M] [--dtype float32]``: the compiled CPU ops' tuning here.

Prints the CPU, its caches and vector path and each kernel's cache-dependent choices with the reason for each
(``lintf.ops.common.tuning.cpu_tuning``).
"""

from __future__ import annotations

import argparse

import torch

from lintf.ops.common.tuning import cpu_tuning, tuning_lines


def main() -> None:
    parser = argparse.ArgumentParser(description="Print the compiled CPU ops' tuning on this CPU.")
    parser.add_argument("--features", type=int, default=64, help="C, the width of q and k")
    parser.add_argument("--values", type=int, default=64, help="M, the width of v")
    parser.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "float16"), default="float32")
    args = parser.parse_args()
    report = cpu_tuning(args.features, args.values, getattr(torch, args.dtype))
    print("the compiled ops are not available" if report is None else "\n".join(tuning_lines(report)))


if __name__ == "__main__":
    main()
