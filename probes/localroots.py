"""Which absolute imports a repository provides itself: its modules are local, never third-party.

One stdlib-only implementation shared by the import census (:mod:`probes.census`, the denominator of
C0), C0's pyright configuration (:mod:`probes.c0`) and the built-in baseline agent (which stages this
file beside its script and must never install a repo's own module from a package index). It reads
only file names and the content of packaging files and ``.py`` sources, never runs anything.

The specification
-----------------
A top-level name the repo provides everywhere (:attr:`Layout.names`) is local wherever it is
imported: a root-level module, ``x.py`` or a directory ``x/`` holding ``.py`` files, at the repo
root, under ``src/`` or under a source root a packaging file declares (``package-dir``, ``where``,
poetry's ``from``, hatch's wheel ``packages``; relative to that file's directory); a package name a
packaging file maps explicitly (``package-dir = {"x" = "lib"}``); a regular package
(``x/__init__.py``) anywhere whose parent directory is not itself a package (vendored or nested
projects: ``third_party/foo/foo/__init__.py``).

Any other name is local only if EVERY one of its absolute import occurrences resolves inside the
repo from these roots of the importing file (:func:`is_local`; a subset of the roots pyright's
execution environments give it, :func:`search_roots`, so pyright finds whatever is local):

- the repo root, ``src/`` and the declared source roots;
- the importing file's own directory, and each of its ancestors that holds a file importing the
  same name itself: the script run from there puts that directory on ``sys.path`` (pyright walks
  up every ancestor; this keeps ``rllm/llm/.../finetuner.py`` importing Hugging Face's ``datasets``
  third-party, although ``rllm/datasets/`` is a folder two levels up);
- the targets of the file's static ``sys.path.insert(i, X)`` / ``sys.path.append(X)`` calls
  (:func:`path_targets`): ``X`` built from string literals, ``__file__``, ``os.path.join`` /
  ``dirname`` / ``abspath`` / ``realpath`` / ``normpath``, ``Path(__file__).parent`` (``.parents[n]``,
  ``/``, ``.resolve()``) and ``str()``; a bare literal path is taken relative to the file's directory
  and to the repo root (the two working directories a research script is run from); anything
  dynamic, absolute or outside the repo is ignored.

An occurrence resolves from a root when the module it names exists there as far as it names a
module (:func:`resolves`): ``from dataset.transform import X`` needs ``dataset/transform.py`` or
``dataset/transform/`` under the root. A namespace directory (no ``__init__.py``) named as the
import's target is a module only when the import also names a submodule of it (``from pkg import
sub`` with ``pkg/sub.py``): a namespace portion never shadows an installed regular package, so
``import torch`` in ``examples/torch/run.py`` (``examples/torch/`` a plain folder) is not local,
and neither is ``import torch.nn`` there. The standard library wins over all of this; that is the
caller's first rule, since the judging interpreter is the caller's.
"""

from __future__ import annotations

import ast
import configparser
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MODULE_SUFFIXES = (".py", ".pyi", ".so", ".pyd")
PACKAGING_FILES = frozenset({"pyproject.toml", "setup.cfg", "setup.py"})


def parent(path: str) -> str:
    """The directory of a repo-relative posix path ("" for the root)."""
    return path.rpartition("/")[0]


def join(base: str, rel: str) -> str | None:
    """`rel` (posix, may hold ``..``) under `base`, normalized; None when it leaves the repo."""
    parts = [p for p in base.split("/") if p] if base else []
    for part in rel.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def ancestors(directory: str) -> list[str]:
    """`directory` and every directory above it, innermost first, ending with the root ""."""
    out = [directory]
    while directory:
        directory = parent(directory)
        out.append(directory)
    return out


# ---------------------------------------------------------------------------------------------------
# Declared source roots


def _join_declared(base: str, rel: str) -> str:
    joined = os.path.normpath(os.path.join(base, rel)).replace(os.sep, "/") if rel else (base or ".")
    return "" if joined in (".", "") else joined.strip("/")


def declared_roots(path: str, data: bytes) -> tuple[set[str], set[str]]:
    """(source root dirs, explicit package names) the packaging file `path` declares; best effort:
    a file that cannot be read only loses its hints."""
    base = parent(path)
    roots: set[str] = set()
    names: set[str] = set()

    def package_dir(mapping: Mapping[Any, Any]) -> None:
        for key, value in mapping.items():
            if not isinstance(value, str):
                continue
            if key in ("", None):
                roots.add(_join_declared(base, value))
            else:
                names.add(str(key).partition(".")[0])

    name = path.rsplit("/", 1)[-1]
    try:
        if name == "pyproject.toml":
            import tomllib

            doc = tomllib.loads(data.decode("utf-8"))
            tool = doc.get("tool", {}) if isinstance(doc.get("tool"), dict) else {}
            st = tool.get("setuptools", {}) if isinstance(tool.get("setuptools"), dict) else {}
            if isinstance(st.get("package-dir"), dict):
                package_dir(st["package-dir"])
            packages = st.get("packages")
            if isinstance(packages, dict) and isinstance(packages.get("find"), dict):
                for where in packages["find"].get("where", []) or []:
                    if isinstance(where, str):
                        roots.add(_join_declared(base, where))
            poetry = tool.get("poetry", {}) if isinstance(tool.get("poetry"), dict) else {}
            for entry in poetry.get("packages", []) or []:
                if isinstance(entry, dict) and isinstance(entry.get("from"), str):
                    roots.add(_join_declared(base, entry["from"]))
            hatch = tool.get("hatch", {}) if isinstance(tool.get("hatch"), dict) else {}
            wheel = hatch.get("build", {}).get("targets", {}).get("wheel", {}) if isinstance(hatch.get("build"), dict) else {}
            for package in (wheel.get("packages", []) if isinstance(wheel, dict) else []) or []:
                if isinstance(package, str) and package.strip("/"):
                    roots.add(_join_declared(base, parent(package.strip("/"))))
        elif name == "setup.cfg":
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            parser.read_string(data.decode("utf-8", errors="replace"))
            if parser.has_option("options", "package_dir"):
                for line in parser.get("options", "package_dir").splitlines():
                    key, sep, value = line.partition("=")
                    if sep:
                        package_dir({key.strip(): value.strip()})
            if parser.has_option("options.packages.find", "where"):
                for where in parser.get("options.packages.find", "where").split():
                    roots.add(_join_declared(base, where))
        elif name == "setup.py":
            tree = ast.parse(data)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                for keyword in node.keywords:
                    if keyword.arg == "package_dir":
                        try:
                            value = ast.literal_eval(keyword.value)
                        except (ValueError, SyntaxError, TypeError):
                            continue
                        if isinstance(value, dict):
                            package_dir(value)
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if fname in ("find_packages", "find_namespace_packages"):
                    where = node.args[0] if node.args else next(
                        (k.value for k in node.keywords if k.arg == "where"), None)
                    if isinstance(where, ast.Constant) and isinstance(where.value, str):
                        roots.add(_join_declared(base, where.value))
    except Exception:  # noqa: BLE001 - a broken packaging file only loses hints
        pass
    return roots, names


# ---------------------------------------------------------------------------------------------------
# The layout


@dataclass(frozen=True)
class Layout:
    """What the repo's file names provide.

    ``modules``: module paths without suffix (``a/b`` for ``a/b.py``); ``dirs``: every directory
    holding a ``.py`` file at any depth (a package or a namespace portion); ``packages``: directories
    with ``__init__.py``; ``roots``: ``""``, ``src`` and the declared source roots, sorted; ``names``:
    the top-level names the repo provides everywhere (see the module docstring).
    """

    modules: frozenset[str]
    dirs: frozenset[str]
    packages: frozenset[str]
    roots: tuple[str, ...]
    names: frozenset[str]


def layout(paths: Iterable[str], packaging: Mapping[str, bytes] = {}) -> Layout:
    """The :class:`Layout` of a repo from its file paths (posix, relative to the repo root) and the
    content of its packaging files (``{path: bytes}``; other entries are ignored)."""
    modules: set[str] = set()
    dirs: set[str] = set()
    packages: set[str] = set()
    py: list[str] = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        stem, dot, _ = name.partition(".")
        if not dot or not any(name.endswith(s) for s in MODULE_SUFFIXES):
            continue
        directory = parent(path)
        if path.endswith(".py"):
            py.append(path)
            if stem == "__init__" and name == "__init__.py":
                packages.add(directory)
            parts = path.split("/")
            for i in range(1, len(parts)):
                dirs.add("/".join(parts[:i]))
        if stem.isidentifier() and stem != "__init__":
            modules.add(f"{directory}/{stem}" if directory else stem)
    roots = {"", "src"}
    names: set[str] = set()
    for path, data in packaging.items():
        if path.rsplit("/", 1)[-1] in PACKAGING_FILES:
            more_roots, more_names = declared_roots(path, data)
            roots |= more_roots
            names |= more_names
    for module in modules:
        if parent(module) in roots:
            names.add(module.rsplit("/", 1)[-1])
    for directory in dirs:
        name = directory.rsplit("/", 1)[-1]
        if not name.isidentifier():
            continue
        above = parent(directory)
        if above in roots or (directory in packages and above not in packages):
            names.add(name)
    return Layout(modules=frozenset(modules), dirs=frozenset(dirs), packages=frozenset(packages),
                  roots=tuple(sorted(roots)), names=frozenset(names))


# ---------------------------------------------------------------------------------------------------
# Static sys.path targets


_PATH_FUNCS = frozenset({"abspath", "realpath", "normpath", "expanduser"})


def _value(node: ast.AST, path: str) -> tuple[str, str] | None:
    """("dir", repo path) or ("lit", relative literal) of a static path expression in `path`; None
    when it is dynamic or leaves the repo."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return None if node.value.startswith(("/", "~")) else ("lit", node.value)
    if isinstance(node, ast.Name) and node.id == "__file__":
        return ("dir", path)
    if isinstance(node, ast.Call):
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if isinstance(func, ast.Attribute) and fname in ("resolve", "absolute") and not node.args:
            return _value(func.value, path)
        if fname in ("Path", "PurePath", "PosixPath", "str", "fspath") and len(node.args) == 1:
            return _value(node.args[0], path)
        if fname in _PATH_FUNCS and len(node.args) == 1:
            return _value(node.args[0], path)
        if fname == "dirname" and len(node.args) == 1:
            return _up(_value(node.args[0], path))
        if fname == "join" and node.args:
            return _joined([_value(a, path) for a in node.args])
        if fname in ("getcwd", "cwd") and not node.args:
            return ("lit", ".")
        return None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        return _up(_value(node.value, path))
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        value = _value(node.value.value, path)
        for _ in range(node.slice.value + 1):
            value = _up(value)
        return value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _joined([_value(node.left, path), _value(node.right, path)])
    return None


def _up(value: tuple[str, str] | None) -> tuple[str, str] | None:
    if value is None:
        return None
    kind, text = value
    if kind == "dir":
        return None if text == "" else ("dir", parent(text))
    return ("lit", f"{text}/..")


def _joined(values: list[tuple[str, str] | None]) -> tuple[str, str] | None:
    out: tuple[str, str] | None = None
    for value in values:
        if value is None:
            return None
        if out is None or value[0] == "dir":
            out = value
            continue
        kind, base = out
        if kind == "dir":
            target = join(base, value[1])
            if target is None:
                return None
            out = ("dir", target)
        else:
            out = ("lit", f"{base}/{value[1]}")
    return out


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def path_targets(tree: ast.AST, path: str) -> list[str]:
    """The repo directories the static ``sys.path.insert/append`` calls anywhere in `tree` (the
    parsed file `path`) add, in source order, without repeats (see the module docstring)."""
    out: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value)):
            continue
        if node.func.attr == "insert" and len(node.args) == 2:
            argument = node.args[1]
        elif node.func.attr == "append" and len(node.args) == 1:
            argument = node.args[0]
        else:
            continue
        value = _value(argument, path)
        if value is None:
            continue
        kind, text = value
        candidates = [text] if kind == "dir" else [join(parent(path), text), join("", text)]
        for target in candidates:
            if target is not None and target not in out:
                out.append(target)
    return out


# ---------------------------------------------------------------------------------------------------
# Resolution


def search_roots(source_roots: Iterable[str], path: str, targets: Iterable[str] = ()) -> list[str]:
    """The directories an absolute import in the file `path` is resolved from, as pyright's execution
    roots would: its own directory and its ancestors (up to the repo root ""), the repo's source
    roots (:attr:`Layout.roots`), then the file's static ``sys.path`` targets; no repeats."""
    out: list[str] = []
    for root in [*ancestors(parent(path)), *source_roots, *targets]:
        if root not in out:
            out.append(root)
    return out


def _resolves_from(repo: Layout, root: str, parts: list[str], names: Iterable[str]) -> bool:
    current = root
    for i, part in enumerate(parts):
        here = f"{current}/{part}" if current else part
        last = i == len(parts) - 1
        if not last:
            if here not in repo.dirs:
                return False
            current = here
            continue
        if here in repo.modules or here in repo.packages:
            return True
        if here in repo.dirs:  # a namespace directory: a module only with a named submodule
            return any(f"{here}/{n}" in repo.modules or f"{here}/{n}" in repo.dirs for n in names)
        return False
    return False


def resolves(repo: Layout, roots: Iterable[str], module: str, names: Iterable[str] = ()) -> bool:
    """Whether the absolute import of the dotted `module` (``from module import names``, or
    ``import module`` with no names) resolves inside the repo from one of `roots`."""
    parts = module.split(".")
    if not all(parts):
        return False
    names = list(names)
    return any(_resolves_from(repo, root, parts, names) for root in roots)


def is_local(repo: Layout, top: str, occurrences: Iterable[tuple[str, str, tuple[str, ...]]],
             targets: Mapping[str, list[str]] = {}) -> bool:
    """Whether the top-level name `top` is the repo's own: a name the repo provides everywhere, or
    one whose every occurrence ``(importing file, dotted module, imported names)`` resolves inside
    the repo (`targets`: each file's static ``sys.path`` targets). No occurrence: not local.

    Of a file's ancestors only those holding a file that imports `top` themselves are roots (the
    script run from there that puts the directory on ``sys.path``): pyright walks up every ancestor,
    so this is a subset of what it resolves, and it keeps a real package imported from deep inside
    a package that happens to hold a same-named folder (``rllm/llm/.../finetuner.py`` importing
    Hugging Face's ``datasets`` beside ``rllm/datasets/``) third-party."""
    if top in repo.names:
        return True
    uses = list(occurrences)
    importing_dirs = {parent(path) for path, _, _ in uses}
    for path, module, names in uses:
        own = parent(path)
        roots = [own, *(d for d in ancestors(own)[1:] if d in importing_dirs), *repo.roots, *targets.get(path, ())]
        if not resolves(repo, roots, module, names):
            return False
    return bool(uses)
