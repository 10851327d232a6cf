"""Generating with autoregressive tasks: token choice, the prefill-then-step loop, and ``lintf generate``.

    streaming.py  one sequence token by token in constant memory, each token handed on as it is chosen
    stepping.py   the step as one compiled graph (``torch.compile``), eager where compiling fails
    prompts.py    each task's prompt and output as text: a tokenizer's, copy symbols, image bytes
    checkpoint.py the checkpoint of ``--ckpt_path``: found, vetted and rebuilt as a task
    command.py    ``lintf generate``
    export.py     ``lintf export``: the checkpoint as a Hugging Face directory (``lintf.hf``)

``Sampling`` (greedy, temperature, top-k, top-p) and ``complete``, the one loop that reads the given
tokens in parallel and generates the rest with the recurrent ``step``, live in ``lintf.sampling``,
beneath the tasks that use them too; they are exported here as well.
"""

from lintf.sampling import Sampling, complete

__all__ = ["Sampling", "complete"]
