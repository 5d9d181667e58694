"""The import census: the denominator of tier C0 (import closure).

Input: the repo's files at its pinned commit, ``{relative posix path: content}`` (read from the run's
read-only bare repository by :func:`files_at_commit`, or from a plain tree by :func:`files_in_dir`),
so nothing an agent does can change what is counted. Every ``.py`` file is parsed with :mod:`ast`;
the census is the set of distinct top-level modules of its ABSOLUTE imports (``import a.b`` and
``from a.b import c`` both give ``a``; ``from . import x`` and other relative imports are skipped).
Imports nested in functions, ``try`` blocks and ``if TYPE_CHECKING`` count too; each module records
whether ANY occurrence is unconditional at module level (top level, or inside a class body or a
``with`` block there) or only guarded.

Classification of a top-level name, in this order:

- ``stdlib``: in ``sys.stdlib_module_names`` of the judging Python (3.11+), or ``__future__``. The
  stdlib wins over a same-named repo file (the stdlib always resolves; ``code/``, ``test/`` dirs exist).
- ``repo``: the repo itself provides it, by the rule of :mod:`probes.localroots` (shared with C0's
  pyright configuration and the baseline agent, so what is counted here is what they resolve):

  * a name the repo provides everywhere: a root-level module (``x.py`` or a directory ``x/``
    holding ``.py`` files at the repo root, under ``src/`` or under a source root that
    ``pyproject.toml`` / ``setup.cfg`` / ``setup.py`` declares), a package name a packaging file
    maps explicitly, or a regular package (``x/__init__.py``) anywhere whose parent directory is
    not itself a package (vendored or nested projects: ``third_party/foo/foo/__init__.py``);
  * otherwise, a name EVERY occurrence of which resolves inside the repo from the importing file's
    roots as pyright's execution environments give them: the repo root, ``src/``, the declared
    source roots, the file's own directory and those of its ancestors where a file imports the same
    name (the script that puts that directory on ``sys.path``), and the targets of its static
    ``sys.path.insert/append`` calls; resolving means the module exists as far as the import names
    one (``from dataset.transform import X`` needs ``dataset/transform.py`` or ``dataset/transform/``).

  Deliberately NOT repo: a namespace directory the import does not go into (``import torch`` or
  ``import torch.nn`` in ``examples/torch/run.py``, a plain folder: a namespace portion never
  shadows an installed package), and a name that one file imports from beside it while another
  imports it from where it cannot be found (that one needs it installed).
- ``third_party``: everything else.

The census is pure data (frozen dataclasses, ``to_dict`` / ``from_dict`` round-trip through JSON).
"""

from __future__ import annotations

import ast
import gc
import codecs
import io
import os
import subprocess
import sys
import tokenize
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from . import buildinfo, localroots

MAX_FILE_BYTES = 2 * 1024 * 1024
PACKAGING_FILES = frozenset({"pyproject.toml", "setup.cfg", "setup.py"})
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
KINDS = ("stdlib", "repo", "third_party")
# Directories never walked by files_in_dir (VCS data, caches, tool state).
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".tox", ".nox", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"})


@dataclass(frozen=True)
class ModuleUse:
    """One distinct top-level module of the census."""

    name: str
    kind: str           # "stdlib" | "repo" | "third_party"
    files: int          # how many files import it
    first: str          # first occurrence, "path:line" (files in path order)
    unconditional: bool  # some occurrence is unconditional at module level (else only guarded/nested)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "files": self.files, "first": self.first,
                "unconditional": self.unconditional}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModuleUse:
        return cls(name=str(data["name"]), kind=str(data["kind"]), files=int(data["files"]),
                   first=str(data["first"]), unconditional=bool(data.get("unconditional", True)))


@dataclass(frozen=True)
class Census:
    """The import census of one repo at one commit.

    ``files``: the ``.py`` files that were read (parsed or not), sorted: the C0 judge only counts
    diagnostics in these. ``unparsable``: files whose syntax ``ast`` rejects (counted in ``files``,
    contributing no imports). ``skipped``: files not read at all (over 2 MB, undecodable), sorted.
    ``roots`` (declared source roots other than the repo root and ``src``) and ``path_targets``
    (``{file: directories its static sys.path calls add}``) are the import roots of
    :mod:`probes.localroots` that C0 gives pyright, so it resolves the repo's own modules as the
    census classified them.
    """

    modules: list[ModuleUse] = field(default_factory=list)  # sorted by name
    files: list[str] = field(default_factory=list)
    unparsable: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)  # declared source roots beyond "" and src, sorted
    path_targets: dict[str, list[str]] = field(default_factory=dict)  # file -> static sys.path dirs

    @property
    def total(self) -> int:
        return len(self.modules)

    @property
    def stdlib(self) -> int:
        return sum(1 for m in self.modules if m.kind == "stdlib")

    @property
    def repo(self) -> int:
        return sum(1 for m in self.modules if m.kind == "repo")

    @property
    def third_party(self) -> int:
        return sum(1 for m in self.modules if m.kind == "third_party")

    def names(self, kind: str | None = None) -> list[str]:
        """Module names, sorted; only those of `kind` when given."""
        return [m.name for m in self.modules if kind is None or m.kind == kind]

    def kind_of(self, name: str) -> str | None:
        for module in self.modules:
            if module.name == name:
                return module.kind
        return None

    def module(self, name: str) -> ModuleUse | None:
        for module in self.modules:
            if module.name == name:
                return module
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total, "stdlib": self.stdlib, "repo": self.repo, "third_party": self.third_party,
            "modules": [m.to_dict() for m in self.modules],
            "files": list(self.files), "unparsable": list(self.unparsable), "skipped": list(self.skipped),
            "roots": list(self.roots), "path_targets": {k: list(v) for k, v in self.path_targets.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Census:
        return cls(
            modules=[ModuleUse.from_dict(m) for m in data.get("modules", [])],
            files=[str(f) for f in data.get("files", [])],
            unparsable=[str(f) for f in data.get("unparsable", [])],
            skipped=[str(f) for f in data.get("skipped", [])],
            roots=[str(r) for r in data.get("roots", [])],
            path_targets={str(k): [str(d) for d in v] for k, v in (data.get("path_targets") or {}).items()},
        )


class RepoFiles(dict[str, bytes]):
    """``{path: content}`` plus ``skipped``: the paths left out while reading (too large, unreadable).

    :func:`import_census` picks ``skipped`` up, so ``import_census(files_at_commit(...))`` records them.
    """

    def __init__(self, *args: Any, skipped: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skipped: list[str] = list(skipped)


def _wanted(path: str) -> bool:
    """A file the census reads: Python source or a packaging file."""
    return path.endswith(".py") or path.rsplit("/", 1)[-1] in PACKAGING_FILES


def _read(path: str) -> bool:
    """What the readers below return by default: the census's files and the build files that
    :mod:`probes.buildinfo` reads for declared compiled modules (the census ignores the latter)."""
    return _wanted(path) or buildinfo.wanted(path)


# ---------------------------------------------------------------------------------------------------
# Reading files


def files_at_commit(git_dir: Path, commit: str, *, max_bytes: int = MAX_FILE_BYTES,
                    select: Callable[[str], bool] = _read) -> RepoFiles:
    """The ``.py``, packaging and build files of `commit` in the (bare) repository `git_dir`, or only
    the paths `select` accepts (``buildinfo.wanted`` reads just what the build reader needs).

    Reads with ``git ls-tree -r -z -l`` and one ``git cat-file --batch``; never writes to the
    repository. Blobs over `max_bytes` are not read and are listed in ``skipped``; symlinks and
    submodules are ignored. Raises ``RuntimeError`` if git fails (unknown commit, not a repo).
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "HOME": os.environ.get("HOME", "/nonexistent"), "LANG": "C.UTF-8"}
    base = ["git", "--git-dir", str(git_dir)]
    listing = subprocess.run([*base, "ls-tree", "-r", "-z", "-l", "--full-tree", commit],
                             capture_output=True, env=env, timeout=120)
    if listing.returncode != 0:
        raise RuntimeError(f"git ls-tree {commit} failed ({listing.returncode}): "
                           f"{listing.stderr.decode(errors='replace').strip()[-500:]}")
    wanted: list[tuple[str, str]] = []  # (sha, path)
    skipped: list[str] = []
    for entry in listing.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        parts = meta.split()
        if len(parts) < 4:
            continue
        mode, kind, sha, size = parts[0], parts[1], parts[2].decode(), parts[3]
        try:
            path = raw_path.decode("utf-8")
        except UnicodeDecodeError:
            path = raw_path.decode("utf-8", errors="replace")
            if path.endswith(".py"):
                skipped.append(path)
            continue
        if kind != b"blob" or mode == b"120000" or not select(path):
            continue
        if size.isdigit() and int(size) > max_bytes:
            skipped.append(path)
            continue
        wanted.append((sha, path))
    files = RepoFiles(skipped=sorted(skipped))
    if not wanted:
        return files
    request = b"".join(sha.encode() + b"\n" for sha, _ in wanted)
    batch = subprocess.run([*base, "cat-file", "--batch"], input=request, capture_output=True, env=env,
                           timeout=300)
    if batch.returncode != 0:
        raise RuntimeError(f"git cat-file --batch failed ({batch.returncode}): "
                           f"{batch.stderr.decode(errors='replace').strip()[-500:]}")
    out = batch.stdout
    pos = 0
    for sha, path in wanted:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        pos = header_end + 1
        if len(header) < 3 or header[1] != b"blob":  # "<sha> missing"
            files.skipped.append(path)
            continue
        size = int(header[2])
        files[path] = out[pos:pos + size]
        pos += size + 1  # content is followed by a newline
    files.skipped.sort()
    return files


def files_in_dir(root: Path, *, max_bytes: int = MAX_FILE_BYTES, select: Callable[[str], bool] = _read) -> RepoFiles:
    """The same selection from a plain directory tree (bundled repos, tests).

    Skips VCS and cache directories and any virtual environment (a directory with ``pyvenv.cfg``
    or ``conda-meta/``); does not follow symlinks.
    """
    root = Path(root)
    files = RepoFiles()
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if name in _SKIP_DIRS or os.path.islink(full):
                continue
            if os.path.exists(os.path.join(full, "pyvenv.cfg")) or os.path.isdir(os.path.join(full, "conda-meta")):
                continue
            keep.append(name)
        dirnames[:] = sorted(keep)
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            if not select(rel):
                continue
            full = os.path.join(dirpath, name)
            try:
                if os.path.islink(full) or not os.path.isfile(full):
                    continue
                if os.path.getsize(full) > max_bytes:
                    files.skipped.append(rel)
                    continue
                files[rel] = Path(full).read_bytes()
            except OSError:
                files.skipped.append(rel)
    files.skipped.sort()
    return files


# ---------------------------------------------------------------------------------------------------
# Parsing


def _decode(data: bytes) -> str | None:
    """Source text by PEP 263 (coding cookie / BOM, default UTF-8); None if it cannot be decoded."""
    try:
        if data.startswith(codecs.BOM_UTF8):
            return data[3:].decode("utf-8")
        if b"coding" not in data[:400]:
            return data.decode("utf-8")
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None


_TRANSPARENT = (ast.ClassDef, ast.With, ast.AsyncWith)
_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


Occurrence = tuple[str, str, tuple[str, ...], int, bool]
"""(top-level module, dotted module, imported names, line, unconditional) of one absolute import."""


def _imports(tree: ast.Module) -> list[Occurrence]:
    """Every absolute import statement of `tree`, in source order (``import a.b`` gives one per
    alias, with no names; ``from a.b import c, d`` gives ``("a", "a.b", ("c", "d"), ...)``).

    Imports are statements, so only statement lists are walked, never expressions (much faster
    than ``ast.walk``).
    """
    stack: list[tuple[list[ast.stmt], bool]] = [(tree.body, True)]
    out: list[Occurrence] = []
    while stack:
        body, top = stack.pop()
        nested: list[tuple[list[ast.stmt], bool]] = []
        for node in body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append((alias.name.partition(".")[0], alias.name, (), node.lineno, top))
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module:
                    out.append((node.module.partition(".")[0], node.module,
                                tuple(alias.name for alias in node.names), node.lineno, top))
            elif isinstance(node, _TRANSPARENT):
                nested.append((node.body, top))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested.append((node.body, False))
            elif isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
                nested.append((node.body, False))
                nested.append((node.orelse, False))
            elif isinstance(node, _TRY):
                nested.append((node.body, False))
                for handler in node.handlers:
                    nested.append((handler.body, False))
                nested.append((node.orelse, False))
                nested.append((node.finalbody, False))
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    nested.append((case.body, False))
        stack.extend(reversed(nested))
    return out


# ---------------------------------------------------------------------------------------------------
# The census


def _scan(paths: list[str], files: Mapping[str, bytes], normalized: Mapping[str, str], max_bytes: int,
          skipped_all: set[str], scanned: list[str], unparsable: list[str], packaging: dict[str, bytes],
          found: dict[str, list[Any]], targets: dict[str, list[str]]) -> None:
    """Parse every ``.py`` file of `paths`, filling the output arguments."""
    for path in paths:
        if not path.endswith(".py"):
            continue
        data = files[normalized[path]]
        if len(data) > max_bytes:
            skipped_all.add(path)
            continue
        text = _decode(data)
        if text is None:
            skipped_all.add(path)
            continue
        scanned.append(path)
        if path.rsplit("/", 1)[-1] == "setup.py":
            packaging[path] = data
        try:
            tree = ast.parse(text, filename=path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            unparsable.append(path)
            continue
        if "sys.path" in text and (added := localroots.path_targets(tree, path)):
            targets[path] = added
        seen_here: set[str] = set()
        for name, module, names, line, top in _imports(tree):
            if not name:
                continue
            entry = found.get(name)
            if entry is None:
                found[name] = [1, f"{path}:{line}", top, [(path, module, names)]]
                seen_here.add(name)
                continue
            if name not in seen_here:
                seen_here.add(name)
                entry[0] += 1
            entry[2] = entry[2] or top
            entry[3].append((path, module, names))


def import_census(files: Mapping[str, bytes], *, skipped: Iterable[str] = (),
                  max_bytes: int = MAX_FILE_BYTES) -> Census:
    """The census of `files` ({relative posix path: content}; non-``.py`` files other than the
    packaging files are ignored). `skipped` (and ``files.skipped`` of a :class:`RepoFiles`) are
    paths already left out by the reader, recorded as such."""
    skipped_all = {p for p in set(skipped) | set(getattr(files, "skipped", ()) or ()) if _wanted(p)}
    paths = sorted(str(PurePosixPath(p)) for p in files if _wanted(str(PurePosixPath(p))))
    normalized = {str(PurePosixPath(p)): p for p in files}
    packaging = {p: files[normalized[p]] for p in paths if p.rsplit("/", 1)[-1] in ("pyproject.toml", "setup.cfg")}

    scanned: list[str] = []
    unparsable: list[str] = []
    # name -> [files count, first "path:line", unconditional, occurrences (path, dotted module, names)]
    found: dict[str, list[Any]] = {}
    targets: dict[str, list[str]] = {}
    # AST nodes are GC-tracked: building them triggers collections that cost 15-25 % of the census
    # (measured); each tree is freed by refcount as soon as it is walked, so nothing piles up.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        _scan(paths, files, normalized, max_bytes, skipped_all, scanned, unparsable, packaging, found, targets)
    finally:
        if gc_was_enabled:
            gc.enable()

    repo = localroots.layout(paths, packaging)
    modules = []
    for name in sorted(found):
        count, first, top, occurrences = found[name]
        if name in STDLIB:
            kind = "stdlib"
        elif localroots.is_local(repo, name, occurrences, targets):
            kind = "repo"
        else:
            kind = "third_party"
        modules.append(ModuleUse(name=name, kind=kind, files=count, first=first, unconditional=top))
    return Census(modules=modules, files=scanned, unparsable=sorted(unparsable),
                  skipped=sorted(p for p in skipped_all),
                  roots=[r for r in repo.roots if r not in ("", "src")], path_targets=targets)
