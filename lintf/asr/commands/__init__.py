"""``lintf asr <command>``: workflows on a trained speech model.

    lintf asr vtln --ckpt CKPT --manifest SPEAKER.jsonl        # the speaker's filterbank warp, no transcripts
    lintf asr adapt --ckpt CKPT --manifest SPEAKER.jsonl --warp W --adapted OUT.ckpt   # self-training
    lintf asr lm-sweep --ckpt CKPT --manifest DEV.jsonl --lm-text LM.txt   # LM weight and bonus of the beam

Each prints a table and writes ``<name>.md`` and ``.json`` under ``--out`` (default: beside the
checkpoint's run directory, ``<run>/<name>/``).
"""

from lintf.asr.commands.adapt import adapt_command
from lintf.asr.commands.lm_sweep import lm_sweep
from lintf.asr.commands.vtln import vtln

COMMANDS = {"vtln": vtln, "adapt": adapt_command, "lm-sweep": lm_sweep}
"""``lintf asr <name>``."""
