"""The README stays a short document for users whose commands name files that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
MOST_LINES = 250


def test_the_readme_is_short():
    lines = README.count("\n")
    assert lines <= MOST_LINES, f"README.md has {lines} lines; move history and long tables to docs/ (at most {MOST_LINES})"


def test_the_readme_names_benchmarks_configs_and_docs_that_exist():
    benchmarks = set(re.findall(r"python -m\s+benchmarks\.(\w+)", README))
    configs = set(re.findall(r"\bconfigs/[\w/]+\.yaml", README))
    links = set(re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)\)", README))
    assert benchmarks and configs and links
    missing = sorted(name for name in benchmarks if not (REPO / "benchmarks" / f"{name}.py").exists())
    missing += sorted(path for path in configs | links if not (REPO / path).exists())
    assert not missing, f"README.md names files that do not exist: {missing}"
