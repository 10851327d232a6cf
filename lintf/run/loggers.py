"""What a run logs: TensorBoard (the default) and CSV loggers with reserved run directories that
add to a continued run's logs, and a Weights & Biases logger that never blocks a run (offline without
an API key or network); Lightning's console notices that say nothing about the run are dropped.

``wandb`` is an optional extra (``pip install "lintf[wandb]"``); nothing here imports it until a
logger is built.
"""

from __future__ import annotations

import csv
import logging
import netrc
import os
import socket
import warnings
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from lintf.layout.directories import RUNS_DIRECTORY, reserve_version


class ReservesVersion:
    """Mixin for loggers with ``version_N`` directories under ``root_dir``: the automatic version is claimed
    atomically on rank 0.

    ``reserved_directory`` names the directory this process created (None until then), so a run that
    stops on a configuration error before writing a checkpoint can remove it again.
    """

    reserved_directory: str | None = None

    # Overrides _get_next_version (private) of Lightning's TensorBoardLogger and CSVLogger, which they call for
    # ``version=None`` to pick one past the highest ``root_dir/version_*``; tests/cli/test_upstream_contracts.py
    # checks it.
    def _get_next_version(self) -> int:
        version = super()._get_next_version()
        if rank_zero_only.rank != 0:  # other ranks receive rank 0's run directory by broadcast
            return version
        version = reserve_version(self.root_dir, version)  # root_dir: save_dir/name, where Lightning looks
        self.reserved_directory = os.path.join(self.root_dir, f"version_{version}")
        return version


class ReservedVersionTensorBoardLogger(ReservesVersion, TensorBoardLogger):
    """TensorBoardLogger whose automatic ``version_N`` directory is claimed atomically on rank 0 (the default logger).

    Given an existing run's directory (``version``), it adds event files beside the run's own, so
    TensorBoard shows one set of curves; a resumed fit passes ``purge_step`` (the checkpoint's global step,
    the step its first batch logs at), so events the run logged after its checkpoint are dropped and the
    curves continue without overlap.
    """


class AppendingExperimentWriter(ExperimentWriter):
    """Lightning's CSV writer, adding rows to an existing ``metrics.csv`` (its columns kept) instead of deleting it."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])

    # Overrides Lightning's _check_log_dir_exists (private), which deletes a metrics.csv it finds: a continued run
    # adds to its own. tests/cli/test_upstream_contracts.py checks it.
    def _check_log_dir_exists(self) -> None:
        return


class CSVLogger(ReservesVersion, LightningCSVLogger):
    """Lightning's CSVLogger with reserved ``version_N`` directories, adding to a continued run's ``metrics.csv``.

    Args:
        save_dir: the run root (runs go to ``save_dir/name/version_N``); None: ``--trainer.default_root_dir``
            under the ``lintf`` command, else the working directory.
        name: the folder of the runs under ``save_dir``.
        version: a run's folder name or number; None: the next free ``version_N``.
        prefix: put before every logged metric name.
        flush_logs_every_n_steps: how often rows are written to ``metrics.csv``.
    """

    def __init__(self, save_dir: str | None = None, name: str = RUNS_DIRECTORY, version: int | str | None = None,
                 prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir=save_dir or ".", name=name, version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)

    # Overrides CSVLogger.experiment to use the appending writer; _experiment and _fs are Lightning's (private).
    @property
    @rank_zero_experiment
    def experiment(self) -> AppendingExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingExperimentWriter(log_dir=self.log_dir)
        return self._experiment


class DropAdvertisement(logging.Filter):
    """Lightning's log line advertising a cloud logger on every run: not a message about the run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("💡 Tip:")


def quiet_lightning_notices() -> None:
    """Drop notices that say nothing about the run (the same ones the test suite filters)."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(DropAdvertisement())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # ``lintf test --ckpt_path last`` passes the run's config.yaml to LightningCLI as ``args``, which then warns
    # that sys.argv holds arguments too: they are the same command, read once.
    warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended to run from within Python")


Mode = Literal["online", "offline", "disabled"]
DEFAULT_BASE_URL = "https://api.wandb.ai"
ENV_MODES: dict[str, Mode] = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline",
                              "disabled": "disabled"}
"""WANDB_MODE values wandb accepts, and the mode each means."""
INIT_ARGUMENTS = ("name", "project", "dir", "id", "entity", "group", "tags", "job_type", "notes", "mode", "anonymous")
"""wandb.init options the logger sets from its own arguments; ``init_kwargs`` may not repeat them."""


class MissingExtraError(ImportError, ValueError):
    """An optional dependency is not installed. An ImportError for Python callers; a ValueError, so the
    ``lintf`` command reports it in one paragraph like any other configuration mistake."""


def require_wandb() -> None:
    """Raise MissingExtraError naming the ``wandb`` extra unless wandb can be imported."""
    try:
        import wandb  # noqa: F401
    except ImportError as error:
        raise MissingExtraError(f"WandbLogger needs the wandb package ({error}); install it with "
                                "pip install \"lintf[wandb]\", or log with TensorBoard (the default logger)") from None


def wandb_server() -> tuple[str, int]:
    """Host and port of the W&B server: WANDB_BASE_URL's (a self-hosted server), else api.wandb.ai:443."""
    url = os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    parts = urlsplit(url if "://" in url else f"https://{url}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        raise ValueError(f"WANDB_BASE_URL={url!r} is not a server address; expected e.g. https://wandb.example.com "
                         "or http://10.0.0.5:8080")
    return parts.hostname, port or (80 if parts.scheme == "http" else 443)


def wandb_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether W&B can log online, and if not, why (API key or network).

    Args:
        timeout: seconds to wait for the server's TCP port.
    """
    host, port = wandb_server()
    has_key = bool(os.environ.get("WANDB_API_KEY"))
    if not has_key:
        try:  # `wandb login [--host URL]` stores the key under the server's host name
            has_key = netrc.netrc().authenticators(host) is not None
        except (OSError, netrc.NetrcParseError):
            has_key = False
    if not has_key:
        return False, f"no W&B API key for {host} (WANDB_API_KEY or `wandb login`)"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        return False, f"{host}:{port} unreachable ({error})"
    return True, ""


def resolve_mode(mode: Mode | None, offline: bool | None, save_dir: str) -> Mode:
    """The wandb mode: ``mode``, else ``offline``, else WANDB_MODE, else online if W&B is reachable.

    Args:
        mode: the logger's ``mode`` argument.
        offline: the logger's ``offline`` argument (True: not online).
        save_dir: where an offline run goes (named in the notice).
    """
    if mode is not None and mode not in get_args(Mode):
        raise ValueError(f"WandbLogger: mode={mode!r}; expected one of {', '.join(get_args(Mode))}")
    if mode is not None and offline is not None and (mode != "online") != offline:
        raise ValueError(f"WandbLogger: offline={offline} contradicts mode={mode!r}; give only one of them")
    if mode is None and offline is not None:
        mode = "offline" if offline else "online"
    if mode is not None:
        return mode
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    if env:
        if env not in ENV_MODES:
            raise ValueError(f"WANDB_MODE={env!r} is not a W&B mode; expected one of {', '.join(ENV_MODES)}")
        return ENV_MODES[env]
    online, why = wandb_reachable()
    if not online:
        rank_zero_info(f"W&B: {why}; logging offline under {save_dir}/wandb, upload later with `wandb sync`")
    return "online" if online else "offline"


class WandbLogger(LightningWandbLogger):
    """Lightning's WandbLogger, but offline (``wandb sync`` later) when online logging cannot work.

    The mode comes from ``mode``, else ``offline``, else WANDB_MODE; with none of them the logger
    checks for an API key and reaches the server (WANDB_BASE_URL, or api.wandb.ai) for at most two
    seconds. "disabled" is wandb's own disabled mode: nothing is logged and wandb writes no files.

    Args:
        project: W&B project; also the directory under save_dir holding checkpoints.
        name: display name of the run.
        save_dir: where wandb writes its files (offline runs: save_dir/wandb/offline-run-*); None:
            ``<trainer.default_root_dir>/lightning_logs`` under the ``lintf`` command, else ``./lightning_logs``.
        version: id of the run to resume or create (Lightning's name for ``id``).
        id: id of the run to resume or create.
        offline: True forces offline, False forces online, None decides as above.
        mode: "online", "offline" or "disabled"; overrides WANDB_MODE.
        log_model: upload checkpoints as W&B artifacts (online only): True at the end, "all" as they are saved.
        prefix: put before every logged metric name ("prefix-name").
        checkpoint_name: artifact name of uploaded checkpoints (default ``model-<run id>``).
        entity: W&B team or user.
        group: W&B run group.
        tags: W&B run tags.
        job_type: W&B job type (e.g. "train", "eval").
        notes: a longer description of the run.
        anonymous: log to an anonymous W&B account.
        init_kwargs: further ``wandb.init`` options (config, resume, settings, ...), passed as they are.
    """

    def __init__(
        self,
        project: str = "lintf",
        name: str | None = None,
        save_dir: str | None = None,
        version: str | None = None,
        id: str | None = None,  # noqa: A002  (Lightning's and wandb's name)
        offline: bool | None = None,
        mode: Mode | None = None,
        log_model: bool | Literal["all"] = False,
        prefix: str = "",
        checkpoint_name: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        job_type: str | None = None,
        notes: str | None = None,
        anonymous: bool | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        require_wandb()
        init_kwargs = dict(init_kwargs or {})
        repeated = [key for key in INIT_ARGUMENTS if key in init_kwargs]
        if repeated:
            raise ValueError(f"WandbLogger: init_kwargs repeats {', '.join(repeated)}, which the logger sets from its "
                             f"own arguments; give {' and '.join(repeated)} as arguments (save_dir for dir)")
        if version is not None and id is not None and version != id:
            raise ValueError(f"WandbLogger: version={version!r} and id={id!r} name two runs; give one of them")
        save_dir = save_dir or RUNS_DIRECTORY
        mode = resolve_mode(mode, offline, save_dir)
        if mode != "disabled":
            os.makedirs(save_dir, exist_ok=True)
        super().__init__(  # offline=False: Lightning's offline flag would overwrite WANDB_MODE; mode says it instead
            name=name, save_dir=save_dir, version=version, id=id, offline=False, anonymous=anonymous, project=project,
            log_model=log_model if mode == "online" else False, prefix=prefix, checkpoint_name=checkpoint_name,
            mode=mode, entity=entity, group=group, tags=tags, job_type=job_type, notes=notes, **init_kwargs,
        )
        if anonymous is None:  # Lightning passes anonymous=None, which makes wandb warn that the setting does nothing
            self._wandb_init.pop("anonymous", None)
