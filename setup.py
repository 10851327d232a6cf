"""Packaging hook: installed copies (wheels, non-editable installs) carry the C++/CUDA sources.

``lintf.ops`` builds its causal-product op from ``csrc/`` on first use; an install without the
sources would silently run the slower PyTorch path. The sources are copied to ``lintf/ops/csrc/``
of the build, where ``lintf/ops/_ext.py`` looks for them. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

KERNEL_SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


class BuildWithKernelSources(build_py):
    """build_py that also copies csrc/ into the package."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "lintf" / "ops" / "csrc"
        target.mkdir(parents=True, exist_ok=True)
        for pattern in KERNEL_SOURCES:
            for source in sorted(Path(__file__).parent.joinpath("csrc").glob(pattern)):
                shutil.copy2(source, target / source.name)


setup(cmdclass={"build_py": BuildWithKernelSources})
