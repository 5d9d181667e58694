"""Compiled modules a repo declares in its build configuration, read statically (nothing is executed).

Input: the repo's files at its pinned commit, ``{relative posix path: content}`` — what
:func:`probes.census.files_at_commit` returns (it reads the files :func:`wanted` selects), so what the
agent edited in its checkout never counts. Output: the modules that only exist once something is
compiled. The classifier uses them to call a missing module ``native_extension`` on facts, whatever
the module is named; the baseline agent uses the setup.py part to decide what ``build_ext`` builds.

Where a declaration is found (every file of these names anywhere in the tree):

- ``setup.py`` (parsed with :mod:`ast`): calls named ``Extension``, ``CUDAExtension``, ``CppExtension``,
  ``SYCLExtension``, ``Pybind11Extension`` or ``RustExtension`` (bare or as an attribute) anywhere in the
  file; the name is the first positional argument or ``name=``, a string literal or a module-level
  string constant. ``cythonize(...)``'s first argument (or ``module_list=``): ``.pyx``/``.py`` paths
  and globs (globs expand over the ``.pyx`` files of the tree), relative to the setup.py, named as
  Cython names them: the file's stem under every enclosing directory that has an ``__init__.py`` /
  ``__init__.pxd``. An ``Extension("pkg.*", ["pkg/*.pyx"])`` is expanded the same way.
- ``pyproject.toml``: ``[tool.setuptools] ext-modules`` names; ``[tool.maturin] module-name``, else,
  for the ``maturin`` build backend, the ``[lib] name`` (or the package name, ``-`` read as ``_``) of
  the ``Cargo.toml`` beside it (or at ``manifest-path``). setup.cfg has no declarative extension
  modules in setuptools, so there is nothing to read there.
- ``CMakeLists.txt`` (scikit-build, scikit-build-core, any CMake/pybind11 project): the target of
  ``pybind11_add_module``, ``nanobind_add_module``, ``Python_add_library`` / ``Python3_add_library`` /
  ``python_add_library`` with ``MODULE``, and ``add_library(name MODULE ...)``; command names are
  case-insensitive, comments and strings are not commands. ``${VAR}`` is resolved from ``set(VAR x)``
  and ``project(x)`` in the same file and ``${SKBUILD_PROJECT_NAME}`` from the nearest
  ``pyproject.toml``'s ``[project] name``; a target that stays unresolved is skipped.
- ``meson.build`` (meson-python): ``<anything>.extension_module('name', ...)`` with a literal name,
  prefixed with its literal ``subdir:`` (``pkg/sub`` -> ``pkg.sub.name``).

Names are dotted module names where the file says the package; a CMake or meson target is often known
only by its own name (``foo``, installed into some package), so :func:`declared_match` matches a
failing module by its whole dotted name or by its last component.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

try:
    import tomllib
except ImportError:  # pragma: no cover - the baseline agent may be driven by an older Python: no TOML then
    tomllib = None  # type: ignore[assignment]

BUILD_FILES = frozenset({"setup.py", "pyproject.toml", "CMakeLists.txt", "meson.build", "Cargo.toml"})
"""File names read for declarations, anywhere in the tree."""
PACKAGE_MARKERS = frozenset({"__init__.py", "__init__.pxd"})
"""Read only to see which directories are packages (Cython module names)."""

EXTENSION_CALLS = frozenset({"Extension", "CUDAExtension", "CppExtension", "SYCLExtension", "Pybind11Extension",
                             "RustExtension"})
"""setup.py calls whose first argument (or ``name=``) is a compiled module's dotted name."""


@dataclass(frozen=True)
class CompiledModule:
    """One declared compiled module."""

    name: str  # dotted module name, or a bare target name where the build file does not say the package
    declared_in: str  # "path:line" of the declaration
    via: str  # what declared it: "Extension", "cythonize", "pybind11_add_module", "tool.maturin", ...


def wanted(path: str) -> bool:
    """Whether `path` (relative, posix) is a file this reader uses: a build file, a ``.pyx`` source,
    or a package marker."""
    name = path.rsplit("/", 1)[-1]
    return name in BUILD_FILES or name in PACKAGE_MARKERS or name.endswith(".pyx")


def compiled_modules(files: Mapping[str, bytes]) -> list[CompiledModule]:
    """Every compiled module `files` declare, sorted by name then place; unreadable files are skipped."""
    paths = {str(PurePosixPath(path)): path for path in files}
    found: list[CompiledModule] = []
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        data = files[paths[path]]
        if name == "setup.py":
            found += setup_py_modules(data, path=path, paths=paths)
        elif name == "pyproject.toml":
            found += _pyproject_modules(data, path, files, paths)
        elif name == "CMakeLists.txt":
            found += _cmake_modules(data, path, files, paths)
        elif name == "meson.build":
            found += _meson_modules(data, path)
    return sorted(set(found), key=lambda m: (m.name, m.declared_in))


def module_names(files: Mapping[str, bytes]) -> frozenset[str]:
    """The names of :func:`compiled_modules`."""
    return frozenset(module.name for module in compiled_modules(files))


def declared_match(module: str, declared: Collection[str]) -> str | None:
    """The declared name `module` (a failing import's dotted name) is, or None: its whole name, or
    its last component (a target built inside a package is often declared by its own name only)."""
    if module in declared:
        return module
    last = module.rsplit(".", 1)[-1]
    return last if last != module and last in declared else None


# --- setup.py -------------------------------------------------------------------------------------


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _string(node: ast.AST | None, constants: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _argument(node: ast.Call, keyword: str) -> ast.AST | None:
    """The first positional argument, or the keyword argument `keyword`."""
    for kw in node.keywords:
        if kw.arg == keyword:
            return kw.value
    return node.args[0] if node.args else None


def setup_py_modules(source: bytes | str, *, path: str = "setup.py",
                     paths: Iterable[str] | None = None) -> list[CompiledModule]:
    """The compiled modules one setup.py declares (see the module docstring), in source order.

    `path` is the setup.py's path in the repo; `paths` the repo's file paths, used to expand Cython
    globs and to find packages. Without `paths`, globs are skipped and a ``.pyx`` path is named by all
    its directories (relative to the setup.py). An unparsable file declares nothing.
    """
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    constants = {}
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
            constants[stmt.targets[0].id] = stmt.value.value
    known = None if paths is None else frozenset(str(PurePosixPath(p)) for p in paths)
    base = str(PurePosixPath(path).parent)
    base = "" if base == "." else base + "/"
    out: list[CompiledModule] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        call = _call_name(node)
        where = f"{path}:{node.lineno}"
        if call in EXTENSION_CALLS:
            name = _string(_argument(node, "name"), constants)
            if name and "*" in name:  # Cython's Extension("pkg.*", ["pkg/*.pyx"])
                sources = node.args[1] if len(node.args) > 1 else _argument(node, "sources")
                patterns = [_string(e, constants) for e in getattr(sources, "elts", ())]
                out += [CompiledModule(m, where, call) for m in _cython_names(patterns, base, known)]
            elif name:
                out.append(CompiledModule(name, where, call))
        elif call == "cythonize":
            first = _argument(node, "module_list")
            items = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
            patterns = [_string(item, constants) for item in items]
            out += [CompiledModule(m, where, "cythonize") for m in _cython_names(patterns, base, known)]
    return sorted(out, key=lambda m: int(m.declared_in.rsplit(":", 1)[1]))


def _cython_names(patterns: Iterable[str | None], base: str, known: frozenset[str] | None) -> list[str]:
    """Module names of Cython sources given as paths or globs relative to `base` (a directory prefix)."""
    names = []
    for pattern in patterns:
        if not pattern or not pattern.endswith((".pyx", ".py")):
            continue
        full = posixpath.normpath(base + pattern)
        if any(ch in full for ch in "*?["):
            if known is None:
                continue
            matches = sorted(p for p in known if p.endswith(".pyx")
                             and (fnmatch.fnmatchcase(p, full) or fnmatch.fnmatchcase(p, full.replace("**/", ""))))
        else:
            matches = [full]
        names += [_cython_module(p, base, known) for p in matches]
    return names


def _cython_module(path: str, base: str, known: frozenset[str] | None) -> str:
    """Cython's name for the module of source `path`: its stem under the enclosing package dirs."""
    parts = PurePosixPath(path).with_suffix("").parts
    if known is None:  # no tree to look at: every directory below the setup.py counts
        return ".".join(PurePosixPath(path[len(base):]).with_suffix("").parts)
    name = [parts[-1]]
    for depth in range(len(parts) - 1, 0, -1):
        directory = "/".join(parts[:depth])
        if not any(f"{directory}/{marker}" in known for marker in PACKAGE_MARKERS):
            break
        name.insert(0, parts[depth - 1])
    return ".".join(name)


# --- pyproject.toml / Cargo.toml --------------------------------------------------------------------


def _toml(data: bytes) -> dict:
    if tomllib is None:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _line_of(data: bytes, needle: str) -> int:
    """The 1-based line where `needle` first occurs in `data` (1 when it does not)."""
    at = data.find(needle.encode())
    return data.count(b"\n", 0, at) + 1 if at >= 0 else 1


def _pyproject_modules(data: bytes, path: str, files: Mapping[str, bytes], paths: Mapping[str, str]
                       ) -> list[CompiledModule]:
    doc = _toml(data)
    tool = doc.get("tool") if isinstance(doc.get("tool"), dict) else {}
    out = []
    setuptools = tool.get("setuptools") if isinstance(tool.get("setuptools"), dict) else {}
    for key in ("ext-modules", "ext_modules"):
        for entry in setuptools.get(key) or ():
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                out.append(CompiledModule(entry["name"], f"{path}:{_line_of(data, key)}", "tool.setuptools.ext-modules"))
    maturin = tool.get("maturin") if isinstance(tool.get("maturin"), dict) else {}
    backend = (doc.get("build-system") or {}).get("build-backend") if isinstance(doc.get("build-system"), dict) else None
    if isinstance(maturin.get("module-name"), str):
        out.append(CompiledModule(maturin["module-name"], f"{path}:{_line_of(data, 'module-name')}", "tool.maturin"))
    elif backend == "maturin" or maturin:
        directory = PurePosixPath(path).parent
        manifest = str(directory / str(maturin.get("manifest-path") or "Cargo.toml"))
        cargo = _toml(files[paths[manifest]]) if manifest in paths else {}
        lib = cargo.get("lib") if isinstance(cargo.get("lib"), dict) else {}
        package = cargo.get("package") if isinstance(cargo.get("package"), dict) else {}
        name, table = (lib.get("name"), "[lib]") if lib.get("name") else (package.get("name"), "[package]")
        if isinstance(name, str):
            line = _line_of(files[paths[manifest]], table)
            out.append(CompiledModule(name.replace("-", "_"), f"{manifest}:{line}", "maturin"))
    return out


def _project_name(cmake_path: str, files: Mapping[str, bytes], paths: Mapping[str, str]) -> str | None:
    """``[project] name`` of the nearest pyproject.toml at or above `cmake_path`'s directory."""
    directory = PurePosixPath(cmake_path).parent
    for candidate in (directory, *directory.parents):
        pyproject = str(candidate / "pyproject.toml")
        if pyproject in paths:
            project = _toml(files[paths[pyproject]]).get("project")
            name = project.get("name") if isinstance(project, dict) else None
            return re.sub(r"[-.]+", "_", name) if isinstance(name, str) else None
    return None


# --- CMakeLists.txt ---------------------------------------------------------------------------------

# strings are kept (they may hold '#'), bracket and line comments become blanks of the same line count
_CMAKE_NOISE = re.compile(r'"(?:\\.|[^"\\])*"|#\[(=*)\[.*?\]\1\]|#[^\n]*', re.DOTALL)
_CMAKE_COMMAND = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
_CMAKE_ARG = re.compile(r'"((?:\\.|[^"\\])*)"|([^\s()"]+)')
_CMAKE_VAR = re.compile(r"\$\{(\w+)\}")
_CMAKE_TARGETS = {"pybind11_add_module": False, "nanobind_add_module": False, "python_add_library": True,
                  "python3_add_library": True, "add_library": True}
"""Target-declaring commands (lower case) -> whether the target must be declared ``MODULE``."""


def _blank_comment(match: re.Match[str]) -> str:
    text = match.group(0)
    return text if text.startswith('"') else "\n" * text.count("\n")


def _cmake_calls(text: str) -> Iterable[tuple[str, list[str], int]]:
    """(command in lower case, arguments, line) of each command invocation in `text` (comments removed)."""
    for match in _CMAKE_COMMAND.finditer(text):
        depth, at, quoted = 1, match.end(), False
        while at < len(text) and depth:
            char = text[at]
            if char == "\\" and quoted:
                at += 1
            elif char == '"':
                quoted = not quoted
            elif not quoted and char in "()":
                depth += 1 if char == "(" else -1
            at += 1
        args = [m.group(1) if m.group(1) is not None else m.group(2)
                for m in _CMAKE_ARG.finditer(text, match.end(), at - 1)]
        yield match.group(1).lower(), args, text.count("\n", 0, match.start()) + 1


def _cmake_modules(data: bytes, path: str, files: Mapping[str, bytes], paths: Mapping[str, str]
                   ) -> list[CompiledModule]:
    text = _CMAKE_NOISE.sub(_blank_comment, data.decode("utf-8", errors="replace"))
    variables: dict[str, str] = {}
    if (project := _project_name(path, files, paths)) is not None:
        variables["SKBUILD_PROJECT_NAME"] = project
    out = []
    for command, args, line in _cmake_calls(text):
        if command == "set" and len(args) >= 2:
            variables[args[0]] = args[1]
        elif command == "project" and args:
            variables.setdefault("PROJECT_NAME", args[0])
            variables.setdefault("CMAKE_PROJECT_NAME", args[0])
        elif command in _CMAKE_TARGETS and args:
            if _CMAKE_TARGETS[command] and "MODULE" not in args[1:]:
                continue
            target = _CMAKE_VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), args[0])
            if re.fullmatch(r"[A-Za-z_]\w*", target):
                via = "add_library MODULE" if command == "add_library" else command
                out.append(CompiledModule(target, f"{path}:{line}", via))
    return out


# --- meson.build ------------------------------------------------------------------------------------

_MESON_NOISE = re.compile(r"'''.*?'''|'(?:\\.|[^'\\\n])*'|#[^\n]*", re.DOTALL)
_MESON_CALL = re.compile(r"\.\s*extension_module\s*\(\s*'([A-Za-z_]\w*)'")
_MESON_SUBDIR = re.compile(r"\bsubdir\s*:\s*'([\w./-]*)'")


def _meson_modules(data: bytes, path: str) -> list[CompiledModule]:
    text = _MESON_NOISE.sub(lambda m: m.group(0) if m.group(0).startswith("'") else "", data.decode("utf-8", errors="replace"))
    out = []
    for match in _MESON_CALL.finditer(text):
        depth, at = 1, text.index("(", match.start())
        end = at + 1
        while end < len(text) and depth:  # strings were kept whole, so parentheses in them are skipped
            if text[end] == "'":
                end = text.index("'", end + 1) if "'" in text[end + 1:] else len(text)
            elif text[end] in "()[]":
                depth += 1 if text[end] in "([" else -1
            end += 1
        subdir = _MESON_SUBDIR.search(text, match.end(), end)
        name = match.group(1)
        if subdir and subdir.group(1).strip("/"):
            name = ".".join([*subdir.group(1).strip("/").split("/"), name])
        out.append(CompiledModule(name, f"{path}:{text.count(chr(10), 0, match.start()) + 1}", "extension_module"))
    return out
