"""Speech recognition with CTC (paper 4.3): one of lintf's three example tasks, in a room of its own.

Sub-rooms by job, each depending only on the ones above it and on lintf's core (data, models, tasks),
never the reverse:

    text.py        the CTC alphabet and transcript normalisation
    features/      audio I/O, resampling, log-mel, augmentation (SpecAugment, speed, filterbank warp)
    decoding/      CTC greedy and prefix beam search, character n-gram LM, the ``CTCDecoding`` options
    model/         convolutional front end, depthwise-convolution blocks, ``ASRTask``
    corpora/       manifests and corpus builders (synthetic voices, LibriVox clips, Czech dialogue)
    data/          ``SpeechData``: manifests -> length-bucketed feature batches
    adaptation/    test-time warp search (VTLN) and unsupervised speaker adaptation (self-training)
    cli.py         ``lintf asr vtln | adapt | lm-sweep``

Install its dependencies with ``pip install "lintf[speech]"``.
"""

from lintf.asr.data.speech_data import SpeechData
from lintf.asr.decoding.options import CTCDecoding
from lintf.asr.model.task import ASRTask

__all__ = ["ASRTask", "CTCDecoding", "SpeechData"]
