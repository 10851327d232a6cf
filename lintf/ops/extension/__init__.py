"""The compiled library of lintf's ops, built from ``csrc/``, and nothing about the ops themselves.

``build.py`` compiles it (just in time, or ahead of time: ``lintf build``), ``manifest.py`` records
and verifies each build, ``lock.py`` serialises builders, ``load.py`` loads it once per process
and runs the registrations the ops hand to ``on_load``, ``environment.py`` checks the LINTF_*
settings. An op's ``compiled.py`` is all that connects an op to it.
"""

from lintf.ops.extension.load import load_library, on_load, serves
from lintf.ops.extension.lock import BuildLockError

__all__ = ["BuildLockError", "load_library", "on_load", "serves"]
