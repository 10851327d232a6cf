"""Ctrl-C during ``fit`` stops after the current step and saves ``last.ckpt``, as SIGTERM does."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only


class SaveOnInterrupt(Callback):
    """The first Ctrl-C (SIGINT) of a training run asks it to stop like SIGTERM; a second one quits at once.

    Python turns SIGINT into a KeyboardInterrupt wherever the process is, mid-backward or mid-optimizer-step,
    where the state is not whole, and Lightning then exits without saving. Here the first SIGINT only
    raises Lightning's SIGTERM flag: the run finishes its optimizer step, raises ``SIGTERMException`` between
    two batches, ``RunCheckpoint`` saves ``last.ckpt`` and ``lintf`` says how to continue. ``signal_received``
    tells the report which signal stopped the run.
    """

    def __init__(self) -> None:
        self.signal_received: int | None = None
        self._previous: Any = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set signal handlers
        self._previous = signal.getsignal(signal.SIGINT)

        def stop_after_this_step(signum: int, frame: FrameType | None) -> None:
            if self.signal_received is not None:  # the second Ctrl-C: the user will not wait
                signal.signal(signal.SIGINT, signal.default_int_handler)
                raise KeyboardInterrupt
            self.signal_received = signum
            # Lightning's own SIGTERM flag (what its handler sets): checked after each training batch
            trainer._signal_connector.received_sigterm = True
            if rank_zero_only.rank == 0:
                print("\nlintf: Ctrl-C: stopping after this step and saving last.ckpt (Ctrl-C again quits without "
                      "saving)", file=sys.stderr, flush=True)

        signal.signal(signal.SIGINT, stop_after_this_step)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
