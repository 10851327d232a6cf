"""Save the resolved config of every run next to its logs and checkpoints."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback

from lintf.layout.directories import run_directory, unused_path


class SaveRunConfig(SaveConfigCallback):
    """Writes ``config.yaml`` into the run directory (see ``run_directory``) for any logger.

    ``lintf fit --config <run>/config.yaml`` repeats the run. A later command continuing the run (a
    resumed fit, a test or predict of its checkpoint) saves ``config-<subcommand>.yaml`` beside it
    (``config-test-1.yaml``, ... for more), never overwriting one.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        directory = run_directory(trainer)
        if trainer.is_global_zero:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, self.config_filename)
            if os.path.exists(path):
                stem, extension = os.path.splitext(self.config_filename)
                path = unused_path(os.path.join(directory, f"{stem}-{getattr(stage, 'value', stage)}{extension}"))
            self.parser.save(self.config, path, skip_unset=False, overwrite=True, multifile=self.multifile)
            keep_whole_batch_limits(path, self.config.get("trainer") or {})
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)


def keep_whole_batch_limits(path: str, trainer: Any) -> None:
    """Write ``limit_*_batches: 1`` as the int the run used: the parser's dump would say 1.0 (all batches).

    Lightning annotates these ``float | int``, so serialising turns the whole number into a float,
    and re-running the saved file would then use every batch instead of one.
    """
    whole = {key: value for key, value in dict(trainer).items()
             if key.startswith("limit_") and key.endswith("_batches") and type(value) is int}
    if not whole:
        return
    text = Path(path).read_text()
    for key, value in whole.items():
        text = re.sub(rf"^(\s+{key}:) \S+$", rf"\g<1> {value}", text, flags=re.MULTILINE)
    Path(path).write_text(text)
