"""A quiet first run: importing lintf and running its ops brings in torch's build machinery only to build.

``torch.utils.cpp_extension`` logs "No CUDA runtime is found" when imported from a CUDA wheel on a
machine without a GPU; lintf imports it only when the op must be compiled, and drops that line anyway.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lintf.ops.extension import load_library
from lintf.ops.extension.environment import extension_disabled

USE_THE_OP = """
import sys, torch, lintf
from lintf.ops import causal_linear_attention
q = torch.rand(1, 2, 8, 4)
causal_linear_attention(q, q, q)
from lintf.ops.extension import load_library
assert load_library(), "the compiled op did not load"
print(sorted(name for name in sys.modules if name.startswith("torch.utils.cpp_extension")))
"""


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env={**os.environ, "LINTF_EXTENSION": ""},
                          capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(extension_disabled(), reason="LINTF_EXTENSION turns the compiled op off")
def test_running_a_built_op_imports_no_build_tool_and_prints_nothing():
    assert load_library()  # built (or loaded) here once, so the process below finds it built
    result = python(USE_THE_OP)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", "torch.utils.cpp_extension was imported without a build"
    assert result.stderr == ""


def test_the_missing_cuda_runtime_line_of_a_cuda_wheel_never_reaches_the_user():
    # What torch.utils.cpp_extension logs at import on a CUDA wheel without a GPU, whoever imports it.
    result = python("import logging, lintf\nlogging.getLogger('torch.utils.cpp_extension').warning("
                    "\"No CUDA runtime is found, using CUDA_HOME='%s'\", '/usr/local')\n"
                    "logging.getLogger('torch.utils.cpp_extension').warning('a real problem')")
    assert result.returncode == 0, result.stderr
    assert "No CUDA runtime" not in result.stderr
    assert "a real problem" in result.stderr, "other warnings of torch's build tools must still show"
