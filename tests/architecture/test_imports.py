"""The house rules of lintf's imports: no cycles, and the core never reaches into the speech room."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "lintf"
SPEECH = ("lintf.asr",)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """lintf modules that ``path`` imports anywhere in its body (functions included)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # ``from package import submodule`` imports the submodule; other names come from ``base`` itself
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_lintf_has_no_import_cycle():
    graph = import_graph()
    assert "lintf.asr.model.task" in graph and "lintf.tasks.base" in graph["lintf.asr.model.task"]
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_only_the_cli_and_the_speech_room_import_speech():
    """Speech uses data, models and tasks, never the reverse; the CLI dispatches ``lintf data|asr`` to it."""
    importers = {name for name, targets in import_graph().items()
                 if not name.startswith(SPEECH) and any(t.startswith(SPEECH) for t in targets)}
    assert importers == set()


def test_core_imports_and_the_copy_run_load_no_speech_module(tmp_path):
    script = (
        "import sys, lintf, lintf.tasks, lintf.data, lintf.models, lintf.run.cli\n"
        "from lintf.run.cli import main\n"
        f"main(['fit', '--config', {str(REPO / 'configs' / 'copy.yaml')!r}, '--trainer.fast_dev_run', '1',\n"
        f"      '--trainer.default_root_dir', {str(tmp_path)!r}, '--trainer.enable_progress_bar', 'false',\n"
        "      '--data.train_size', '64', '--trainer.enable_model_summary', 'false'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('lintf.asr', 'lintf.speech', 'soundfile', 'bible')))\n"
        "print('SPEECH_MODULES', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SPEECH_MODULES []" in done.stdout
