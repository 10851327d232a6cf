"""The commands beside fit at their edges: every success exits 0, generation streams in constant memory,
and a write that cannot happen is one paragraph with nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from lintf.data.tokenizers import TOKENIZER_KEY, CharTokenizer
from lintf.models import EncoderConfig
from lintf.run.checkpoint_files import file_sha256, load_checkpoint_file, sidecar_of
from lintf.run.checkpoint_format import FORMAT
from lintf.run.cli import main
from lintf.tasks import CopyTask, StreamLanguageModelTask
from tests.cli.helpers import REPO, tiny
from tests.faults.helpers import CONSOLE_SCRIPT, lintf_process, one_paragraph, read_only_directory
from tests.faults.test_checkpoint_faults import format_one
from tests.generation.test_command import TINY, greedy_reference, save_run, text_run

TRAINED = ["--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "1"]


def old_checkpoint(path):
    torch.save(format_one(CopyTask(12, 24, EncoderConfig(d_model=16, n_layers=1, n_heads=2))), path)
    return path


def files_in(directory) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


# Every success exits 0 -------------------------------------------------------------------------------------------

def test_checkpoint_upgrade_exits_0_and_writes_the_digest_beside_the_copy(tmp_path):
    old = old_checkpoint(tmp_path / "old.ckpt")
    done = lintf_process(["checkpoint", "upgrade", str(old), str(tmp_path / "new.ckpt")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {tmp_path / 'new.ckpt'}") and "Traceback" not in done.stderr
    new = tmp_path / "new.ckpt"
    assert sidecar_of(new).read_text().split()[0] == file_sha256(new)  # a digest of the bytes on disk
    assert load_checkpoint_file(new)["lintf_format"] == FORMAT
    assert files_in(tmp_path) == ["new.ckpt", "new.ckpt.sha256", "old.ckpt"]


def test_build_output_exits_0_and_keeps_the_library_path_off_stderr(tmp_path):
    # the compiler is replaced by a stand-in that writes a library file: what is tested is the exit status
    script = (
        "import sys\nfrom pathlib import Path\nimport lintf.ops.extension.build as build\n"
        "def compile_into(directory, with_cuda, verbose=False):\n"
        "    library = Path(directory) / 'lintf_causal_product.so'\n"
        "    library.write_bytes(b'library')\n"
        "    return library\n"
        "build.compile_into = compile_into\n"
        f"{CONSOLE_SCRIPT}\n"
    )
    done = subprocess.run([sys.executable, "-c", script, "build", "--output", str(tmp_path / "ops"), "--no-cuda"],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"built {tmp_path / 'ops' / 'lintf_causal_product.so'}") and done.stderr == ""
    assert "lintf_causal_product.so" in files_in(tmp_path / "ops")


def test_generate_exits_0(tmp_path):
    path, _, _ = text_run(tmp_path)
    done = lintf_process(["generate", "--ckpt_path", str(path), "--prompt", "in the", "--max_new_tokens", "5"],
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("in the") and "Traceback" not in done.stderr


def test_trainer_subcommands_return_nothing_for_the_exit_status(tmp_path):
    assert main(tiny(tmp_path, *TRAINED)) is None  # the console script exits with what main returns: None is 0
    for subcommand in ("validate", "test", "predict"):
        assert main(tiny(tmp_path, "--ckpt_path", "last", "--trainer.limit_val_batches", "1",
                         "--trainer.limit_test_batches", "1", "--trainer.limit_predict_batches", "1",
                         subcommand=subcommand)) is None


@pytest.mark.skipif(not os.path.isdir("/usr/share/pocketsphinx/test/data/librivox"),
                    reason="apt-get install pocketsphinx-testdata")
def test_extension_commands_exit_0(tmp_path):
    pytest.importorskip("bible")
    done = lintf_process(["data", "librivox", "--out", str(tmp_path / "librivox.jsonl")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "librivox.jsonl").is_file()


# Generation streams ----------------------------------------------------------------------------------------------

def test_a_huge_request_streams_in_constant_memory(tmp_path):
    """10**12 new tokens would be an 8 TB buffer: the tokens must come out as they are chosen instead."""
    path, task, tokenizer = text_run(tmp_path)  # positions "none": no length limit, so the request is valid
    command = [sys.executable, "-c", CONSOLE_SCRIPT, "generate", "--ckpt_path", str(path), "--prompt", "in the ",
               "--max_new_tokens", str(10**12), "--temperature", "0"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(REPO), "LINTF_EXTENSION": "0"})
    try:
        streamed = process.stdout.read(len("in the ") + 200).decode()
        assert process.poll() is None, process.stderr.read().decode()  # still generating, nothing allocated up front
    finally:
        process.kill()
        process.wait()
    expected = tokenizer.decode(greedy_reference(task, tokenizer.encode("in the "), 200))
    assert streamed == "in the " + expected
    assert files_in(tmp_path) == ["lightning_logs"] and not (path.parents[1] / "samples").exists()


def test_tokens_beyond_the_positions_are_refused_before_the_model_is_built(tmp_path, capsys, monkeypatch):
    import lintf.generation.command as command

    task = StreamLanguageModelTask(19, 16, TINY, positions="learned")
    tokenizer = CharTokenizer("abcdefghijklmnopqrs")
    path = save_run(tmp_path, task, **{TOKENIZER_KEY: tokenizer.to_dict()})
    built = []
    monkeypatch.setattr(command, "build_task", lambda *args: built.append(args))
    err = one_paragraph(["generate", "--ckpt_path", str(path), "--prompt", "abc", "--max_new_tokens", str(10**10)],
                        capsys, "lintf generate: error:")
    assert f"a prompt of 3 tokens and {10**10} new ones exceed this model's 16 positions" in err
    assert "--max_new_tokens 14 or fewer" in err and built == []
    assert not (path.parents[1] / "samples").exists()


# Writes that cannot happen ---------------------------------------------------------------------------------------

def test_upgrade_into_a_read_only_directory(tmp_path, capsys):
    old = old_checkpoint(tmp_path / "old.ckpt")
    with read_only_directory(tmp_path / "ro") as target:
        err = one_paragraph(["checkpoint", "upgrade", str(old), str(target / "new.ckpt")], capsys,
                            "lintf checkpoint upgrade: error:")
        assert f"cannot write {target / 'new.ckpt'}: {target} is not writable" in err
        assert f"{old} is unchanged and no partial file was left" in err
        assert files_in(target) == []
    assert files_in(tmp_path) == ["old.ckpt", "ro"]


def test_build_output_onto_a_file_or_a_read_only_directory(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("kept")
    err = one_paragraph(["build", "--output", str(taken)], capsys, "lintf build: error:")
    assert f"--output {taken} is a file, not a directory" in err and taken.read_text() == "kept"
    with read_only_directory(tmp_path / "ro") as target:
        err = one_paragraph(["build", "--output", str(target / "ops")], capsys, "lintf build: error:")
        assert f"--output {target / 'ops'} is not a writable directory" in err and files_in(target) == []


@pytest.mark.parametrize("option,value,rule", [
    ("--temperature", "nan", "temperature must be a finite number >= 0"),
    ("--temperature", "inf", "temperature must be a finite number >= 0"),
    ("--top_p", "nan", "top_p must lie in (0, 1]"),
])
def test_nan_and_inf_sampling_options_get_the_rule(option, value, rule, tmp_path, capsys, monkeypatch):
    path, _, _ = text_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    err = one_paragraph(["generate", "--ckpt_path", str(path), "--prompt", "in", option, value, "--output", "x.txt"],
                        capsys, "lintf generate: error:")
    assert rule in err and f"got {value}" in err and "Expected a <class 'float'>" not in err
    assert not (path.parents[1] / "samples").exists()
