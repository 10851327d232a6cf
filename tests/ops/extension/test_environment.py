"""lintf.ops.check_environment: every LINTF_* variable the ops read, refused at start-up with what is allowed."""

from __future__ import annotations

import re
import shutil

import pytest

import lintf.ops
from lintf.ops import check_environment, cpu_vector_paths
from lintf.ops.extension import build, environment, load

VARIABLES = ("LINTF_EXTENSION", "LINTF_CPU_PATH", "LINTF_CPU_OUTPUT_CACHE_MB", "LINTF_CPU_CACHE_KB", "LINTF_CPU_ARCH",
             "LINTF_CPU_BACKWARD", "LINTF_EXTENSION_DIR")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Every variable unset; unless a test asks for the compiled op, building or loading it fails the test."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if "compiled_op" in request.fixturenames:
        return

    def no_op(*args: object, **kwargs: object) -> None:
        raise AssertionError("check_environment built or loaded the compiled op")

    for module, function in ((load, "load_library"), (build, "compile_into"), (load, "compile_into"), (load, "_load")):
        monkeypatch.setattr(module, function, no_op)


def refused(name: str, value: str, allowed: str) -> str:
    return re.escape(f"{name}={value!r} is not valid: ") + allowed


def test_unset_and_empty_variables_pass(monkeypatch):
    check_environment()
    for name in VARIABLES[:-1]:  # an empty LINTF_EXTENSION_DIR is the current directory, checked below
        monkeypatch.setenv(name, "")
    check_environment()


def test_it_is_exported_from_lintf_ops():
    assert "check_environment" in lintf.ops.__all__ and lintf.ops.check_environment is environment.check_environment


@pytest.mark.parametrize("value", ["0", "off", "FALSE", "no", "1", "on", "True", "yes"])
def test_extension_switch_values_pass(monkeypatch, value):
    monkeypatch.setenv("LINTF_EXTENSION", value)
    check_environment()


@pytest.mark.parametrize("value", ["of", "disabled", "2", " off"])
def test_an_unknown_extension_switch_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINTF_EXTENSION", value)
    with pytest.raises(ValueError, match=refused("LINTF_EXTENSION", value, "use one of 0, off, false, no, 1, on")):
        check_environment()


@pytest.mark.parametrize("value", ["AVX2", "sse2", "avx-512", "neon"])
def test_an_unknown_cpu_path_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_PATH", value)
    with pytest.raises(ValueError, match=refused("LINTF_CPU_PATH", value, "use one of avx512, avx2, portable")):
        check_environment()


@pytest.mark.parametrize("path", environment.CPU_PATHS)
def test_a_cpu_path_passes_exactly_when_the_op_runs_it(monkeypatch, compiled_op, path):
    """/proc/cpuinfo against the op's own cpuid answer."""
    monkeypatch.setenv("LINTF_CPU_PATH", path)
    if path in cpu_vector_paths():
        check_environment()
    else:
        with pytest.raises(ValueError, match=refused("LINTF_CPU_PATH", path, "")):
            check_environment()


def test_a_path_this_cpu_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(environment.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(environment, "cpu_flags", lambda: {"sse2", "avx2", "fma"})
    monkeypatch.setenv("LINTF_CPU_PATH", "avx512")
    with pytest.raises(ValueError, match=refused("LINTF_CPU_PATH", "avx512", "this CPU cannot run avx512; it runs avx2, portable")):
        check_environment()


def test_an_x86_path_is_refused_on_arm(monkeypatch):
    monkeypatch.setattr(environment.platform, "machine", lambda: "aarch64")
    monkeypatch.setenv("LINTF_CPU_PATH", "avx2")
    with pytest.raises(ValueError, match=refused("LINTF_CPU_PATH", "avx2", "avx2 is an x86-64 path; on aarch64 only portable runs")):
        check_environment()
    monkeypatch.setenv("LINTF_CPU_PATH", "portable")
    check_environment()


@pytest.mark.parametrize("value", ["0", "1024", "+5", str((1 << 40) - 1)])
def test_output_cache_sizes_pass(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_OUTPUT_CACHE_MB", value)
    check_environment()


@pytest.mark.parametrize("value", ["lots", "-1", "2048MB", "1.5", str(1 << 40), "5 "])
def test_a_bad_output_cache_size_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_OUTPUT_CACHE_MB", value)
    allowed = re.escape("use a whole number of MB >= 0 and below 2^40 (0 turns the output cache off)")
    with pytest.raises(ValueError, match=refused("LINTF_CPU_OUTPUT_CACHE_MB", value, allowed)):
        check_environment()


@pytest.mark.parametrize("value", ["recompute", "stored", "auto"])
def test_backward_modes_pass(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", value)
    check_environment()


@pytest.mark.parametrize("value", ["store", "Auto", "0"])
def test_an_unknown_backward_mode_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_BACKWARD", value)
    with pytest.raises(ValueError, match=refused("LINTF_CPU_BACKWARD", value, "use one of recompute, stored, auto")):
        check_environment()


@pytest.mark.parametrize("value", ["-O0 -march=native", "native;rm", "$(x)"])
def test_a_cpu_arch_that_is_no_march_value_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINTF_CPU_ARCH", value)
    with pytest.raises(ValueError, match=refused("LINTF_CPU_ARCH", value, "use a -march value such as native")):
        check_environment()


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs the C++ compiler")
def test_a_cpu_arch_the_compiler_refuses_is_refused(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("LINTF_CPU_ARCH", "native")
    check_environment()
    monkeypatch.setenv("LINTF_CPU_ARCH", "no-such-cpu")
    with pytest.raises(ValueError, match=refused("LINTF_CPU_ARCH", "no-such-cpu", r".* does not take -march=no-such-cpu")):
        check_environment()


def test_the_extension_dir_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("LINTF_EXTENSION_DIR", str(tmp_path))
    check_environment()
    missing = str(tmp_path / "missing")
    monkeypatch.setenv("LINTF_EXTENSION_DIR", missing)
    with pytest.raises(ValueError, match=refused("LINTF_EXTENSION_DIR", missing, "it must name an existing directory")):
        check_environment()
    (tmp_path / "file").touch()
    monkeypatch.setenv("LINTF_EXTENSION_DIR", str(tmp_path / "file"))
    with pytest.raises(ValueError, match="LINTF_EXTENSION_DIR="):
        check_environment()


CACHE_KB_VALUES = {  # value: why the op refuses it (None: it takes it)
    "48,2048,32768": None, "32,1024,0": None, " 32 , 1024 , 0 ": None, "1,1,0": None, "1024,1024,1073741824": None,
    "1024": "does not have three fields", "32,1024": "does not have three fields",
    "32,1024,0,0": "does not have three fields", "32,1024,": "does not have three fields", "32,,0": "empty field",
    ",32,1024": "empty field", "32,1024,,": "empty field", "32,1M,0": "not a whole number (1M)",
    "-32,1024,0": "not a whole number (-32)", "32,1024,1e6": "not a whole number (1e6)",
    "32,\N{SUPERSCRIPT TWO},0": "not a whole number", "32,1024,1234567890123": "not a whole number",
    "0,1024,0": "L1d or L2 of 0", "32,0,0": "L1d or L2 of 0", "2048,1024,0": "L1d larger than the L2",
    "32,1024,99999999999": "over 1 TiB",
}


@pytest.mark.parametrize("value, why", CACHE_KB_VALUES.items())
def test_cpu_cache_overrides_are_checked_at_start_up(monkeypatch, value, why):
    monkeypatch.setenv("LINTF_CPU_CACHE_KB", value)
    if why is None:
        check_environment()
        return
    allowed = f"it .*{re.escape(why)}.*; give three whole numbers of KiB, l1d,l2,l3"
    with pytest.raises(ValueError, match=refused("LINTF_CPU_CACHE_KB", value, allowed)):
        check_environment()


@pytest.mark.parametrize("value, why", CACHE_KB_VALUES.items())
def test_the_start_up_check_refuses_what_the_op_refuses(monkeypatch, compiled_op, value, why):
    """The op's own parser (csrc/common/cpu/caches.cpp) is the reference for the Python check."""
    from lintf.ops.common.tuning import tuning_values

    monkeypatch.setenv("LINTF_CPU_CACHE_KB", value)
    if why is None:
        tuning_values(64, 64, 4)
        return
    with pytest.raises(ValueError, match="LINTF_CPU_CACHE_KB=.*" + re.escape(why)):
        tuning_values(64, 64, 4)
