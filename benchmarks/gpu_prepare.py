"""Prepare, on a machine without a GPU, a directory a GPU machine without internet access runs from.

    python -m benchmarks.gpu_prepare --out gpu_bundle --torch 2.11.0+cu130 --arch 9.0 [--python PY]
        [--python-version 3.11] [--index-url URL] [--package NAME ...] [--dry-run]

The directory holds:
  wheels/      wheels of the packages the GPU machine lacks (--package; by default the CLI's parser
               jsonargparse with docstring-parser and typeshed-client, and flash-linear-attention / fla-core
               with einops for the FLA columns of the kernel grid), fetched by ``pip download`` for the GPU
               machine's Python (--python-version), without their dependencies (torch and triton are there)
  op/          the lintf op with its CUDA kernels for compute capability --arch (``lintf build --output op
               --cuda`` under ``TORCH_CUDA_ARCH_LIST``), built by an interpreter whose torch is the GPU
               machine's (--torch, with its +cuXXX tag). --python names one; without it a virtual environment
               in <out>/.build-venv (the system's packages visible, torch replaced) installs that torch
               from PyPI (whose Linux wheels are CUDA builds) or --index-url (e.g.
               https://download.pytorch.org/whl/cu130); the build stops if its torch.__version__ differs.
               nvcc must be installed and match the tag's CUDA major version (--cuda-home: the toolkit); no
               GPU is needed.
  bundle.json  what was prepared: torch, arch, Python, packages.
On the GPU machine, ``benchmarks/gpu_run.sh <out>`` installs the wheels, loads the op and runs the GPU tests,
the kernel grid and the training benchmark. --dry-run prints the commands and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("jsonargparse", "docstring-parser", "typeshed-client", "flash-linear-attention", "fla-core", "einops")
TORCH_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?\+cu(\d{2,3})$")  # 2.11.0+cu130
ARCH = re.compile(r"^\d+\.\d+a?(\+PTX)?$")  # 9.0, 9.0a, 8.0+PTX


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_prepare", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory to prepare (created)")
    parser.add_argument("--torch", required=True, help="the GPU machine's torch.__version__, e.g. 2.11.0+cu130")
    parser.add_argument("--arch", nargs="+", default=["9.0"], help="compute capabilities (H100, H200: 9.0)")
    parser.add_argument("--python", help="an interpreter with the GPU machine's torch (default: a build venv)")
    parser.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the GPU machine's Python, for pip download (default: this one's)")
    parser.add_argument("--index-url", help="where the build venv gets torch (default: PyPI)")
    parser.add_argument("--package", nargs="+", default=list(PACKAGES), help="packages to fetch as wheels")
    parser.add_argument("--cuda-home", type=Path, default=cuda_home(),
                        help="the CUDA toolkit the build links (default: $CUDA_HOME, else one with lib64/libcudart.so)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, write nothing")
    args = parser.parse_args(argv)
    if not TORCH_VERSION.match(args.torch):
        parser.error(f"--torch: {args.torch!r} is not a CUDA build's version; give torch.__version__ as the GPU "
                     "machine prints it, e.g. 2.11.0+cu130")
    bad = [a for a in args.arch if not ARCH.match(a)]
    if bad:
        parser.error(f"--arch: {', '.join(map(repr, bad))} is not a compute capability; give e.g. 9.0 (H100, "
                     "H200), 8.0 (A100) or 9.0a")
    if not re.match(r"^3\.\d+$", args.python_version):
        parser.error(f"--python-version: {args.python_version!r} is not a Python 3 version such as 3.11")
    if args.python is not None and not Path(args.python).is_file():
        parser.error(f"--python: {args.python} is not a file; give the interpreter whose torch is {args.torch}")
    if args.cuda_home is None or not (args.cuda_home / "lib64" / "libcudart.so").exists():
        parser.error(f"--cuda-home: {args.cuda_home} holds no lib64/libcudart.so; give the CUDA toolkit's directory "
                     "(the one with bin/nvcc and lib64/)")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is a file; give a directory (created if missing)")
    return args


def cuda_home() -> Path | None:
    """$CUDA_HOME, else the first toolkit holding lib64/libcudart.so: /usr/local/cuda or the one above nvcc.

    torch guesses the directory above nvcc, which is wrong where nvcc is linked into /usr/local/bin.
    """
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    nvcc = shutil.which("nvcc")
    candidates = [Path("/usr/local/cuda")] + ([Path(nvcc).resolve().parent.parent] if nvcc else [])
    return next((c for c in candidates if (c / "lib64" / "libcudart.so").exists()), None)


def plan(args: argparse.Namespace) -> list[tuple[list[str], dict[str, str]]]:
    """The commands that prepare args.out, in order, each with the environment variables it adds."""
    out = args.out.resolve()
    steps: list[tuple[list[str], dict[str, str]]] = [
        ([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
          args.python_version, "--dest", str(out / "wheels"), *args.package], {}),
    ]
    python = args.python
    if python is None:
        venv = out / ".build-venv"
        python = str(venv / "bin" / "python")
        index = ["--index-url", args.index_url] if args.index_url else []
        public = args.torch.split("+")[0]
        steps += [
            ([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], {}),
            ([python, "-m", "pip", "install", f"torch=={public}", *index], {}),
        ]
    check = ("import sys, torch; v = torch.__version__; "
             f"sys.exit(None if v == {args.torch!r} else f'build interpreter has torch {{v}}, not {args.torch}')")
    build = ("from pathlib import Path; from lintf.ops.extension.build import build; "
             f"build(Path({str(out / 'op')!r}), cuda=True)")
    env = {"TORCH_CUDA_ARCH_LIST": ";".join(args.arch), "CUDA_HOME": str(args.cuda_home), "PYTHONPATH": str(REPO)}
    steps += [([python, "-c", check], {}), ([python, "-c", build], env)]
    return steps


def manifest(args: argparse.Namespace) -> dict:
    return {"torch": args.torch, "arch": args.arch, "python": args.python_version, "packages": args.package}


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    for command, env in plan(args):
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        print(f"$ {prefix + ' ' if prefix else ''}{shlex.join(command)}", flush=True)
        if args.dry_run:
            continue
        done = subprocess.run(command, env={**os.environ, **env}, check=False)
        if done.returncode != 0:
            sys.exit(f"gpu_prepare: the step above failed (exit {done.returncode}); {args.out} is incomplete")
    if args.dry_run:
        print(f"(dry run: nothing written; {args.out} would hold wheels/, op/ and bundle.json)")
        return
    (args.out / "bundle.json").write_text(json.dumps(manifest(args), indent=2) + "\n")
    print(f"prepared {args.out}: on the GPU machine run  benchmarks/gpu_run.sh {args.out}")


if __name__ == "__main__":
    main()
