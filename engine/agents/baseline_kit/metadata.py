"""The metadata readers: what a repo declares it needs, read statically (its code is never executed):
requirements files, pyproject.toml (PEP 621 and Poetry), setup.py, setup.cfg, environment.yml and
.python-version.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path
from typing import Any, Iterable

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11: pyproject.toml is then skipped, said so
    tomllib = None  # type: ignore[assignment]

from .constants import AUX_REQUIREMENTS
from .shared import buildinfo


# --------------------------------------------------------------------------------------------------
# names and requirements


def canonical(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def requirement_name(requirement: str) -> str | None:
    """The distribution name a requirement string names, or None (a URL or path)."""
    text = requirement.strip()
    if re.match(r"^(git\+|hg\+|svn\+|bzr\+|https?://|file:|\.|/)", text):
        egg = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        return egg.group(1) if egg else None
    match = _REQ_NAME.match(text)
    return match.group(1) if match else None


class RequirementSet:
    """What step 1 found: requirement strings (in order, exact duplicates dropped), constraint
    files, index options for pip, local projects to install editable, and where each came from."""

    def __init__(self) -> None:
        self.requirements: list[str] = []
        self.constraints: list[str] = []
        self.index_options: list[str] = []
        self.local_projects: list[str] = []
        self.sources: list[str] = []
        self.notes: list[str] = []
        self.python_version: str | None = None

    def add(self, requirement: str) -> None:
        requirement = requirement.strip()
        if requirement and requirement not in self.requirements:
            self.requirements.append(requirement)

    def add_option(self, *option: str) -> None:
        joined = " ".join(option)
        existing = [" ".join(self.index_options[i:i + len(option)]) for i in range(len(self.index_options))]
        if joined not in existing:
            self.index_options.extend(option)

    def names(self) -> set[str]:
        return {canonical(n) for n in map(requirement_name, self.requirements) if n}


# ---- requirements.txt


def find_requirement_files(root: Path) -> list[Path]:
    """Root ``requirements*.txt`` (or ``requirements/*.txt``), without docs/lint/dev/test/CI files."""
    found = sorted(p for p in root.glob("requirements*.txt") if p.is_file())
    if not found and (root / "requirements").is_dir():
        found = sorted(p for p in (root / "requirements").glob("*.txt") if p.is_file())
    kept = []
    for path in found:
        stem = path.stem.lower().removeprefix("requirements")
        if path.parent.name == "requirements":
            stem = "-" + path.stem.lower()
        if AUX_REQUIREMENTS.search(stem):
            continue
        kept.append(path)
    return kept


def _logical_lines(text: str) -> Iterable[str]:
    """Lines with ``\\`` continuations joined and comments removed."""
    buffer = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        line = buffer + line
        buffer = ""
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            yield line
    if buffer.strip():
        yield re.sub(r"(^|\s)#.*$", "", buffer).strip()


def read_requirements(path: Path, reqs: RequirementSet, seen: set[Path] | None = None) -> None:
    """Add one requirements file (and what it includes) to `reqs`."""
    seen = set() if seen is None else seen
    path = path.resolve()
    if path in seen or not path.is_file():
        if not path.is_file():
            reqs.notes.append(f"{path.name}: included file not found")
        return
    seen.add(path)
    reqs.sources.append(str(path))
    base = path.parent
    for line in _logical_lines(path.read_text(errors="replace")):
        option = re.match(r"^(-r|--requirement|-c|--constraint)(?:\s+|=)(.+)$", line)
        if option:
            target = (base / option.group(2).strip()).resolve()
            if option.group(1) in ("-r", "--requirement"):
                read_requirements(target, reqs, seen)
            elif target.is_file():
                reqs.constraints.append(str(target))
            continue
        index = re.match(r"^(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host)(?:\s+|=)(\S+)$", line)
        if index:
            flag = {"-i": "--index-url", "-f": "--find-links"}.get(index.group(1), index.group(1))
            value = index.group(2)
            if flag == "--find-links" and not re.match(r"^[a-z+]+://", value):
                value = str((base / value).resolve())
            reqs.add_option(flag, value)
            continue
        if line in ("--pre",):
            reqs.add_option("--pre")
            continue
        editable = re.match(r"^(-e|--editable)(?:\s+|=)(.+)$", line)
        if editable:
            target = editable.group(2).strip()
            if re.match(r"^(git|hg|svn|bzr)\+", target):
                reqs.add(target)
            else:
                local = target.split("#", 1)[0].split("[", 1)[0]
                extras = target[len(local):] if target[len(local):].startswith("[") else ""
                reqs.local_projects.append(str((base / local).resolve()) + extras)
            continue
        if line.startswith("-"):
            reqs.notes.append(f"{path.name}: option ignored: {line}")
            continue
        line = re.sub(r"\s--hash[=\s]\S+", "", line).strip()
        if re.match(r"^(\.{1,2}/|/)", line) or line.startswith("file:"):
            target = line.removeprefix("file:")
            reqs.add(str((base / target).resolve()) if not target.startswith("/") else target)
            continue
        reqs.add(line)


# ---- pyproject.toml


def _poetry_constraint(spec: str) -> str:
    """Poetry version constraints (^, ~, *, bare versions, comma/OR lists) as PEP 440 specifiers."""
    spec = spec.strip()
    if spec in ("", "*"):
        return ""
    if "||" in spec or "|" in spec:
        return ""  # PEP 440 has no OR: install unconstrained rather than guess
    parts = []
    for part in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", spec):
        part = part.strip()
        if not part:
            continue
        if part.startswith("^"):
            version = part[1:]
            nums = [int(x) if x.isdigit() else 0 for x in re.split(r"[.]", version)[:3]]
            while len(nums) < 3:
                nums.append(0)
            given = len(version.split("."))
            if nums[0] != 0:
                upper = f"{nums[0] + 1}.0.0"
            elif nums[1] != 0 or given < 3:
                upper = f"0.{nums[1] + 1}.0" if given >= 2 else "1.0.0"
            else:
                upper = f"0.0.{nums[2] + 1}"
            parts += [f">={version}", f"<{upper}"]
        elif part.startswith("~") and not part.startswith("~="):
            version = part[1:]
            nums = version.split(".")
            if len(nums) >= 2:
                upper = f"{nums[0]}.{int(nums[1]) + 1}.0" if nums[1].isdigit() else ""
            else:
                upper = f"{int(nums[0]) + 1}.0.0" if nums[0].isdigit() else ""
            parts += [f">={version}"] + ([f"<{upper}"] if upper else [])
        elif re.match(r"^[0-9]", part):
            parts.append(f"=={part}")
        else:
            parts.append(part)
    return ",".join(parts)


def _poetry_requirement(name: str, value: Any, base: Path) -> tuple[str | None, bool, list[str]]:
    """(requirement, optional, extras) for one poetry dependency entry; None when it is skipped."""
    if isinstance(value, list):  # multiple constraints: take the first one without markers
        value = value[0] if value else "*"
    if isinstance(value, str):
        spec = _poetry_constraint(value)
        return f"{name}{spec}", False, []
    if not isinstance(value, dict):
        return None, False, []
    optional = bool(value.get("optional", False))
    extras = [str(e) for e in value.get("extras", [])]
    extra_text = f"[{','.join(extras)}]" if extras else ""
    marker = ""
    if isinstance(value.get("markers"), str):
        marker = f"; {value['markers']}"
    if "git" in value:
        ref = value.get("rev") or value.get("tag") or value.get("branch")
        url = f"git+{value['git']}" + (f"@{ref}" if ref else "")
        return f"{name}{extra_text} @ {url}{marker}", optional, extras
    if "url" in value:
        return f"{name}{extra_text} @ {value['url']}{marker}", optional, extras
    if "path" in value:
        return str((base / str(value["path"])).resolve()), optional, extras
    spec = _poetry_constraint(str(value.get("version", "*")))
    return f"{name}{extra_text}{spec}{marker}", optional, extras


def read_pyproject(path: Path) -> dict[str, Any]:
    """The dependency metadata of a pyproject.toml.

    Returns ``{"name", "dependencies": [...], "optional": {extra: [...]}, "installable": bool,
    "requires_python", "error"}``; Poetry's optional dependencies appear under their extras.
    """
    out: dict[str, Any] = {"name": None, "dependencies": [], "optional": {}, "installable": False,
                           "requires_python": None, "error": None}
    if tomllib is None:
        out["error"] = "tomllib needs Python >= 3.11: pyproject.toml not read"
        return out
    try:
        data = tomllib.loads(path.read_text(errors="replace"))
    except (tomllib.TOMLDecodeError, OSError) as exc:
        out["error"] = f"pyproject.toml unreadable: {exc}"
        return out
    project: dict[str, Any] = data["project"] if isinstance(data.get("project"), dict) else {}
    poetry = data.get("tool", {}).get("poetry", {}) if isinstance(data.get("tool"), dict) else {}
    poetry = poetry if isinstance(poetry, dict) else {}
    out["installable"] = bool("build-system" in data or project.get("name") or poetry.get("name"))
    out["name"] = project.get("name") or poetry.get("name")
    out["requires_python"] = project.get("requires-python")
    deps = project.get("dependencies", [])
    out["dependencies"] += [str(d) for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
    optional = project.get("optional-dependencies")
    for extra, items in (optional if isinstance(optional, dict) else {}).items():
        if isinstance(items, list):
            out["optional"].setdefault(str(extra), []).extend(str(i) for i in items if isinstance(i, str))
    # Poetry
    base = path.parent
    optional_by_name: dict[str, str] = {}
    tables: list[Any] = [poetry.get("dependencies", {})]
    groups = poetry.get("group", {}) if isinstance(poetry.get("group"), dict) else {}
    for group in groups.values():
        if isinstance(group, dict) and not group.get("optional", False):
            tables.append(group.get("dependencies", {}))
    for table in tables:
        if not isinstance(table, dict):
            continue
        for name, value in table.items():
            if name.lower() == "python":
                if isinstance(value, str):
                    out["requires_python"] = out["requires_python"] or _poetry_constraint(value)
                continue
            requirement, optional, _ = _poetry_requirement(str(name), value, base)
            if requirement is None:
                continue
            if optional:
                optional_by_name[canonical(name)] = requirement
            else:
                out["dependencies"].append(requirement)
    for extra, names in (poetry.get("extras") or {}).items():
        if isinstance(names, list):
            chosen = [optional_by_name[canonical(n)] for n in names if canonical(str(n)) in optional_by_name]
            out["optional"].setdefault(str(extra), []).extend(chosen)
    return out


# ---- setup.py and setup.cfg


class _SetupReader(ast.NodeVisitor):
    """Finds the ``setup(...)`` call of a setup.py (its extension modules are resenv's build
    reader's business: ``buildinfo.setup_py_modules``)."""

    def __init__(self) -> None:
        self.setup_call: ast.Call | None = None

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node.func, ast.Attribute) else None)
        if name == "setup" and self.setup_call is None:
            self.setup_call = node
        self.generic_visit(node)


def _literal(node: ast.AST | None, constants: dict[str, ast.AST], base: Path, depth: int = 0) -> Any:
    """A literal value, following module-level names, ``+`` of lists, and requirement-file reads."""
    if node is None or depth > 8:
        raise ValueError("not a literal")
    if isinstance(node, ast.Name) and node.id in constants:
        return _literal(constants[node.id], constants, base, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal(node.left, constants, base, depth + 1) + _literal(node.right, constants, base, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, constants, base, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k, constants, base, depth + 1): _literal(v, constants, base, depth + 1)
                for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    # open("requirements.txt").read().splitlines() and friends: read that file as requirements
    names = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.endswith(".txt")]
    if names:
        reqs = RequirementSet()
        for name in names:
            read_requirements(base / name, reqs)
        return list(reqs.requirements)
    raise ValueError("not a literal")


def read_setup_py(path: Path) -> dict[str, Any]:
    """``install_requires``, ``extras_require``, extension module names and ``name`` of a setup.py,
    read with :mod:`ast` only (never executed). ``error`` says what could not be read."""
    out: dict[str, Any] = {"name": None, "install_requires": [], "extras_require": {}, "extensions": [],
                           "has_ext_modules": False, "python_requires": None, "error": None}
    try:
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError, OSError) as exc:
        out["error"] = f"setup.py unparsable: {exc}"
        return out
    constants: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            constants[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            constants[stmt.target.id] = stmt.value
    reader = _SetupReader()
    reader.visit(tree)
    out["extensions"] = sorted({module.name for module in buildinfo.setup_py_modules(source, path=path.name)})
    call = reader.setup_call
    if call is None:
        out["error"] = "setup.py: no setup() call found"
        return out
    problems = []
    for kw in call.keywords:
        if kw.arg is None:
            problems.append("**kwargs")
            continue
        if kw.arg == "ext_modules":
            out["has_ext_modules"] = True
            continue
        if kw.arg not in ("install_requires", "extras_require", "name", "python_requires"):
            continue
        try:
            value = _literal(kw.value, constants, path.parent)
        except ValueError:
            problems.append(kw.arg)
            continue
        if kw.arg == "install_requires":
            value = [value] if isinstance(value, str) else value
            out["install_requires"] = [str(v) for v in value if isinstance(v, str)]
        elif kw.arg == "extras_require" and isinstance(value, dict):
            out["extras_require"] = {
                str(k): ([v] if isinstance(v, str) else [str(i) for i in v if isinstance(i, str)])
                for k, v in value.items() if isinstance(v, (str, list, tuple))
            }
        elif kw.arg == "name" and isinstance(value, str):
            out["name"] = value
        elif kw.arg == "python_requires" and isinstance(value, str):
            out["python_requires"] = value
    out["has_ext_modules"] = out["has_ext_modules"] or bool(out["extensions"])
    if problems:
        out["error"] = "setup.py: not literal, not read: " + ", ".join(problems)
    return out


def _cfg_list(value: str) -> list[str]:
    return [line.strip() for line in re.split(r"[\n;]" if "\n" in value else r"\n", value)
            if line.strip() and not line.strip().startswith("#")]


def read_setup_cfg(path: Path) -> dict[str, Any]:
    """``[options] install_requires`` and ``[options.extras_require]`` of a setup.cfg."""
    out: dict[str, Any] = {"name": None, "install_requires": [], "extras_require": {}, "error": None}
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(errors="replace"))
    except (configparser.Error, OSError) as exc:
        out["error"] = f"setup.cfg unreadable: {exc}"
        return out
    if parser.has_option("metadata", "name"):
        out["name"] = parser.get("metadata", "name").strip()
    if parser.has_option("options", "install_requires"):
        out["install_requires"] = [line for line in parser.get("options", "install_requires").splitlines()
                                   if line.strip() and not line.strip().startswith("#")]
        out["install_requires"] = [line.strip() for line in out["install_requires"]]
    if parser.has_section("options.extras_require"):
        for extra, value in parser.items("options.extras_require"):
            out["extras_require"][extra] = [line.strip() for line in value.splitlines()
                                            if line.strip() and not line.strip().startswith("#")]
    return out


# ---- environment.yml


def read_environment_yml(path: Path) -> dict[str, Any]:
    """The ``pip:`` requirements and the conda ``python`` version of an environment.yml.

    A small YAML subset: block lists under a top-level ``dependencies:`` key, and the block list
    under its ``- pip:`` item. Flow lists (``[a, b]``), anchors and multi-line scalars are not
    read (said in ``error``). Conda package names are not pip names, so they are not installed.
    """
    out: dict[str, Any] = {"pip": [], "conda": [], "python": None, "error": None}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        out["error"] = str(exc)
        return out
    in_deps = False
    pip_indent: int | None = None
    for raw in lines:
        text = re.sub(r"\s+#.*$", "", raw.rstrip())
        if not text.strip() or text.strip().startswith("#"):
            continue
        indent = len(text) - len(text.lstrip())
        stripped = text.strip()
        if indent == 0:
            in_deps = stripped.startswith("dependencies:")
            pip_indent = None
            if in_deps and stripped != "dependencies:":
                out["error"] = "dependencies: flow style not read"
                in_deps = False
            continue
        if not in_deps:
            continue
        if pip_indent is not None and indent > pip_indent and stripped.startswith("- "):
            out["pip"].append(stripped[2:].strip().strip("'\""))
            continue
        pip_indent = None
        if stripped.startswith("- "):
            item = stripped[2:].strip().strip("'\"")
            if re.match(r"^pip\s*:\s*$", item):
                pip_indent = indent
                continue
            if item.startswith("pip:"):
                out["error"] = "pip: flow style not read"
                continue
            out["conda"].append(item)
            match = re.match(r"^python\s*(?:[=<>!~]=?)\s*([0-9][0-9.*]*)", item)
            if match:
                out["python"] = match.group(1).rstrip(".*")
    return out


def read_python_version(root: Path) -> str | None:
    path = root / ".python-version"
    if not path.is_file():
        return None
    for line in path.read_text(errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return line
    return None
