"""How ``lintf`` fails: the errors it reports in one paragraph, and with which exit status.

A mistake of the user (a bad option, config, checkpoint or input file) ends in ``lintf <subcommand>:
error: <one paragraph>`` and exit status 2; a run that started and cannot go on (divergence, a failed
save) in exit status 1, or 128 + the signal that stopped it. LINTF_DEBUG=1 shows the traceback instead.
The other subcommands report their own mistakes alike (``lintf.run.commands.CommandError``).
"""

from __future__ import annotations

import errno

from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lintf.ops.extension import BuildLockError
from lintf.plugins import PluginError
from lintf.registry import UnknownArgumentError, UnknownNameError
from lintf.run.checkpoint_search import CheckpointError

USER_ERRORS = (CheckpointError, PluginError, UnknownNameError, UnknownArgumentError, ValueError,
               MisconfigurationException)
"""Errors of a bad configuration: reported in one paragraph when they occur before training."""
RUN_ERRORS = (*USER_ERRORS, BuildLockError, FileNotFoundError)
"""Errors of bad data, settings or files met while a subcommand runs: one paragraph too (LINTF_DEBUG=1: traceback)."""


class ConfigError(ValueError):
    """A configuration that cannot run; ``main`` prints its message without a traceback."""


class RunFailed(RuntimeError):
    """A run that started and cannot go on (divergence, a failed save, SIGTERM); ``main`` exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
"""OSErrors of a full disk or a directory the run may not write: one paragraph, not a traceback."""
