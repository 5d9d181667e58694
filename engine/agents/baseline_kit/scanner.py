"""The import scan: the third-party modules a repo's code imports (AST only), the repo's own modules
told apart by the census's rule, and the distribution that provides each module.
"""

from __future__ import annotations

import ast
import os
import tokenize
from pathlib import Path
from typing import Any, Iterable

from .constants import DIST_TO_IMPORTS_EXTRA, IMPORT_TO_DIST, SKIP_DIRS, STDLIB_EXTRA
from .metadata import canonical, requirement_name
from .shared import localroots


# --------------------------------------------------------------------------------------------------
# the import scan


MODULE_SUFFIXES = (".py", ".pyi", ".so", ".pyd")


def python_files(root: Path, suffixes: tuple[str, ...] = (".py",), names: Iterable[str] = ()) -> list[Path]:
    """The repo's files ending in one of `suffixes` or named one of `names`, in walk order; VCS,
    cache, build and virtual-environment directories are not entered."""
    wanted = frozenset(names)
    out = []
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                         and not (here / d / "pyvenv.cfg").exists())
        out += [here / f for f in sorted(files) if f.endswith(suffixes) or f in wanted]
    return out


def _guards_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        if handler.type is None:
            return True
        names = [n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                 for n in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type])]
        if {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"} & set(names):
            return True
    return False


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(tree: ast.AST) -> list[tuple[str, bool, int, tuple[str, ...]]]:
    """(dotted module, guarded, line, imported names) of every absolute import; TYPE_CHECKING blocks
    skipped. `guarded`: inside a ``try`` whose handlers catch ImportError (or broader); the names are
    those of ``from module import names`` (none for ``import module``)."""
    found: list[tuple[str, bool, int, tuple[str, ...]]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            inner = guarded or _guards_import_error(node.handlers)  # type: ignore[attr-defined]
            for child in node.body:  # type: ignore[attr-defined]
                visit(child, inner)
            for part in (node.handlers, node.orelse, node.finalbody):  # type: ignore[attr-defined]
                for child in part:
                    visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, guarded, node.lineno, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, guarded, node.lineno, tuple(alias.name for alias in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def repo_layout(root: Path) -> Any:
    """The repo's :class:`localroots.Layout`: its module files and its packaging files' source roots."""
    files = python_files(root, MODULE_SUFFIXES, localroots.PACKAGING_FILES)
    paths = [path.relative_to(root).as_posix() for path in files]
    packaging: dict[str, bytes] = {}
    for path, rel in zip(files, paths):
        if path.name in localroots.PACKAGING_FILES:
            try:
                packaging[rel] = path.read_bytes()
            except OSError:
                continue
    return localroots.layout(paths, packaging)


def scan_imports(root: Path, declared: Iterable[str] = ()) -> dict[str, Any]:
    """The repo's absolute imports, third-party candidates only (stdlib removed later, since the
    stdlib is the env's): ``{"modules": {dotted: {"files", "guarded", "first"}}, "own": [...],
    "unparsable": [...]}``. `guarded` is True when every occurrence is guarded.

    A top-level name is the repo's own (in ``own``, none of its imports a candidate, so it is never
    installed from an index) by the census's rule (:mod:`localroots`): a name the repo provides
    everywhere or a declared extension, or one whose every occurrence resolves inside the repo from
    the importing file's directory and ancestors, the source roots and its static ``sys.path``
    targets. One occurrence that does not resolve makes the name third-party: it needs installing."""
    repo = repo_layout(root)
    files = python_files(root)
    own = set(repo.names) | set(declared)
    unparsable = []
    targets: dict[str, list[str]] = {}
    # top-level name -> occurrences (file, dotted module, names) and (dotted, guarded, first) per import
    occurrences: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    seen: list[tuple[str, str, bool, int]] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            with tokenize.open(path) as handle:
                source = handle.read()
            tree = ast.parse(source, filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            unparsable.append(rel)
            continue
        if "sys.path" in source and (added := localroots.path_targets(tree, rel)):
            targets[rel] = added
        for dotted, guarded, line, names in imports_of(tree):
            occurrences.setdefault(dotted.split(".", 1)[0], []).append((rel, dotted, names))
            seen.append((rel, dotted, guarded, line))
    local = {top for top, uses in occurrences.items() if top in own or localroots.is_local(repo, top, uses, targets)}
    modules: dict[str, dict[str, Any]] = {}
    counted: set[tuple[str, str]] = set()
    for rel, dotted, guarded, line in seen:
        if dotted.split(".", 1)[0] in local:
            continue
        entry = modules.setdefault(dotted, {"files": 0, "guarded": True, "first": f"{rel}:{line}"})
        if (rel, dotted) not in counted:
            counted.add((rel, dotted))
            entry["files"] += 1
        entry["guarded"] = entry["guarded"] and guarded
    return {"modules": modules, "own": sorted(own | local), "unparsable": unparsable}


def third_party_candidates(scan: dict[str, Any], stdlib: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Dotted import -> info for imports that are not stdlib (top-level name checked)."""
    std = set(stdlib) | STDLIB_EXTRA
    return {name: info for name, info in scan["modules"].items() if name.split(".", 1)[0] not in std}


def distribution_for(module: str, env_map: dict[str, list[str]] | None = None,
                     base_map: dict[str, list[str]] | None = None) -> tuple[str | None, str]:
    """(distribution, how) for a dotted import: the table (longest dotted prefix first), then the
    env's and the base interpreter's installed metadata, then the top-level name itself.
    A None distribution means: not installable by that name (the table says so)."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in IMPORT_TO_DIST:
            return IMPORT_TO_DIST[key], "table"
    top = parts[0]
    for source, mapping in (("env metadata", env_map), ("base metadata", base_map)):
        if mapping and mapping.get(top):
            return sorted(mapping[top])[0], source
    return top, "import name"


def module_for_check(module: str) -> str:
    """What to look up in the env for a dotted import: the longest table key it starts with (so
    ``google.protobuf`` is checked as such, not as the namespace ``google``), else its top level."""
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        key = ".".join(parts[:i])
        if key in IMPORT_TO_DIST:
            return key
    return parts[0]


def imports_for_distribution(requirement: str) -> set[str]:
    """Import names a requirement's distribution is likely to provide (for choosing extras)."""
    name = requirement_name(requirement)
    if not name:
        return set()
    dist = canonical(name)
    names = {dist.replace("-", "_"), name.replace("-", "_")}
    for module, target in IMPORT_TO_DIST.items():
        if target and canonical(target) == dist:
            names.add(module.split(".", 1)[0] if "." not in module else module)
    names.update(DIST_TO_IMPORTS_EXTRA.get(dist, ()))
    return names


def select_extras(optional: dict[str, list[str]], imported: Iterable[str], project: str | None) -> list[str]:
    """The extras (optional-dependency groups) whose packages the code imports."""
    tops = set()
    for module in imported:
        tops.add(module)
        tops.add(module.split(".", 1)[0])
    chosen = []
    for extra, requirements in optional.items():
        for requirement in requirements:
            name = requirement_name(requirement)
            if name and project and canonical(name) == canonical(project):
                continue  # "all = [pkg[a,b]]": a reference to other extras
            if imports_for_distribution(requirement) & tops:
                chosen.append(extra)
                break
    return chosen
