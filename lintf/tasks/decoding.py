"""Decoding options: how a trained task turns its outputs into predictions at test and predict time.

They are not part of the model: ``lintf test|predict --ckpt_path X --decoding ...`` takes the
architecture from the checkpoint and the decoding from the command line or YAML (``decoding:``
beside ``model:``), so a different beam width or language model never needs a retrained model.
A task that decodes says which class it takes (``decoding_class``) and receives the object
through ``use_decoding``.
"""

from __future__ import annotations


class Decoding:
    """Base of every task's decoding options (subclasses take their options as constructor arguments)."""

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({options})"
