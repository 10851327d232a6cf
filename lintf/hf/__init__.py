"""Hugging Face model directories: lintf's token models as ``transformers`` models, and back.

    settings.py      a task's model settings and weights, as a directory stores them (no transformers)
    directory.py     reading a directory's config, weights and tokenizer back into lintf (no transformers)
    configuration.py ``LintfConfig``: ``model_type: lintf``, the encoder's settings as plain data
    cache.py         ``LintfCache``: each layer's attention state as a ``transformers`` cache
    modeling.py      ``LintfForCausalLM``: the task's modules behind ``PreTrainedModel`` and ``generate``
    tokenization.py  ``LintfTokenizer`` (char and bytes tokenizers) and writing any lintf tokenizer
    registration.py  registering the classes with the Auto classes once ``transformers`` is imported
    export.py        writing a task's model and tokenizer as a directory (``lintf export``:
                     ``lintf.generation.export``)

Only registration.py is imported with ``lintf``; it imports nothing of ``transformers`` itself. The
package sits beneath the tasks (``--model.init_from`` reads a directory) and imports none of
``lintf.tasks``, ``lintf.generation`` or ``lintf.run``.
"""
