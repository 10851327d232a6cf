"""Compiled-op faults: a build killed half-way, memory running out with the output cache full, and
environment settings that would only fail after training started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lintf.ops.extension.build import BUILD_NOTICE
from lintf.ops.extension.environment import extension_disabled
from lintf.ops.extension.manifest import MANIFEST

needs_the_op = pytest.mark.skipif(extension_disabled(), reason="LINTF_EXTENSION turns the compiled op off")
LOAD = "from lintf.ops.extension import load_library\nassert load_library(), 'the compiled op did not load'\n"


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env={**os.environ, "LINTF_EXTENSION": "", **env},
                          capture_output=True, text=True, timeout=900)


def kill_once_compiling(extensions: Path) -> None:
    """Start a build into extensions and SIGKILL it (and its compilers) once the first object file exists."""
    builder = subprocess.Popen([sys.executable, "-c", LOAD], env={**os.environ, "LINTF_EXTENSION": "",
                               "TORCH_EXTENSIONS_DIR": str(extensions)}, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    try:
        while not list(extensions.glob("lintf/*/*.o")):
            assert builder.poll() is None and time.monotonic() < deadline, "the build ended before it was killed"
            time.sleep(0.2)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait()


@needs_the_op
@pytest.mark.slow
def test_a_killed_build_is_finished_by_the_next_process_and_loaded_by_the_one_after(tmp_path):
    kill_once_compiling(tmp_path)
    build_dir = next(tmp_path.glob("lintf/*"))
    assert not (build_dir / MANIFEST).exists(), "killed before the build was recorded"
    assert (build_dir / "lock").exists(), "the killed build left torch's lock behind"
    first, second = (python(LOAD, TORCH_EXTENSIONS_DIR=str(tmp_path)) for _ in range(2))
    lines = first.stderr.strip().splitlines()
    assert first.returncode == 0 and len(lines) == 2 and lines[0].startswith(BUILD_NOTICE), first.stderr
    assert lines[1].startswith("lintf: built the compiled ops in "), first.stderr
    assert second.returncode == 0 and second.stderr == "", second.stderr


@needs_the_op
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="limits the address space with RLIMIT_AS")
def test_a_full_output_cache_is_given_back_when_memory_runs_out():
    """Under an address-space limit, the cached buffers are unmapped to make space; then OutOfMemoryError."""
    result = python("""
import resource, torch
from lintf.ops import causal_linear_attention, cpu_output_cache_stats
torch.set_num_threads(1)
small, large = torch.rand(1, 4, 32768, 64), torch.rand(1, 4, 131072, 64)  # 32 MB and 128 MB outputs
outs = [causal_linear_attention(small, small, small) for _ in range(4)]
del outs  # 128 MB of free buffers, kept under LINTF_CPU_OUTPUT_CACHE_MB=4096
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20), resource.RLIM_INFINITY))
out = causal_linear_attention(large, large, large)  # fits only once the cache is unmapped
assert cpu_output_cache_stats()["cached_bytes"] == 0 and torch.isfinite(out[:, :, -8:]).all()
try:
    causal_linear_attention(large, large, large)  # the first output is alive: no space for a second
except torch.OutOfMemoryError as error:
    print(error)
""", LINTF_CPU_OUTPUT_CACHE_MB="4096")
    assert result.returncode == 0, result.stderr
    assert "not enough memory for a 128 MB output, also after freeing the CPU output cache" in result.stdout


@pytest.mark.parametrize(("name", "value"), [("LINTF_CPU_OUTPUT_CACHE_MB", "lots"), ("LINTF_CPU_PATH", "avx3"),
                                             ("LINTF_EXTENSION", "of")])
def test_a_bad_setting_is_refused_at_start_up_without_building(tmp_path, name, value):
    result = python("import lintf.ops\nlintf.ops.check_environment()", TORCH_EXTENSIONS_DIR=str(tmp_path),
                    **{name: value})
    assert result.returncode != 0
    assert f"ValueError: {name}={value!r} is not valid" in result.stderr
    assert list(tmp_path.iterdir()) == [], "check_environment built the op"
