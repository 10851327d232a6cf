"""Config files that say nothing, say one thing twice, or name a function as the optimizer: one paragraph each,
exit status 2, no run directory."""

from __future__ import annotations

import pytest

from tests.cli.helpers import tiny
from tests.faults.test_cli_faults import lintf_error, no_run_directory


def test_an_empty_config_file_is_named(tmp_path, capsys):
    config = tmp_path / "empty.yaml"
    config.write_text("# nothing set yet\n")
    err = lintf_error(tiny(tmp_path, "--config", str(config)), capsys)
    assert f"config file {config} is empty (or only comments): it sets no option" in err
    assert "Unexpected config" not in err and no_run_directory(tmp_path)


@pytest.mark.parametrize("text,key,lines", [
    ("seed_everything: 1\nseed_everything: 2\n", "seed_everything", (1, 2)),
    ("trainer:\n  max_steps: 3\n  logger: false\n  max_steps: 30\n", "max_steps", (2, 4)),
])
def test_a_key_given_twice_is_refused_with_its_lines(text, key, lines, tmp_path, capsys):
    config = tmp_path / "twice.yaml"
    config.write_text(text)
    err = lintf_error(tiny(tmp_path, "--config", str(config)), capsys)
    assert f"config file {config} sets {key!r} twice, on lines {lines[0]} and {lines[1]}" in err
    assert no_run_directory(tmp_path)


@pytest.mark.parametrize("value", ["os.system", "{class_path: os.system}"])
def test_a_function_as_the_optimizer_names_what_the_option_takes(value, tmp_path, capsys):
    config = tmp_path / "optimizer.yaml"
    config.write_text(f"model:\n  init_args:\n    optimizer: {value}\n")
    err = lintf_error(tiny(tmp_path, "--config", str(config)), capsys)
    assert "model.optimizer" in err and "'os.system' is not an optimizer (a subclass of torch.optim.Optimizer)" in err
    assert "torch.optim.AdamW" in err and "command" not in err and no_run_directory(tmp_path)
