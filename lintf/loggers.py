"""A Weights & Biases logger that never blocks a run: offline without an API key or network."""

from __future__ import annotations

import netrc
import os
import socket

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.utilities import rank_zero_info

WANDB_HOST = "api.wandb.ai"


def wandb_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether W&B can log online, and if not, why (API key or network)."""
    has_key = bool(os.environ.get("WANDB_API_KEY"))
    if not has_key:
        try:
            has_key = netrc.netrc().authenticators(WANDB_HOST) is not None
        except (OSError, netrc.NetrcParseError):
            has_key = False
    if not has_key:
        return False, "no W&B API key (WANDB_API_KEY or `wandb login`)"
    try:
        socket.create_connection((WANDB_HOST, 443), timeout=timeout).close()
    except OSError as error:
        return False, f"{WANDB_HOST} unreachable ({error})"
    return True, ""


class WandbLogger(LightningWandbLogger):
    """Lightning's WandbLogger, but offline (``wandb sync`` later) when online logging cannot work.

    WANDB_MODE, if set, decides; otherwise the logger checks for an API key and reaches
    api.wandb.ai for at most two seconds.

    Args:
        project: W&B project; also the directory under save_dir holding checkpoints.
        name: display name of the run.
        save_dir: where wandb writes its files (offline runs: save_dir/wandb/offline-run-*).
        offline: True forces offline, False forces online, None decides as above.
        log_model: upload checkpoints as W&B artifacts (online only).
        entity: W&B team or user.
        group: W&B run group.
        tags: W&B run tags.
    """

    def __init__(
        self,
        project: str = "lintf",
        name: str | None = None,
        save_dir: str = "lightning_logs",
        offline: bool | None = None,
        log_model: bool = False,
        entity: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
    ) -> None:
        if offline is None:
            mode = os.environ.get("WANDB_MODE", "").lower()
            if mode:
                offline = mode in ("offline", "dryrun", "disabled")
            else:
                online, why = wandb_reachable()
                offline = not online
                if offline:
                    rank_zero_info(f"W&B: {why}; logging offline under {save_dir}/wandb, upload later with `wandb sync`")
        os.makedirs(save_dir, exist_ok=True)
        super().__init__(
            name=name, save_dir=save_dir, project=project, offline=offline, log_model=log_model and not offline,
            entity=entity, group=group, tags=tags,
        )
