#!/usr/bin/env bash
# A built wheel, installed (not editable) into a fresh virtual environment, builds and uses the compiled
# ops: the kernel sources (the csrc/ tree, folders kept) travel inside the package.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
work="$(mktemp -d)"
python -m pip wheel --quiet --disable-pip-version-check --no-deps . -w "$work/dist"
python -m venv --system-site-packages "$work/venv"  # torch and the other dependencies come from the machine
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$work"/dist/lintf-*.whl
cd "$work"
LINTF_REPO="$repo" TORCH_EXTENSIONS_DIR="$work/extensions" LINTF_EXTENSION_DIR= "$work/venv/bin/python" - <<'PY'
import os
import sys
from pathlib import Path

import torch

import lintf
import lintf.ops
from lintf.ops.causal.reference import causal_linear_attention_reference
from lintf.ops.decayed import compiled as decayed_compiled


def kernel_sources(root: Path) -> set[str]:
    """The C++/CUDA files under root, as paths relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.suffix in {".h", ".cpp", ".cu", ".cuh"}}


installed = Path(lintf.__file__).resolve()
assert installed.is_relative_to(Path(sys.prefix).resolve()), f"imported {installed}, not the installed wheel"
missing = kernel_sources(Path(os.environ["LINTF_REPO"]) / "csrc") - kernel_sources(installed.parent / "ops" / "csrc")
assert not missing, f"the wheel lacks kernel sources: {sorted(missing)}"
assert lintf.ops.compiled_op_available("cpu"), "the installed copy fell back to the PyTorch path"
assert decayed_compiled.serves(torch.device("cpu")), "the installed copy lacks the compiled decayed product"
q, k = torch.rand(2, 3, 40, 8, dtype=torch.float64), torch.rand(2, 3, 40, 8, dtype=torch.float64)
v = torch.randn(2, 3, 40, 5, dtype=torch.float64)
torch.testing.assert_close(lintf.ops.causal_linear_attention(q, k, v), causal_linear_attention_reference(q, k, v))
print(f"wheel check: {installed.parent} builds and uses the compiled ops")
PY
