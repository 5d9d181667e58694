"""The import rules of ARCHITECTURE.md hold: no cycle between resenv's modules, and every contract
of pyproject.toml's [tool.importlinter] is kept.

grimp reads every import statement of the source: at module level, inside a function, and under
`if TYPE_CHECKING:`. So a cycle is found however it is hidden; two modules that need each other
share a small module or a protocol instead (ARCHITECTURE.md, "Dependencies").
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("resenv.engine", "resenv.probes", "resenv.tui")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*ROOTS, cache_dir=None, include_external_packages=True)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import one another, directly or through others (the strongly
    connected components of more than one module), each sorted; Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    """A cycle as the imports that make it, with their line numbers."""
    members = set(component)
    lines = [f"cycle between {len(component)} modules:"]
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            where = sorted(detail["line_number"] for detail in graph.get_import_details(importer=importer, imported=imported))
            lines.append(f"  {importer} -> {imported} (line {', '.join(map(str, where))})")
    return "\n".join(lines)


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a"), ("p.c", "p.e"),
                               ("p.e", "p.f"), ("p.f", "p.e"), ("p.g", "p.h")]:
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph) == [["p.a", "p.b", "p.c"], ["p.e", "p.f"]]


def test_the_graph_holds_every_module_and_imports_hidden_in_functions(graph: grimp.ImportGraph) -> None:
    on_disk = set()
    for root in ROOTS:
        folder = REPO_ROOT / root.split(".")[1]
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            on_disk.add(".".join((root, *parts[:-1])) if parts[-1] == "__init__" else ".".join((root, *parts)))
    assert on_disk and on_disk <= set(graph.modules)
    # `resenv run --display tui` imports the dashboard inside a function: grimp sees it.
    assert graph.direct_import_exists(importer="resenv.engine.cli.main", imported="resenv.tui.app")


def test_no_import_cycle_between_resenv_modules(graph: grimp.ImportGraph) -> None:
    found = [component for component in cycles(graph) if component[0].startswith(ROOTS)]
    assert not found, "\n".join(describe(graph, component) for component in found)


def test_the_import_contracts_of_pyproject_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    code = lint_imports(config_filename=str(REPO_ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "0 broken" in report and "kept" in report


def test_the_probe_kit_imports_nothing_of_resenv_outside_it(graph: grimp.ImportGraph) -> None:
    """The kit runs with the agent's interpreter, copied alone into the sandbox."""
    kit = {"resenv.probes.kit", *graph.find_descendants("resenv.probes.kit")}
    for module in kit:
        outside = {name for name in graph.find_modules_directly_imported_by(module)
                   if name.startswith("resenv.") and name not in kit}
        assert not outside, f"{module} imports {sorted(outside)}"


def test_the_kit_scripts_import_only_the_standard_library_and_the_frameworks_they_look_for(
        graph: grimp.ImportGraph) -> None:
    looked_for = {"importlib_metadata", "jax", "jaxlib"}  # guarded: what the frameworks probe finds or not
    for module in graph.find_descendants("resenv.probes.kit"):
        foreign = {name for name in graph.find_modules_directly_imported_by(module)
                   if name.split(".")[0] not in sys.stdlib_module_names and name not in looked_for}
        assert not foreign, f"{module} imports {sorted(foreign)}"


def test_the_dispatch_policy_is_pure_and_the_estimates_read_only_the_spec(graph: grimp.ImportGraph) -> None:
    """The scheduler and the packing simulation of the tests call the very same policy."""
    def resenv_imports(module: str) -> set[str]:
        return {name for name in graph.find_modules_directly_imported_by(module) if name.startswith("resenv.")}

    assert resenv_imports("resenv.engine.run.packing") == set()
    assert resenv_imports("resenv.engine.run.durations") <= {"resenv.engine.spec", "resenv.engine.outcomes"}


def test_the_baseline_agent_imports_only_the_standard_library_its_kit_and_the_shared_judges(
        graph: grimp.ImportGraph) -> None:
    """The script and its kit are staged into the sandbox and run with the sandbox's python3: nothing
    of resenv is there but the three judges' modules staged beside them."""
    kit = {"resenv.engine.agents.baseline_kit", *graph.find_descendants("resenv.engine.agents.baseline_kit")}
    shared = {f"resenv.probes.{name}" for name in ("buildinfo", "classifier", "localroots")}
    for module in {"resenv.engine.agents.baseline_agent", *kit}:
        foreign = {name for name in graph.find_modules_directly_imported_by(module)
                   if name.split(".")[0] not in sys.stdlib_module_names and name not in kit | shared}
        assert not foreign, f"{module} imports {sorted(foreign)}"
    for module in shared:
        assert {name for name in graph.find_modules_directly_imported_by(module)
                if name.startswith("resenv.")} <= shared, module


def test_no_source_module_exceeds_a_thousand_lines() -> None:
    """A longer module holds more than one job: split it along its seams (ARCHITECTURE.md)."""
    long = {str(path.relative_to(REPO_ROOT)): lines for root in ROOTS
            for path in (REPO_ROOT / root.split(".")[1]).rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > 1000}
    assert not long, long
