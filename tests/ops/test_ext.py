"""Building and loading the compiled op: locks, ahead-of-time manifests, missing compilers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from lintf.ops import _ext


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (the loader caches its decision per process)."""
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
        timeout=600,
    )


def test_stale_torch_lock_is_named_in_the_error(tmp_path):
    (tmp_path / "lock").touch()
    with pytest.raises(_ext.BuildLockError, match=re.escape(f"stale JIT build lock {tmp_path / 'lock'}")):
        with _ext.build_lock(tmp_path):
            pass


def test_a_busy_build_lock_times_out_naming_the_lock(tmp_path):
    with _ext.build_lock(tmp_path):
        with pytest.raises(_ext.BuildLockError, match=re.escape(str(tmp_path / "lintf_build.lock"))):
            with _ext.build_lock(tmp_path, timeout_s=0.3):
                pass
    with _ext.build_lock(tmp_path, timeout_s=0.3):  # released again
        pass


def test_prebuilt_for_another_torch_is_ignored_with_a_warning(tmp_path):
    manifest = {"torch": "0.0.1", "cuda": None, "library": f"{_ext.NAME}.so", "key": "x"}
    (tmp_path / _ext.MANIFEST).write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=re.escape(f"built for torch 0.0.1, this is torch {torch.__version__}")):
        assert _ext.prebuilt_library(tmp_path) is None


def test_prebuilt_for_this_torch_is_used(tmp_path):
    manifest = {"torch": torch.__version__, "cuda": None, "library": f"{_ext.NAME}.so", "key": "x"}
    (tmp_path / _ext.MANIFEST).write_text(json.dumps(manifest))
    assert _ext.prebuilt_library(tmp_path) == tmp_path / f"{_ext.NAME}.so"
    assert _ext.prebuilt_library(tmp_path / "missing") is None


def test_without_a_compiler_one_warning_and_the_pytorch_path(tmp_path):
    code = (
        "import warnings, torch\n"
        "from lintf.ops import causal_linear_attention, compiled_op_available\n"
        "from lintf.ops.reference import causal_linear_attention_reference as ref\n"
        "q = torch.rand(1, 2, 20, 3)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3):\n"
        "        torch.testing.assert_close(causal_linear_attention(q, q, q), ref(q, q, q))\n"
        "assert not compiled_op_available('cpu')\n"
        "print(len(caught), caught[0].message)\n"
    )
    result = run_python(code, CXX="no-such-compiler-xyz", TORCH_EXTENSIONS_DIR=str(tmp_path),
                        LINTF_EXTENSION_DIR=str(tmp_path / "none"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("1 lintf: no C++ compiler found (looked for 'no-such-compiler-xyz'")
    assert "pure-PyTorch path" in result.stdout


@pytest.mark.slow
def test_ahead_of_time_build_is_loaded(tmp_path):
    build = subprocess.run([sys.executable, "-m", "lintf.ops.build", "--output", str(tmp_path), "--no-cuda"],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr[-3000:]
    assert json.loads((tmp_path / _ext.MANIFEST).read_text())["torch"] == torch.__version__
    code = (
        "import torch\n"
        "from lintf.ops import causal_dot_product, compiled_op_available\n"
        "assert compiled_op_available('cpu')\n"
        "q = torch.rand(1, 1, 10, 2)\n"
        "causal_dot_product(q, q, q)\n"
        "print([p for p in torch.ops.loaded_libraries])\n"
    )
    result = run_python(code, LINTF_EXTENSION_DIR=str(tmp_path), CXX="no-such-compiler-xyz")
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / f"{_ext.NAME}.so") in result.stdout
