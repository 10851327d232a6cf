"""Ahead-of-time build of the compiled causal-product op: ``python -m lintf.ops.build``.

Builds ``csrc/`` into a directory (default ``lintf/ops/_prebuilt/``) and records the torch
version there; ``lintf`` loads it from that default, or from ``$LINTF_EXTENSION_DIR``. Use it on
CUDA clusters (build once on a GPU node: ``--cuda``) and in read-only installs. Set
``LINTF_CPU_ARCH`` (e.g. ``x86-64-v3``) when the build machine's CPU differs from the runners'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lintf.ops import _ext


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, build, and print where the library went."""
    parser = argparse.ArgumentParser(prog="python -m lintf.ops.build", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=_ext.DEFAULT_PREBUILT_DIR, help="build directory")
    cuda = parser.add_mutually_exclusive_group()
    cuda.add_argument("--cuda", dest="cuda", action="store_true", default=None, help="include the CUDA kernel")
    cuda.add_argument("--no-cuda", dest="cuda", action="store_false", help="CPU kernel only")
    args = parser.parse_args(argv)
    with_cuda = _ext.cuda_wanted() if args.cuda is None else args.cuda
    library = _ext.build_ahead_of_time(args.output.resolve(), with_cuda)
    print(f"built {library} (cuda={with_cuda}); lintf loads it from there"
          + ("" if args.output.resolve() == _ext.DEFAULT_PREBUILT_DIR.resolve()
             else f" when LINTF_EXTENSION_DIR={args.output.resolve()}"))
    return library


if __name__ == "__main__":
    main()
