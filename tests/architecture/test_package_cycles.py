"""lintf's packages, read package by package, form no import cycle.

A module belongs to the first-level package or module of ``lintf`` that holds it (``lintf.run.cli`` to
``lintf.run``, ``lintf.registry`` to itself); ``lintf/__init__.py`` is the node ``lintf``. Package A
depends on package B when any module of A imports any module of B anywhere in its body: imports inside
functions count (a lazy import is a dependency that is only paid later), and so do imports under
``if TYPE_CHECKING:`` (a type taken from a package is still a dependency on it, and the test stays a plain
reading of the source). Names resolved at run time from strings (``importlib.import_module`` of a
command table's ``module:attribute``) are not imports.

The file-level test beside this one allows ``lintf.a.x -> lintf.b.y -> lintf.a.z``; this one does not, so
every package has a floor: it may use what lies beneath it and is never reached from there.
"""

from __future__ import annotations

from tests.architecture import test_core_and_example_tasks as file_level
from tests.architecture.test_core_and_example_tasks import find_cycle, import_graph, imported_modules


def package_of(module: str) -> str:
    """``lintf.x`` for any module under ``lintf/x`` (or ``lintf/x.py`` itself); ``lintf`` for the root."""
    return ".".join(module.split(".")[:2])


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, package it imports) -> the module imports behind that edge, as ``module -> module``."""
    edges: dict[tuple[str, str], list[str]] = {}
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            edge = package_of(source), package_of(target)
            if edge[0] != edge[1]:
                edges.setdefault(edge, []).append(f"{source} -> {target}")
    return edges


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {package_of(module): set() for module in graph}
    for source, target in package_edges(graph):
        packages[source].add(target)
    return packages


def describe_cycle(graph: dict[str, set[str]]) -> str | None:
    """The first package cycle of the module ``graph``, with the module imports that make each step; None if none."""
    cycle = find_cycle(package_graph(graph))
    if cycle is None:
        return None
    edges = package_edges(graph)
    steps = [f"  {a} -> {b}: {', '.join(edges[a, b][:3])}{' ...' if len(edges[a, b]) > 3 else ''}"
             for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def test_the_package_finder_sees_a_cycle_that_no_module_closes():
    modules = {"lintf.a.x": {"lintf.b.y"}, "lintf.b.y": set(), "lintf.b.z": {"lintf.a.w"}, "lintf.a.w": set()}
    assert find_cycle(modules) is None  # no module imports itself back ...
    assert describe_cycle(modules) == (  # ... but the packages a and b import each other
        "lintf.a -> lintf.b -> lintf.a\n  lintf.a -> lintf.b: lintf.a.x -> lintf.b.y\n"
        "  lintf.b -> lintf.a: lintf.b.z -> lintf.a.w")
    assert describe_cycle({"lintf.a.x": {"lintf.a.y"}, "lintf.a.y": {"lintf.a.x"}, "lintf.b": {"lintf.a.x"}}) is None


def test_the_root_and_top_level_modules_are_packages_of_their_own():
    assert [package_of(m) for m in ("lintf", "lintf.registry", "lintf.run.callbacks.save_config")] == [
        "lintf", "lintf.registry", "lintf.run"]


def test_imports_inside_functions_and_for_type_checking_count(tmp_path, monkeypatch):
    monkeypatch.setattr(file_level, "REPO", tmp_path)  # module names are read relative to the repository
    (tmp_path / "lintf").mkdir()
    module = tmp_path / "lintf" / "probe.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from lintf.tasks.base import TransformerTask\n"
        "def later():\n    import lintf.run.cli\n    from lintf import registry\n")
    known = {"lintf.tasks.base", "lintf.run.cli", "lintf.registry", "lintf"}
    assert imported_modules(module, known) == {"lintf.tasks.base", "lintf.run.cli", "lintf.registry"}


def test_lintf_packages_form_no_import_cycle():
    graph = import_graph()
    packages = package_graph(graph)
    assert {"lintf.models", "lintf.registry"} <= packages["lintf.tasks"]  # the graph is read, not empty
    assert "lintf.tasks" in packages["lintf.run"] and len(packages) > 10
    cycle = describe_cycle(graph)
    assert cycle is None, f"the lintf packages import each other in a cycle: {cycle}"



def test_the_floors_import_no_other_lintf_package():
    """Everything registers into the registry and writes in the layout; neither reaches back up."""
    packages = package_graph(import_graph())
    assert packages["lintf.registry"] == set() and packages["lintf.layout"] == set()
    assert packages["lintf.sampling"] <= {"lintf.attention", "lintf.heads"}
