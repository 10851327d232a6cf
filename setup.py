"""Packaging hook: installed copies (wheels, non-editable installs) carry the C++/CUDA sources.

``lintf.ops`` builds its compiled ops from ``csrc/`` on first use; an install without the sources
would silently run the slower PyTorch paths. The tree under ``csrc/`` (its sources and headers, by
op and device) is copied to ``lintf/ops/csrc/`` of the build, where ``lintf/ops/extension/build.py``
looks for it. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

KERNEL_SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


class BuildWithKernelSources(build_py):
    """build_py that also copies the sources under csrc/ into the package, keeping their folders."""

    def run(self) -> None:
        super().run()
        source_root = Path(__file__).parent / "csrc"
        target_root = Path(self.build_lib) / "lintf" / "ops" / "csrc"
        for pattern in KERNEL_SOURCES:
            for source in sorted(source_root.rglob(pattern)):
                target = target_root / source.relative_to(source_root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


setup(cmdclass={"build_py": BuildWithKernelSources})
