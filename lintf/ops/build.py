"""Ahead-of-time build of the compiled causal-product op: ``lintf build`` (or ``python -m lintf.ops.build``)."""

from __future__ import annotations

from pathlib import Path

from lintf.ops import _ext


def build(output: Path = _ext.DEFAULT_PREBUILT_DIR, cuda: bool | None = None) -> Path:
    """Build the compiled causal-product op ahead of time, for a cluster or a read-only install.

    Builds csrc/ into a directory (default lintf/ops/_prebuilt/) and records the torch version
    there; lintf loads it from that default, or from $LINTF_EXTENSION_DIR. On a CUDA cluster build
    once on a GPU node (--cuda). Set LINTF_CPU_ARCH (e.g. x86-64-v3) when the build machine's CPU
    differs from the runners'.

    Args:
        output: build directory.
        cuda: include the CUDA kernel (--cuda) or build the CPU kernel only (--no-cuda); by default, include it
            when a GPU and the CUDA toolkit are found.

    Returns:
        the built library.
    """
    with_cuda = _ext.cuda_wanted() if cuda is None else cuda
    library = _ext.build_ahead_of_time(output.resolve(), with_cuda)
    print(f"built {library} (cuda={with_cuda}); lintf loads it from there"
          + ("" if output.resolve() == _ext.DEFAULT_PREBUILT_DIR.resolve()
             else f" when LINTF_EXTENSION_DIR={output.resolve()}"))
    return library


def main(argv: list[str] | None = None) -> Path:
    """``python -m lintf.ops.build [--output DIR] [--cuda | --no-cuda]``: what ``lintf build`` does."""
    from lintf.run.commands import run_function

    return run_function(build, argv, prog="python -m lintf.ops.build")


if __name__ == "__main__":
    main()
