"""How lintf's packages depend on each other: no import cycles, and the core never names an example task.

The core is everything under ``lintf/`` except the example tasks in packages of their own (``lintf.asr``,
speech recognition): model core and run plumbing. An example task builds on the core and plugs into the
``lintf`` command through its ``lintf.extensions`` entry point; the core neither imports it nor names it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "lintf"
EXAMPLE_TASKS = ("lintf.asr",)


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


def test_the_core_imports_no_example_task():
    """An example task uses data, models, tasks and the run plumbing, never the reverse."""
    importers = {name for name, targets in import_graph().items()
                 if not name.startswith(EXAMPLE_TASKS) and any(t.startswith(EXAMPLE_TASKS) for t in targets)}
    assert importers == set()


def strings_naming(path: Path, names: tuple[str, ...]) -> list[str]:
    """``line N: 'text'`` for each string (docstrings and messages included) in ``path`` that names one of ``names``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(n in node.value for n in names):
            found.append(f"line {node.lineno}: {node.value.strip()[:80]!r}")
    return found


def test_no_core_string_names_an_example_task():
    """The core's docstrings, messages and tables name no example task: an example task registers what it adds
    (its subcommands, checkpoint upgrades, decoding options) itself, through its entry point."""
    core = [path for path in PACKAGE.rglob("*.py") if not module_name(path).startswith(EXAMPLE_TASKS)]
    found = {str(path.relative_to(REPO)): hits for path in core if (hits := strings_naming(path, EXAMPLE_TASKS))}
    assert found == {}


def test_the_string_check_sees_a_docstring_and_a_message(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""Uses lintf.asr."""\n\nMESSAGE = f"see {1} lintf.asr.CTCDecoding"\nOTHER = "lintf.tasks"\n')
    assert [hit.split(":")[0] for hit in strings_naming(module, EXAMPLE_TASKS)] == ["line 1", "line 3"]


def test_the_example_tasks_register_through_the_entry_point():
    """lintf's own pyproject declares the speech task's extension; the core finds its commands only there."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."lintf.extensions"]' in pyproject and "lintf.asr.extension:register" in pyproject


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
