"""The offline GPU bundle: benchmarks.gpu_prepare's plan and argument checks, gpu_run.sh's refusals on a CPU."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_prepare

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def toolkit(tmp_path, monkeypatch) -> Path:
    """A directory shaped like a CUDA toolkit, named by CUDA_HOME."""
    home = tmp_path / "cuda"
    (home / "lib64").mkdir(parents=True)
    (home / "lib64" / "libcudart.so").touch()
    monkeypatch.setenv("CUDA_HOME", str(home))
    return home


def test_the_dry_run_plans_wheels_a_build_venv_and_the_cuda_build(tmp_path, capsys, toolkit):
    out = tmp_path / "bundle"
    gpu_prepare.main(["--out", str(out), "--torch", "2.11.0+cu130", "--arch", "9.0", "--python-version", "3.12",
                      "--dry-run", "--cuda-home", str(toolkit)])
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("$ ")]
    assert "pip download" in lines[0] and "--python-version 3.12" in lines[0]
    assert all(package in lines[0] for package in gpu_prepare.PACKAGES)
    assert "pip install torch==2.11.0\n" in printed
    assert lines[-1].startswith(f"$ TORCH_CUDA_ARCH_LIST=9.0 CUDA_HOME={toolkit} ") and "cuda=True" in lines[-1]
    assert not out.exists()  # a dry run writes nothing


def test_another_index_serves_the_build_venv(tmp_path, capsys, toolkit):
    gpu_prepare.main(["--out", str(tmp_path / "b"), "--torch", "2.11.0+cu130", "--dry-run",
                      "--index-url", "https://download.pytorch.org/whl/cu130"])
    assert "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130" in capsys.readouterr().out


def test_a_given_interpreter_builds_without_a_venv(tmp_path, capsys, toolkit):
    gpu_prepare.main(["--out", str(tmp_path / "b"), "--torch", "2.11.0+cu128", "--arch", "8.0", "9.0",
                      "--python", sys.executable, "--dry-run"])
    printed = capsys.readouterr().out
    assert "venv" not in printed and "TORCH_CUDA_ARCH_LIST='8.0;9.0'" in printed
    assert "not 2.11.0+cu128" in printed  # the build interpreter's torch is checked before the build


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--torch", "2.11.0"], "not a CUDA build's version"),
        (["--torch", "2.11.0+cu130", "--arch", "sm_90"], "not a compute capability"),
        (["--torch", "2.11.0+cu130", "--python-version", "2"], "not a Python 3 version"),
        (["--torch", "2.11.0+cu130", "--python", "/no/such/python"], "is not a file"),
        (["--torch", "2.11.0+cu130", "--cuda-home", "/no/such/cuda"], "holds no lib64/libcudart.so"),
    ],
)
def test_bad_arguments_name_the_value(tmp_path, capsys, toolkit, argv, message):
    with pytest.raises(SystemExit) as exited:
        gpu_prepare.main(["--out", str(tmp_path / "b"), "--dry-run", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_run.sh"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_run_script_checks_its_arguments(tmp_path):
    assert run_script().returncode == 2
    missing = run_script(str(tmp_path / "missing"))
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    short = run_script(str(tmp_path), "60")
    assert short.returncode == 2 and "SECONDS must be a whole number >= 120, got '60'" in short.stderr


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("bash") is None,
                    reason="checks the refusal without a GPU")
def test_the_run_script_refuses_without_a_gpu(tmp_path):
    done = run_script(str(tmp_path))
    assert done.returncode == 3 and "no CUDA device is visible to torch here" in done.stderr
    assert "==" not in done.stdout  # no stage started
