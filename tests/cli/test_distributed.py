"""Two CPU processes (gloo): finite losses and identical weights on both ranks afterwards.

``ddp_spawn`` rather than ``ddp``: plain ``ddp`` re-launches the current command, which inside
pytest would be pytest itself. On the command line ``--trainer.strategy ddp`` works the same way.
"""

import pytest
import torch

from tests.cli.helpers import finite, run, tiny


@pytest.mark.slow
def test_ddp_spawn_two_processes(tmp_path):
    out = tmp_path / "ranks"
    out.mkdir()
    run(tiny(
        tmp_path, "--trainer.strategy", "ddp_spawn", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.max_steps", "3", "--trainer.limit_val_batches", "1", "--trainer.val_check_interval", "3",
        "--trainer.callbacks+=tests.cli.helpers.DumpWeights", f"--trainer.callbacks.directory={out}",
    ))
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert all(rank["world_size"] == 2 for rank in ranks)
    assert all(len(rank["losses"]) == 3 and finite(rank["losses"]) for rank in ranks)
    assert ranks[0]["losses"] != ranks[1]["losses"]  # each rank saw its own shard of the data
    first, second = ranks[0]["state"], ranks[1]["state"]
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0, msg=name)
    assert (tmp_path / "lightning_logs" / "copy-linear" / "version_0" / "config.yaml").is_file()
