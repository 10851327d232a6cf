"""Settings at their edges: thread counts beyond the CPUs, an unknown CUDA kernel, booleans that are not booleans;
each refused before any work, in one paragraph with exit status 2, leaving nothing on disk."""

from __future__ import annotations

import os

import pytest

from tests.cli.helpers import tiny
from tests.faults.helpers import lintf_process
from tests.faults.test_cli_faults import lintf_error, no_run_directory


def test_more_threads_than_cpus_is_refused_before_any_work(tmp_path):
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    done = lintf_process(tiny(tmp_path), cwd=tmp_path, LINTF_THREADS="100000")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    assert done.stderr.strip() == (f"lintf: error: LINTF_THREADS='100000' is more than the {cpus} "
                                   f"CPU{'s' if cpus > 1 else ''} this process may use: give a whole number from 1 "
                                   f"to {cpus}, or unset it to let lintf choose.")
    assert not list(tmp_path.iterdir())


def test_an_unknown_cuda_kernel_is_refused_with_the_other_settings(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LINTF_CUDA_KERNEL", "bogus")
    err = lintf_error(tiny(tmp_path), capsys)
    assert "LINTF_CUDA_KERNEL='bogus' is not valid: use one of auto, chunked, scan, or unset it" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["maybe", "1", "yes please"])
def test_an_attention_boolean_must_be_a_boolean(value, tmp_path, capsys):
    err = lintf_error(tiny(tmp_path, "--model.encoder.attention", "delta_net", "--model.encoder.attention_kwargs",
                           f"{{negative_eigenvalues: {value}}}"), capsys)
    assert "attention 'delta_net' argument negative_eigenvalues is true or false, got " in err
    assert no_run_directory(tmp_path)
