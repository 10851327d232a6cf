"""Speech recognition with CTC (paper 4.3): one of lintf's example tasks, in a package of its own.

Subpackages by job, each depending only on the ones above it and on lintf's core (data, models,
tasks) and run plumbing (``lintf.run``), never the reverse:

    text.py        the CTC alphabet and transcript normalisation
    features/      audio I/O, resampling, log-mel, augmentation (SpecAugment, speed, filterbank warp)
    decoding/      CTC greedy and prefix beam search, character n-gram LM, the ``CTCDecoding`` options
    model/         convolutional front end, depthwise-convolution blocks, ``ASRTask``
    corpora/       manifests and corpus builders (synthetic voices, LibriVox clips, Czech dialogue)
    data/          ``SpeechData``: manifests -> length-bucketed feature batches
    adaptation/    test-time warp search (VTLN) and unsupervised speaker adaptation (self-training)
    commands/      ``lintf asr vtln | adapt | lm-sweep``
    extension.py   what the task adds to lintf: ``lintf asr``, ``lintf data``, its checkpoint upgrades

Install its dependencies with ``pip install "lintf[speech]"``. ``ASRTask``, ``CTCDecoding`` and
``SpeechData`` are imported on first use, so lintf can load the extension (and say what is missing)
without them.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTS = {"ASRTask": "lintf.asr.model.task", "CTCDecoding": "lintf.asr.decoding.options",
           "SpeechData": "lintf.asr.data.speech_data"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
