"""Loading the compiled library: ahead-of-time builds and their manifests, just-in-time builds, missing compilers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lintf.ops.extension import build, load
from lintf.ops.extension.build import BUILD_NOTICE
from lintf.ops.extension.manifest import MANIFEST


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (the loader caches its decision per process), extension enabled."""
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code], env={**os.environ, "LINTF_EXTENSION": "", **env},
        capture_output=True, text=True,
        timeout=600,
    )


@pytest.mark.usefixtures("compiled_op")
def test_two_processes_load_a_build_whose_torch_lock_was_left_behind(tmp_path):
    """The built op in a fresh extension dir, with torch's lock file left there: both processes load it."""
    built = build.jit_build_dir(with_cuda=False)
    target = tmp_path / "lintf" / built.name
    shutil.copytree(built, target)
    (target / "lock").touch()
    code = "from lintf.ops.extension import build, load_library\nassert load_library()\nprint(build.jit_build_dir(False))"
    for _ in range(2):
        result = run_python(code, TORCH_EXTENSIONS_DIR=str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(target)
        assert "lintf:" not in result.stderr and "Warning" not in result.stderr, result.stderr


def fake_build(directory: Path, torch_version: str = torch.__version__) -> Path:
    """A stand-in library file and a manifest that describes it, written by hand."""
    library = directory / f"{build.NAME}.so"
    library.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    manifest = {"torch": torch_version, "cuda": None, "library": library.name, "key": "x",
                "size": library.stat().st_size, "sha256": hashlib.sha256(library.read_bytes()).hexdigest()}
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return library


def test_prebuilt_for_another_torch_is_ignored_with_a_warning(tmp_path):
    fake_build(tmp_path, "0.0.1")
    with pytest.warns(UserWarning, match=re.escape(f"built for torch 0.0.1, this is torch {torch.__version__}")):
        assert load.prebuilt_library(tmp_path) is None


def test_prebuilt_for_this_torch_is_used(tmp_path):
    library = fake_build(tmp_path)
    assert load.prebuilt_library(tmp_path) == library
    assert load.prebuilt_library(tmp_path / "missing") is None


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "delete"])
def test_a_damaged_prebuilt_library_is_ignored_naming_the_file(tmp_path, damage):
    library = fake_build(tmp_path)
    data = library.read_bytes()
    if damage == "truncate":
        library.write_bytes(data[: len(data) // 2])
    elif damage == "overwrite":
        library.write_bytes(bytes(len(data)))
    else:
        library.unlink()
    with pytest.warns(UserWarning, match=re.escape(f"ignoring the ahead-of-time build in {tmp_path}: {library}")):
        assert load.prebuilt_library(tmp_path) is None


@pytest.mark.parametrize(
    "text, problem",
    [("{not json", "cannot read the build manifest"), ('{"torch": "2.0"}', "lacks a valid library, size, sha256"),
     ("[1, 2]", "lacks a valid torch, library, size, sha256"), (b"\xff\xfe", "cannot read the build manifest")],
    ids=["invalid-json", "missing-keys", "not-an-object", "not-text"],
)
def test_a_corrupt_prebuilt_manifest_is_ignored_naming_the_file(tmp_path, text, problem):
    manifest = tmp_path / MANIFEST
    manifest.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.warns(UserWarning, match=re.escape(problem)) as caught:
        assert load.prebuilt_library(tmp_path) is None
    assert str(manifest) in str(caught[0].message) and "ignoring the ahead-of-time build" in str(caught[0].message)


def test_without_a_compiler_one_warning_and_the_pytorch_path(tmp_path):
    code = (
        "import warnings, torch\n"
        "from lintf.ops import causal_linear_attention, compiled_op_available\n"
        "from lintf.ops.causal.reference import causal_linear_attention_reference as ref\n"
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
    built = subprocess.run([sys.executable, "-m", "lintf.run.cli", "build", "--output", str(tmp_path), "--no-cuda"],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    assert json.loads((tmp_path / MANIFEST).read_text())["torch"] == torch.__version__
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
    assert str(tmp_path / f"{build.NAME}.so") in result.stdout


USE_OP = (
    "import torch\n"
    "from lintf.ops import causal_linear_attention, compiled_op_available\n"
    "from lintf.ops.causal.reference import causal_linear_attention_reference as ref\n"
    "assert compiled_op_available('cpu')\n"
    "q = torch.rand(1, 2, 40, 3, dtype=torch.float64)\n"
    "torch.testing.assert_close(causal_linear_attention(q, q, q), ref(q, q, q))\n"
    "print('op ok')\n"
)


def jit_copy(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose JIT cache is a copy of this machine's build (built there if there is none), and
    the library's path in it."""
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), "LINTF_EXTENSION_DIR": str(tmp_path / "none")}
    source = build.jit_build_dir(build.cuda_wanted())
    target = tmp_path / "extensions" / "lintf" / source.name
    if (source / MANIFEST).is_file():
        target.mkdir(parents=True)
        # named files only (other processes may be writing ninja's temporary files there); copy2 keeps the
        # mtimes, so ninja sees the objects up to date
        objects = [path.name for path in source.glob("*.o")]
        for name in ["build.ninja", ".ninja_deps", ".ninja_log", f"{build.NAME}.so", MANIFEST, *objects]:
            if (source / name).is_file():
                shutil.copy2(source / name, target / name)
    else:
        assert run_python(USE_OP, **env).returncode == 0
    return env, target / f"{build.NAME}.so"


@pytest.mark.usefixtures("compiled_op")
def test_a_truncated_jit_library_is_rebuilt_instead_of_crashing(tmp_path):
    env, library = jit_copy(tmp_path)
    original = library.read_bytes()
    library.write_bytes(original[: len(original) // 2])
    result = run_python(USE_OP, **env)
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])  # loading it: SIGBUS (-7)
    assert "op ok" in result.stdout
    assert f"{library} has {len(original) // 2} bytes but its build recorded {len(original)}" in result.stderr
    manifest = json.loads((library.parent / MANIFEST).read_text())
    assert manifest["size"] == library.stat().st_size == len(original)
    assert manifest["sha256"] == hashlib.sha256(library.read_bytes()).hexdigest()


@pytest.mark.usefixtures("compiled_op")
def test_a_build_is_announced_once_on_stderr(tmp_path):
    env, library = jit_copy(tmp_path)
    library.unlink()  # the objects stay: only the link step runs again
    first, second = run_python(USE_OP, **env), run_python(USE_OP, **env)
    assert first.returncode == second.returncode == 0, first.stderr[-3000:] + second.stderr[-3000:]
    assert first.stderr.count(BUILD_NOTICE) == 1 and first.stderr.count("lintf: built the compiled ops in ") == 1
    assert BUILD_NOTICE not in second.stderr and "op ok" in second.stdout


def test_a_library_ninja_relinks_on_its_own_is_recorded(tmp_path, monkeypatch):
    """The same sources at another path change the build command, so ninja relinks inside ``load`` even
    though the library matched its manifest; the manifest must describe the new library afterwards."""
    import torch.utils.cpp_extension as cpp_extension

    library = tmp_path / f"{build.NAME}{cpp_extension.LIB_EXT}"
    library.write_bytes(b"first link")
    build._record(tmp_path, library, with_cuda=False)
    assert build._unverified(tmp_path, library) is None

    def relinking_load(build_directory: str, **_: object) -> str:
        library.write_bytes(b"relinked with other paths")
        return str(library)

    monkeypatch.setattr(cpp_extension, "load", relinking_load)
    assert build.compile_into(tmp_path, with_cuda=False) == library
    assert build._unverified(tmp_path, library) is None
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["sha256"] == hashlib.sha256(b"relinked with other paths").hexdigest()
