"""benchmarks.gla_gpu: what runs without a GPU (its arguments, its refusal); its tables are decayed_product_gpu's."""

import subprocess
import sys

import pytest
import torch

from benchmarks import gla_gpu


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--impls", "lintf cuda", "flash"], "--impls: unknown 'flash'; allowed: lintf cuda, lintf pytorch, FLA"),
        (["--heads", "16", "24"], "--heads: [24] are not positive multiples of H = 16"),
        (["--dtypes", "fp64"], "argument --dtypes: invalid choice: 'fp64'"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_allowed(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        gla_gpu.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage: python -m benchmarks.gla_gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_cuda_it_exits_non_zero_with_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.gla_gpu", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == ["benchmarks.gla_gpu needs a CUDA device (none is visible to torch here)"]
    assert not list(tmp_path.iterdir())


def test_inputs_gate_every_key_feature():
    if not torch.cuda.is_available():
        pytest.skip("the inputs are drawn on the GPU")
    q, k, v, log_gate, grad = gla_gpu.inputs(16, 8, 32, torch.bfloat16)
    assert log_gate.shape == q.shape and log_gate.dtype == torch.float32 and bool((log_gate <= 0).all())
