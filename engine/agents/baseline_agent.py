#!/usr/bin/env python3
"""resenv's built-in baseline agent: deterministic, rule-based, no LLM, and honest.

ONE stdlib-only script (Python >= 3.11, for tomllib) that builds a Python environment for a repo
and reports only what it measured; the modules it loads are the judges' own, stdlib-only, staged
beside it as one package ``resenv_shared``: the build-configuration reader (``probes/buildinfo.py``),
the failure classifier (``probes/classifier.py``) and the rule for the repo's own modules
(``probes/localroots.py``, the census's). The
`baseline` adapter (`baseline.py` beside this file) runs it inside the job's sandbox, so the
sandbox's timeout, pause and kill reach it and every child::

    python baseline_agent.py --repo REPO --env ENV --report REPORT [--python BASE]
                             [--offline] [--installer auto|uv|pip] [--budget-s SECONDS] [--uv PATH]

Steps
-----
1. **Metadata, statically** (repo code is never executed to learn dependencies): root
   ``requirements*.txt`` (or ``requirements/*.txt`` when the root has none) minus files named for
   docs/lint/dev/test/CI, with ``-r`` includes and ``-c`` constraints followed, ``--hash`` stripped,
   index options (``--index-url``, ``--extra-index-url``, ``-f``, ``--pre``, ``--trusted-host``)
   passed on (dropped offline), ``-e <local path>`` installed as a local project and other options
   ignored; ``pyproject.toml`` (PEP 621 ``dependencies`` and the ``optional-dependencies`` groups
   whose packages the code imports; Poetry ``[tool.poetry.dependencies]`` (caret/tilde ranges
   converted), its non-optional groups, and its extras by the same import rule); ``setup.py``
   (``install_requires`` / ``extras_require`` literals read with :mod:`ast`, simple module-level
   constants followed, ``open("requirements.txt")`` idioms read as that file; its extension modules
   as resenv's build reader declares them, the same names the classifier judges by);
   ``setup.cfg``; ``environment.yml`` (its ``pip:`` section only: conda package names are not pip
   names; a small YAML subset is read, block lists only); ``.python-version``.
2. **Environment**: ``{env}`` is created with ``uv venv`` (installer uv) or ``python -m venv``
   (installer pip) from the base interpreter. ``installer: auto`` picks uv when it is found and no
   pip-only package source (pip config file, ``PIP_INDEX_URL``/``PIP_FIND_LINKS``...) is in effect,
   since uv would not see those sources; else pip. Offline, the env also sees the base
   interpreter's site-packages (a ``.pth`` that calls ``site.addsitedir``), and installs use
   ``--no-index`` (local wheels from find-links only) with no build isolation.

   **Resolution.** The declared requirements, the chosen extras' requirements, ``-e`` local projects
   and the repo itself (``-e .``, when it is a package: ``setup.py``, or ``pyproject.toml`` with
   ``[build-system]``/``[project]``/``[tool.poetry]``) go into ONE installer call, so one resolution
   satisfies every declared pin together. A package whose build fails here (a CUDA extension whose
   build needs torch, an audio library needing system headers) is asked for as a wheel only
   (``--only-binary`` / ``--no-build-package``) and everything resolved again in one call; a declared
   requirement with no release that has a wheel is dropped, reported, and the rest resolved again;
   so is, when the resolver finds the declared requirements in conflict, the one declared last among
   those its reason names (the earlier ones keep their pins). Then the import scan (AST, absolute imports; stdlib,
   repo-own modules, ``TYPE_CHECKING`` blocks and imports guarded by ``try/except ImportError`` are
   skipped) finds third-party modules the env still cannot find and maps them to distributions (the
   table below, then the env's and the base's ``importlib.metadata.packages_distributions()``, then
   the import name itself); a distribution the repo declares is never guessed again without its
   declared version. The guesses go into one more installer call with EVERY installed distribution
   pinned as a constraint (``-c``), so a guess can add packages but never downgrade, upgrade or
   replace what the declared resolution chose; where they cannot all join, each is tried alone against
   the same constraints and one that cannot join is dropped and reported as a conflict, with the
   resolver's own reason. When the declared set cannot be resolved at all it is installed one
   requirement at a time, each constrained by what is installed, and each failure is reported.
   Declared C extensions that still do not import get ``python setup.py build_ext --inplace``.
3. **Verify** with the new interpreter: the scanned imports are looked up again (those still missing
   are failures, never "success"); ``pip check`` (``uv pip check``) checks that every installed
   distribution's requirements are met; the repo's top-level packages and declared extension
   modules are imported (from the repo dir, as its entrypoints run), and the first of torch / jax /
   tensorflow that imports (the order the C2 probe uses). Every failure is categorised by resenv's
   own classifier (staged beside this script), as the judges would. ``{report}`` is then written
   from measured values only: ``python_path``, ``python_version``, ``framework`` {name, version} when one imports,
   ``cuda_available`` / ``gpu_count`` only for torch (asked with the GPUs this job sees), else null;
   ``ddp_expected_ok`` is always null (DDP is not tested); ``packages`` as the env lists them;
   ``notes`` says what was verified (failed steps, imports still missing, guesses not installed, the
   pip check) and that no entrypoint was run; ``baseline`` holds the same facts as data
   (``failures``, ``imports_missing``, ``conflicts``, ``guessed``, ``pip_check``, ``steps``). A
   first report is written as soon as the env exists, so a budget kill still leaves an honest one.
4. **Events**: one JSON object per stdout line (resenv's jsonl transcript schema):

   * ``{"type": "message", "step", "text"}`` — what the agent is doing or found;
   * ``{"type": "tool_call", "id", "name": "shell", "step", "command": [argv], "cwd", "timeout_s"}``;
   * ``{"type": "output", "id", "text"}`` — one line of that command's merged stdout/stderr
     (at most ``STREAM_LINES`` per command; the rest is counted in ``tool_result``);
   * ``{"type": "tool_result", "id", "exit_code", "seconds", "timed_out", "output_tail",
     "lines_dropped"}`` (``exit_code`` null when the command could not start or was killed);
   * ``{"type": "error", "step", "category", "message"}`` — a failed step; ``category`` is from
     resenv's classifier vocabulary (``download_failed``, ``offline_miss``, ``deps_missing``,
     ``native_extension``, ``timeout``, ``runtime``, ``infra``) or ``budget``.
5. **Budget**: ``--budget-s`` is the agent's wall-clock budget; installs stop when fewer than a
   reserve's seconds are left (kept for verification and the report). pip runs with
   ``--retries 1 --timeout 15`` (uv: ``UV_HTTP_TIMEOUT=15``, ``UV_HTTP_RETRIES=1``); after one network
   failure no further download is attempted, so nothing hangs.

Exit status: 0 every step succeeded, every scanned import resolves and pip check passed; 1 the env
and report exist but something failed; 2 no env.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tokenize
from pathlib import Path
from typing import Any, Iterable

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11: pyproject.toml is then skipped, said so
    tomllib = None  # type: ignore[assignment]

SHARED_STAGED = "resenv_shared"
"""The package name under which the judges' stdlib-only modules this script shares are staged beside
it: the build reader (``buildinfo``: the extensions it builds are the ones the classifier calls
declared), the failure classifier (``classifier``: its categories are the ones the probes give) and
the rule for the repo's own modules (``localroots``: the modules it never installs are the ones the
census counts as the repo's)."""
SHARED_MODULES = ("buildinfo", "classifier", "localroots")


def _load_shared() -> tuple[Any, Any, Any]:
    """The shared modules. Imported as part of resenv when this file is (the engine, tests); run as
    a script, they are loaded as one package from beside the script (where the adapter stages them)
    or from resenv's own source tree (``probes/``)."""
    import importlib
    import importlib.util
    if __package__:
        return tuple(importlib.import_module(f"...probes.{name}", __package__) for name in SHARED_MODULES)
    here = Path(__file__).resolve().parent
    for candidate in (here / SHARED_STAGED, here.parent.parent / "probes"):
        if all((candidate / f"{name}.py").is_file() for name in SHARED_MODULES):
            spec = importlib.util.spec_from_file_location(
                SHARED_STAGED, candidate / "__init__.py", submodule_search_locations=[str(candidate)])
            assert spec is not None and spec.loader is not None
            package = importlib.util.module_from_spec(spec)
            sys.modules[SHARED_STAGED] = package  # its modules import each other relatively
            spec.loader.exec_module(package)
            return tuple(importlib.import_module(f"{SHARED_STAGED}.{name}") for name in SHARED_MODULES)
    raise ImportError(f"{SHARED_STAGED}/ is not beside {Path(__file__).name}: stage both")


buildinfo, classifier, localroots = _load_shared()

# --------------------------------------------------------------------------------------------------
# constants

STREAM_LINES = 400
TAIL_CHARS = 2000
NET_TIMEOUT_S = 15
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", "node_modules", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "site-packages", ".venv", "venv", ".eggs",
    "build", "dist",
})
# requirements files named for these are not what the code needs to run
AUX_REQUIREMENTS = re.compile(r"(^|[-_.])(docs?|lint|style|format|dev|devel|tests?|ci|typing|mypy)([-_.]|$)")
VERIFY_SKIP_PACKAGES = frozenset({"test", "tests", "testing", "docs", "doc", "examples", "example",
                                  "benchmarks", "scripts"})
FRAMEWORKS = ("torch", "jax", "tensorflow")
STDLIB_EXTRA = frozenset({"__future__", "__main__"})

# import name -> distribution name (None: not installable from a package index by that name)
IMPORT_TO_DIST: dict[str, str | None] = {
    "cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image", "yaml": "PyYAML",
    "PIL": "Pillow", "bs4": "beautifulsoup4", "attr": "attrs", "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex", "google.protobuf": "protobuf", "dateutil": "python-dateutil",
    "dotenv": "python-dotenv", "jwt": "PyJWT", "serial": "pyserial", "usb": "pyusb", "zmq": "pyzmq",
    "git": "GitPython", "github": "PyGithub", "nacl": "PyNaCl", "OpenSSL": "pyOpenSSL",
    "Bio": "biopython", "OpenGL": "PyOpenGL", "fitz": "PyMuPDF", "docx": "python-docx",
    "pptx": "python-pptx", "magic": "python-magic", "MySQLdb": "mysqlclient",
    "psycopg2": "psycopg2-binary", "Levenshtein": "levenshtein", "dns": "dnspython",
    "faiss": "faiss-cpu", "grpc": "grpcio", "pkg_resources": "setuptools", "_pytest": "pytest",
    "IPython": "ipython", "mpl_toolkits": "matplotlib", "haiku": "dm-haiku", "tree": "dm-tree",
    "sonnet": "dm-sonnet", "absl": "absl-py", "hydra": "hydra-core", "websocket": "websocket-client",
    "socks": "PySocks", "multipart": "python-multipart", "osgeo": "GDAL", "ruamel": "ruamel.yaml",
    "sentence_transformers": "sentence-transformers", "pytorch_lightning": "pytorch-lightning",
    "torch_geometric": "torch-geometric", "dm_control": "dm-control", "jose": "python-jose",
    "slugify": "python-slugify", "Xlib": "python-xlib", "telegram": "python-telegram-bot",
    "igraph": "igraph", "community": "python-louvain", "sklearn_crfsuite": "sklearn-crfsuite",
    "gflags": "python-gflags", "jsonpatch": "jsonpatch", "markdown": "Markdown", "jinja2": "Jinja2",
    "soundfile": "soundfile", "tensorflow_datasets": "tensorflow-datasets",
    "tensorflow_hub": "tensorflow-hub", "tf_keras": "tf-keras", "wx": "wxPython",
    "gi": "PyGObject", "cairo": "pycairo", "lxml": "lxml", "distutils": "setuptools",
    "paddle": "paddlepaddle", "Image": None,
    # not on a package index under a usable name, or needs a platform/CUDA-specific build
    "apex": None, "detectron2": None, "win32api": None, "win32con": None, "winreg": None,
    "_winapi": None, "msvcrt": None, "cupy": None, "tensorrt_llm": None,
}
# distribution (canonical) -> import names, for choosing extras before anything is installed
DIST_TO_IMPORTS_EXTRA: dict[str, tuple[str, ...]] = {
    "pytorch-lightning": ("pytorch_lightning", "lightning"), "tensorflow-cpu": ("tensorflow",),
    "tensorflow-gpu": ("tensorflow",), "opencv-python-headless": ("cv2",),
    "opencv-contrib-python": ("cv2",), "jax": ("jax",), "jaxlib": ("jaxlib", "jax"),
    "scikit-learn": ("sklearn",), "pillow-simd": ("PIL",), "protobuf": ("google",),
}

NETWORK_SIGNS = (
    "Failed to establish a new connection", "Temporary failure in name resolution",
    "Name or service not known", "Max retries exceeded", "ReadTimeoutError", "ConnectTimeoutError",
    "Connection refused", "Network is unreachable", "No route to host", "ConnectionResetError",
    "Could not fetch URL", "SSLError", "ProxyError", "Read timed out", "error sending request",
    "dns error", "operation timed out", "Failed to fetch", "Could not connect",
    "Connection reset by peer", "connect timeout",
)
# --------------------------------------------------------------------------------------------------
# events


class Events:
    """Writes resenv's jsonl events on stdout; thread-safe (command output is read by a thread)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.lock = threading.Lock()
        self.calls = 0

    def emit(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, ensure_ascii=False, default=str)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def message(self, step: str, text: str, **extra: Any) -> None:
        self.emit({"type": "message", "step": step, "text": text, **extra})

    def error(self, step: str, category: str, message: str, **extra: Any) -> None:
        self.emit({"type": "error", "step": step, "category": category, "message": message, **extra})

    def next_id(self) -> str:
        with self.lock:
            self.calls += 1
            return f"c{self.calls}"


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


def uv_options(options: list[str]) -> list[str]:
    """pip's index options from requirements files, spelled for `uv pip install`."""
    out, i = [], 0
    while i < len(options):
        flag = options[i]
        if flag == "--pre":
            out += ["--prerelease", "allow"]
            i += 1
            continue
        value = options[i + 1] if i + 1 < len(options) else ""
        out += ["--allow-insecure-host" if flag == "--trusted-host" else flag, value]
        i += 2
    return out


def network_failed(output: str) -> bool:
    """Whether a command's output shows the network itself failing (not a package that is absent):
    after that no further download is attempted, so nothing hangs."""
    return any(sign in output for sign in NETWORK_SIGNS)


def index_unreachable(output: str) -> bool:
    """Whether the installer itself could not reach the package index: a network failure that is not
    inside one package's build (a Rust build backend fetching its crates, say, fails that package
    only; the index is still there for everything else)."""
    if not network_failed(output):
        return False
    return not any(sign in output for sign in (*_BUILD_STEP_FAILED, "Failed building wheel", "Failed to build",
                                               "error: subprocess-exited-with-error"))


def failure_category(output: str, *, exit_code: int | None, timed_out: bool = False, offline: bool = False) -> str:
    """The category of a failed command, by resenv's own classifier (the judges' vocabulary and rules).
    Offline, a package the local sources lack is not a download that failed: nothing was downloaded,
    so the classifier's ``download_failed`` for "no matching distribution" reads ``offline_miss``."""
    category = classifier.classify(output, returncode=exit_code, timed_out=timed_out).category
    if offline and category == "download_failed" and not network_failed(output):
        return "offline_miss"
    return category


def resolver_reason(output: str, evidence: str) -> str:
    """Why a resolution failed, in the resolver's own words: pip's "The conflict is caused by:" lines,
    or uv's "Because ..." sentence; else the classifier's evidence line."""
    lines = [line.strip() for line in output.splitlines()]
    if "The conflict is caused by:" in lines:
        start = lines.index("The conflict is caused by:") + 1
        causes = []
        for line in lines[start:start + 8]:
            if not line:
                break
            causes.append(line)
        if causes:
            return "; ".join(causes)
    for line in lines:
        cleaned = line.lstrip("╰─▶ ").strip()
        if cleaned.startswith("Because "):
            return cleaned
    return evidence


_BUILD_FAILED = re.compile(
    r"Failed building wheel for (?P<a>[A-Za-z0-9][\w.-]*)"
    r"|Failed to build (?:installable wheels for some pyproject\.toml based projects \((?P<b>[^)]+)\)"
    r"|`(?P<c>[^`]+)`|(?P<d>[A-Za-z0-9][\w.-]*))")
_BUILD_STEP_FAILED = ("Getting requirements to build wheel did not run successfully",
                      "Getting requirements to build editable did not run successfully",
                      "Encountered error while generating package metadata",
                      "Preparing metadata (pyproject.toml) did not run successfully",
                      "python setup.py egg_info did not run successfully", "metadata-generation-failed")
_COLLECTING = re.compile(r"^\s*(?:Collecting (?P<name>[A-Za-z0-9][\w.-]*)"
                         r"|(?:Processing|Downloading) (?:\S*/)?(?P<file>[A-Za-z0-9][\w.]*?)-\d"
                         r"|(?P<local>Obtaining |Processing (?:\./|/)\S*?(?<!\.gz)(?<!\.whl)(?<!\.zip)$))", re.MULTILINE)


def unbuildable_package(output: str) -> str | None:
    """The distribution whose build failed during an install (pip's "Failed building wheel for X" /
    "Failed to build X", uv's "Failed to build `X==1.0`", or, for a failed metadata step, the last
    package pip was collecting, processing or downloading before it), so the rest can be resolved
    again without it."""
    for match in reversed(list(_BUILD_FAILED.finditer(output))):
        name = next(group for group in match.groups() if group)
        name = re.split(r"[\s=<>!~@\[;,]", name.strip(), maxsplit=1)[0]
        if name:
            return name
    positions = [output.find(sign) for sign in _BUILD_STEP_FAILED if sign in output]
    if positions:
        before = list(_COLLECTING.finditer(output[:min(positions)]))
        if before and not before[-1].group("local"):  # a local project's own build: nothing to exclude
            return before[-1].group("name") or before[-1].group("file")
    return None


def no_matching_distribution(output: str) -> str | None:
    """The distribution of pip's "No matching distribution found for X" (uv: "no versions of X")."""
    match = re.search(r"No matching distribution found for (?P<name>[A-Za-z0-9][\w.-]*)"
                      r"|no versions of (?P<uv>[A-Za-z0-9][\w.-]*)", output)
    return (match.group("name") or match.group("uv")) if match else None


_CONFLICT_NAMES = re.compile(r"(?:^|;\s*|\n\s*)(?:The user requested (?:\(constraint\) )?)?"
                             r"(?P<name>[A-Za-z0-9][\w.-]*)(?=[\s<>=!~\[;]|$)")


def conflicting_requirements(output: str, requirements: list[str]) -> list[str]:
    """The declared requirements a failed resolution names as the conflict, in declared order: from
    pip's "The conflict is caused by:" lines ("a 1.0 depends on x==1; b 2.0 depends on x==2", "The user
    requested a==1") or uv's "Because ..." sentence; empty when it is no resolution conflict."""
    if "ResolutionImpossible" not in output and "conflicting dependencies" not in output \
            and "No solution found" not in output:
        return []
    reason = resolver_reason(output, "")
    if not reason:
        return []
    if reason.startswith("Because "):
        mentioned = {canonical(m) for m in re.findall(r"(?:Because|and|depends on|you require) ([A-Za-z0-9][\w.-]*)", reason)}
    else:
        mentioned = {canonical(m.group("name")) for m in _CONFLICT_NAMES.finditer(reason)}
    return [r for r in requirements if (n := requirement_name(r)) and canonical(n) in mentioned]


def requested_by(output: str, name: str) -> str | None:
    """The package that asked for `name`, from pip's "(from parent)" notes ("Could not find a version
    that satisfies the requirement av==10.* (from faster-whisper)", "Collecting av (from x==1.0)")."""
    wanted = canonical(name)
    for match in re.finditer(r"(?:requirement|Collecting) (?P<name>[A-Za-z0-9][\w.-]*)[^\n(]*\(from (?P<parent>"
                             r"[A-Za-z0-9][\w.-]*)", output):
        if canonical(match.group("name")) == wanted and canonical(match.group("parent")) != wanted:
            return match.group("parent")
    return None


def pinned_elsewhere(output: str, constraints: Iterable[str]) -> str | None:
    """For pip's "No matching distribution found for X" under constraints files: the ``X==version``
    line of those files that made X unavailable (the package exists; what is installed excludes it)."""
    name = no_matching_distribution(output)
    if not name:
        return None
    wanted = canonical(name)
    for path in constraints:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name = requirement_name(line)
            if name and canonical(name) == wanted:
                return line.strip()
    return None


def torch_companions(versions: dict[str, str]) -> dict[str, str]:
    """Companion releases of torch that an installed env has at the wrong version: distribution ->
    the release series it must have (``{"torchaudio": "2.3.*"}``). torchaudio and torchvision are
    built against one torch release each, but newer ones no longer pin it in their metadata, so a
    resolver happily pairs torch 2.3 with torchaudio 2.11 (pip check passes; the import dies on an
    undefined symbol). The pairing is the projects' published one: torch 2.N with torchaudio 2.N and
    torchvision 0.(N+15); torch 1.N (N >= 8) with torchaudio 0.N and torchvision 0.(N+1)."""
    found = {canonical(name): version for name, version in versions.items()}
    match = re.match(r"^(\d+)\.(\d+)", found.get("torch", ""))
    if not match:
        return {}
    major, minor = int(match.group(1)), int(match.group(2))
    if major == 2:
        wanted = {"torchaudio": f"2.{minor}", "torchvision": f"0.{minor + 15}"}
    elif major == 1 and minor >= 8:
        wanted = {"torchaudio": f"0.{minor}", "torchvision": f"0.{minor + 1}"}
    else:
        return {}
    out = {}
    for dist, series in wanted.items():
        have = found.get(dist)
        if have and not re.match(rf"^{re.escape(series)}(\.|$|\+)", have):
            out[dist] = f"{series}.*"
    return out


def missing_import_category(module: str) -> str:
    """The category the classifier gives an import that fails for want of its module."""
    return classifier.classify(f"ModuleNotFoundError: No module named '{module}'", returncode=1).category


# --------------------------------------------------------------------------------------------------
# running commands


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
            ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill a command and everything it started (they stay in the sandbox's process group, so the
    sandbox can still pause and kill them; here only this command's own tree is ended)."""
    victims = _descendants(proc.pid) + [proc.pid]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Result:
    def __init__(self, exit_code: int | None, seconds: float, output: str, timed_out: bool,
                 skipped: bool = False) -> None:
        self.exit_code, self.seconds, self.output = exit_code, seconds, output
        self.timed_out, self.skipped = timed_out, skipped

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Runner:
    """Runs commands with events for each, under the budget."""

    def __init__(self, events: Events, budget_s: float | None, reserve_s: float | None = None) -> None:
        self.events = events
        self.start = time.monotonic()
        self.deadline = None if budget_s is None else self.start + budget_s
        if reserve_s is None and budget_s is not None:
            reserve_s = min(90.0, max(10.0, 0.15 * budget_s))
        self.reserve = reserve_s or 0.0

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def install_time_left(self) -> float | None:
        """Seconds an install step may still take (the reserve is kept for verify + report)."""
        left = self.remaining()
        return None if left is None else left - self.reserve

    def run(self, step: str, argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, install: bool = False, display: list[str] | None = None,
            quiet: bool = False) -> Result:
        """Run `argv` (shown in the events as `display`, if given). A `quiet` command (the agent's
        own measurement scripts, whose output is one JSON line) streams no output events."""
        limit = timeout
        if self.deadline is not None:
            left = (self.install_time_left() if install else self.remaining()) or 0.0
            left = left if install else left - 2
            if left < 5:
                self.events.error(step, "budget", f"skipped: {max(0, int(left))} s of budget left for this step",
                                  command=argv)
                return Result(None, 0.0, "", False, skipped=True)
            limit = left if limit is None else min(limit, left)
        call_id = self.events.next_id()
        self.events.emit({"type": "tool_call", "id": call_id, "name": "shell", "step": step,
                          "command": display or argv,
                          "cwd": str(cwd) if cwd else os.getcwd(),
                          "timeout_s": None if limit is None else round(limit, 1)})
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
        except OSError as exc:
            message = f"cannot start {argv[0]}: {exc.strerror or exc}"
            self.events.emit({"type": "tool_result", "id": call_id, "exit_code": None, "seconds": 0.0,
                              "timed_out": False, "output_tail": message, "lines_dropped": 0})
            return Result(None, 0.0, message, False)
        tail: list[str] = []
        size = [0, 0]  # chars in tail, lines dropped from the stream

        def pump() -> None:
            assert proc.stdout is not None
            streamed = 0
            for raw in iter(proc.stdout.readline, b""):
                text = raw.decode(errors="replace").rstrip("\r\n")
                if quiet:
                    pass
                elif streamed < STREAM_LINES:
                    self.events.emit({"type": "output", "id": call_id, "text": text[:4000]})
                    streamed += 1
                else:
                    size[1] += 1
                tail.append(text)
                size[0] += len(text) + 1
                while size[0] > 64 * 1024 and len(tail) > 1:
                    size[0] -= len(tail.pop(0)) + 1

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc)
            proc.wait()
        reader.join(timeout=10)
        seconds = round(time.monotonic() - started, 3)
        output = "\n".join(tail)
        code = None if timed_out else proc.returncode
        shown = output[-TAIL_CHARS:] if not quiet or code != 0 else f"({len(output)} characters of JSON)"
        self.events.emit({"type": "tool_result", "id": call_id, "exit_code": code, "seconds": seconds,
                          "timed_out": timed_out, "output_tail": shown, "lines_dropped": size[1]})
        return Result(code, seconds, output, timed_out)


# --------------------------------------------------------------------------------------------------
# the agent


ENV_SNIPPET = r"""
import json, sys, importlib.util, importlib.metadata as md
names = json.loads(sys.argv[1])
found = {}
for name in names:
    try:
        found[name] = importlib.util.find_spec(name) is not None
    except Exception:
        found[name] = False
try:
    mapping = {k: sorted(set(v)) for k, v in md.packages_distributions().items()}
except Exception:
    mapping = {}
versions, direct = {}, []
for dist in md.distributions():
    try:
        name = dist.metadata["Name"]
        versions[name] = dist.version
        if dist.read_text("direct_url.json"):
            direct.append(name)
    except Exception:
        pass
print(json.dumps({"found": found, "map": mapping, "versions": versions, "direct": sorted(direct),
                  "stdlib": sorted(getattr(sys, "stdlib_module_names", ())),
                  "version": "%d.%d.%d" % sys.version_info[:3]}))
"""

VERIFY_SNIPPET = r"""
import importlib, importlib.util, importlib.metadata as md, json, platform, sys, time, traceback
names = json.loads(sys.argv[1])
out = {"python_version": platform.python_version(), "executable": sys.executable, "imports": {},
       "framework": None, "packages": {}}
for name in names:
    started = time.time()
    try:
        importlib.import_module(name)
        out["imports"][name] = {"ok": True, "seconds": round(time.time() - started, 3)}
    except BaseException as exc:
        out["imports"][name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
for fw in ("torch", "jax", "tensorflow"):
    try:
        if importlib.util.find_spec(fw) is None:
            continue
    except Exception:
        continue
    try:
        module = importlib.import_module(fw)
    except ImportError as exc:
        out.setdefault("framework_errors", {})[fw] = "%s: %s" % (type(exc).__name__, exc)
        continue
    except BaseException as exc:
        out.setdefault("framework_errors", {})[fw] = "%s: %s" % (type(exc).__name__, exc)
        break
    info = {"name": fw, "version": getattr(module, "__version__", None)}
    if fw == "torch":
        try:
            available = bool(module.cuda.is_available())
            info["cuda_available"] = available
            info["gpu_count"] = module.cuda.device_count() if available else 0
        except BaseException as exc:
            info["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    out["framework"] = info
    break
for dist in md.distributions():
    try:
        out["packages"][dist.metadata["Name"]] = dist.version
    except Exception:
        pass
print(json.dumps(out))
"""

PIP_ONLY_SOURCES = ("PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")
UV_SOURCES = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX")


class Agent:
    def __init__(self, args: argparse.Namespace, events: Events) -> None:
        self.args = args
        self.events = events
        self.repo = Path(args.repo).resolve()
        self.env_dir = Path(args.env).absolute()
        self.report_path = Path(args.report).absolute()
        self.base_python = args.python or sys.executable
        self.runner = Runner(events, args.budget_s)
        self.failures: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.conflicts: list[dict[str, Any]] = []  # guessed packages that were not installed, and why
        self.last_output = ""  # the output of the last failed install, for what a fallback needs to know
        self.binary_only: list[str] = []  # distributions whose build failed here: wheels only from then on
        self.guessed: dict[str, str] = {}  # scanned import -> the distribution guessed for it
        self.imports_missing: list[str] = []  # scanned imports the finished env still cannot find
        self.check: dict[str, Any] = {"ok": None, "problems": []}  # pip check of the finished env
        self.network_down = False
        self.installer = "pip"
        self.uv: str | None = None
        self.child_env = dict(os.environ)
        self.child_env.update({
            "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_DEFAULT_TIMEOUT": str(NET_TIMEOUT_S), "PIP_RETRIES": "1",
            "UV_HTTP_TIMEOUT": str(NET_TIMEOUT_S), "UV_HTTP_RETRIES": "1", "UV_NO_PROGRESS": "1",
        })
        self.child_env.pop("VIRTUAL_ENV", None)
        self.child_env.pop("PYTHONPATH", None)
        self.child_env.pop("PYTHONHOME", None)

    # -- helpers ---------------------------------------------------------------------------
    @property
    def env_python(self) -> str:
        return str(self.env_dir / "bin" / "python")

    def fail(self, step: str, category: str, message: str, **extra: Any) -> None:
        self.failures.append({"step": step, "category": category, "message": message[:500], **extra})
        self.events.error(step, category, message, **extra)

    def record(self, step: str, ok: bool, **extra: Any) -> None:
        self.steps.append({"step": step, "ok": ok, **extra})

    def python_json(self, step: str, snippet: str, payload: Any, *, cwd: Path | None = None,
                    python: str | None = None, timeout: float = 120) -> dict[str, Any] | None:
        """Run one of the agent's measurement snippets (`ENV_SNIPPET`, `VERIFY_SNIPPET`); its JSON."""
        label = "<find modules and distributions>" if snippet is ENV_SNIPPET else "<import and measure>"
        flags = ["-I"] if cwd is None else []
        argv = [python or self.env_python, *flags, "-c", snippet, json.dumps(payload)]
        display = [python or self.env_python, *flags, "-c", label, json.dumps(payload)]
        result = self.runner.run(step, argv, cwd=cwd or self.env_dir, env=self.child_env, timeout=timeout,
                                 display=display, quiet=True)
        if not result.ok:
            return None
        for line in reversed(result.output.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    break
        return None

    # -- step 1 ----------------------------------------------------------------------------
    def read_metadata(self) -> dict[str, Any]:
        root = self.repo
        reqs = RequirementSet()
        for path in find_requirement_files(root):
            read_requirements(path, reqs)
        meta: dict[str, Any] = {"reqs": reqs, "project": None, "optional": {}, "installable": False,
                                "extensions": [], "has_ext_modules": False, "name": None,
                                "python_version": read_python_version(root)}
        pyproject = root / "pyproject.toml"
        if pyproject.is_file():
            data = read_pyproject(pyproject)
            reqs.sources.append(str(pyproject))
            if data["error"]:
                reqs.notes.append(data["error"])
            for dep in data["dependencies"]:
                reqs.add(dep)
            meta["optional"].update(data["optional"])
            meta["installable"] = data["installable"]
            meta["name"] = data["name"]
        setup_py = root / "setup.py"
        if setup_py.is_file():
            data = read_setup_py(setup_py)
            reqs.sources.append(str(setup_py))
            if data["error"]:
                reqs.notes.append(data["error"])
            for dep in data["install_requires"]:
                reqs.add(dep)
            for extra, deps in data["extras_require"].items():
                meta["optional"].setdefault(extra, []).extend(deps)
            meta["installable"] = True
            meta["extensions"] = data["extensions"]
            meta["has_ext_modules"] = data["has_ext_modules"]
            meta["name"] = meta["name"] or data["name"]
        setup_cfg = root / "setup.cfg"
        if setup_cfg.is_file():
            data = read_setup_cfg(setup_cfg)
            if data["install_requires"] or data["extras_require"]:
                reqs.sources.append(str(setup_cfg))
            if data["error"]:
                reqs.notes.append(data["error"])
            for dep in data["install_requires"]:
                reqs.add(dep)
            for extra, deps in data["extras_require"].items():
                meta["optional"].setdefault(extra, []).extend(deps)
            meta["name"] = meta["name"] or data["name"]
        for name in ("environment.yml", "environment.yaml"):
            path = root / name
            if path.is_file():
                data = read_environment_yml(path)
                reqs.sources.append(str(path))
                if data["error"]:
                    reqs.notes.append(f"{name}: {data['error']}")
                for dep in data["pip"]:
                    if dep.startswith("-r ") or dep.startswith("--requirement"):
                        read_requirements(root / dep.split(None, 1)[1], reqs)
                    elif not dep.startswith("-"):
                        reqs.add(dep)
                if data["conda"]:
                    reqs.notes.append(f"{name}: conda packages not installed (not pip names): "
                                      + ", ".join(d for d in data["conda"][:20] if not d.startswith("python")))
                meta["python_version"] = meta["python_version"] or data["python"]
                break
        # local "-e ." of the repo itself is the project install
        root_text = str(root)
        for local in list(reqs.local_projects):
            if local.split("[", 1)[0] == root_text:
                reqs.local_projects.remove(local)
                meta["installable"] = True
        self.events.message("metadata", "dependency metadata read", sources=[
            str(Path(s).relative_to(root)) if s.startswith(root_text) else s for s in reqs.sources],
            requirements=reqs.requirements, optional=meta["optional"], constraints=reqs.constraints,
            index_options=reqs.index_options, local_projects=reqs.local_projects,
            installable=meta["installable"], extensions=meta["extensions"],
            python_version=meta["python_version"], notes=reqs.notes)
        return meta

    # -- step 2 ----------------------------------------------------------------------------
    def choose_python(self, wanted: str | None) -> None:
        if not wanted or self.args.python:
            return
        match = re.match(r"^(?:python|cpython-?)?(\d+)\.(\d+)", wanted.strip())
        if not match:
            return
        want = f"{match.group(1)}.{match.group(2)}"
        probe = subprocess.run([self.base_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=60)
        have = probe.stdout.strip()
        if have == want:
            return
        candidate = shutil.which(f"python{want}", path=self.child_env.get("PATH"))
        if candidate:
            self.events.message("env", f"the repo asks for Python {want}; using {candidate} (base has {have})")
            self.base_python = candidate
        else:
            self.events.message("env", f"the repo asks for Python {want}, which is not on PATH; "
                                       f"using the base interpreter's {have}")

    def choose_installer(self) -> None:
        wanted = self.args.installer
        uv = self.args.uv or shutil.which("uv", path=self.child_env.get("PATH"))
        if wanted == "uv" and not uv:
            self.fail("env", "infra", "installer uv asked for but not found; using pip")
            wanted = "pip"
        if wanted == "auto":
            pip_only = [v for v in PIP_ONLY_SOURCES if os.environ.get(v)]
            uv_has = [v for v in UV_SOURCES if os.environ.get(v)]
            if uv and pip_only and not uv_has:
                self.events.message("env", "uv found, but package sources are configured for pip only "
                                           f"({', '.join(pip_only)}): using pip")
                wanted = "pip"
            else:
                wanted = "uv" if uv else "pip"
        self.installer = wanted
        self.uv = uv if wanted == "uv" else None

    def create_env(self) -> bool:
        if self.installer == "uv":
            assert self.uv
            # Seeding pip downloads it: offline, uv installs into the env without pip in it.
            seed = [] if self.args.offline else ["--seed"]
            argv = [self.uv, "venv", *seed, "--python", self.base_python, str(self.env_dir)]
        else:
            argv = [self.base_python, "-m", "venv", str(self.env_dir)]
        if self.env_dir.exists():
            shutil.rmtree(self.env_dir, ignore_errors=True)
        self.env_dir.parent.mkdir(parents=True, exist_ok=True)
        result = self.runner.run("env", argv, env=self.child_env, cwd=self.env_dir.parent, timeout=600)
        ok = result.ok and Path(self.env_python).exists()
        self.record("env", ok, installer=self.installer, base_python=self.base_python)
        if not ok:
            self.fail("env", "budget" if result.skipped else failure_category(
                result.output, exit_code=result.exit_code, timed_out=result.timed_out),
                      f"could not create the environment with {argv[0]}")
            return False
        if self.args.offline:
            self.layer_base_site_packages()
        return True

    def layer_base_site_packages(self) -> None:
        """Offline: let the env see what the base interpreter already has, env-installed first."""
        probe = subprocess.run(
            [self.base_python, "-c", "import json, site, sysconfig; paths = site.getsitepackages() + "
             "[sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]; "
             "print(json.dumps(sorted(set(paths), key=paths.index)))"],
            capture_output=True, text=True, timeout=60, env=self.child_env)
        try:
            paths = [p for p in json.loads(probe.stdout.strip().splitlines()[-1]) if os.path.isdir(p)]
        except (ValueError, IndexError):
            self.fail("env", "infra", "offline: could not list the base interpreter's site-packages")
            return
        purelib = subprocess.run([self.env_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, timeout=60, env=self.child_env).stdout.strip()
        if not purelib:
            self.fail("env", "infra", "offline: could not find the env's site-packages")
            return
        lines = "; ".join(f"site.addsitedir({p!r})" for p in paths)
        (Path(purelib) / "_resenv_base_site.pth").write_text(f"import site; {lines}\n")
        self.events.message("env", "offline: the env also sees the base interpreter's packages", paths=paths)

    def install_argv(self, packages: list[str], *, editables: Iterable[str] = (), options: list[str] | None = None,
                     constraints: Iterable[str] = ()) -> list[str]:
        """One installer call for `packages` and the local projects `editables` together (one resolution)."""
        editables = list(editables)
        if self.installer == "uv":
            assert self.uv
            argv = [self.uv, "pip", "install", "--python", self.env_python]
        else:
            argv = [self.env_python, "-m", "pip", "install", "--retries", "1", "--timeout", str(NET_TIMEOUT_S),
                    "--progress-bar", "off"]
        if self.args.offline:
            argv += ["--offline", "--no-index"] if self.installer == "uv" else ["--no-index"]
            if editables:
                argv.append("--no-build-isolation")
        elif self.installer == "uv":
            argv += uv_options(options or [])
        else:
            argv += options or []
        for constraint in constraints:
            argv += ["-c", constraint]
        for name in self.binary_only:  # releases with a wheel only: their builds failed here
            argv += ["--no-build-package", name] if self.installer == "uv" else [f"--only-binary={name}"]
        for editable in editables:
            argv += ["-e", editable]
        return argv + packages

    def install(self, step: str, packages: list[str], *, editables: Iterable[str] = (),
                meta: dict[str, Any] | None = None, cwd: Path | None = None,
                constraints: Iterable[str] = ()) -> tuple[bool, str | None, str]:
        """One installer call; (ok, failure category or None, the classifier's evidence line).
        A failure is recorded as a step, not yet as the agent's failure: the caller decides whether a
        fallback recovers it."""
        editables = list(editables)
        constraints = list(constraints)
        self.last_output = ""
        shown = packages + [f"-e {e}" for e in editables]
        if not shown:
            return True, None, ""
        if self.network_down and not self.args.offline:
            self.record(step, False, packages=shown, category="download_failed")
            return False, "download_failed", "skipped after an earlier network failure"
        reqs: RequirementSet | None = meta["reqs"] if meta else None
        options = reqs.index_options if reqs else []
        declared_constraints = reqs.constraints if reqs else []
        argv = self.install_argv(packages, editables=editables, options=options,
                                 constraints=[*declared_constraints, *constraints])
        result = self.runner.run(step, argv, cwd=cwd or self.repo, env=self.child_env, install=True)
        if result.ok:
            self.record(step, True, packages=shown)
            return True, None, ""
        if result.skipped:
            self.record(step, False, packages=shown, category="budget")
            return False, "budget", "skipped: budget"
        category = failure_category(result.output, exit_code=result.exit_code, timed_out=result.timed_out,
                                    offline=bool(self.args.offline))
        if index_unreachable(result.output) and not self.args.offline:
            self.network_down = True
        evidence = resolver_reason(result.output, classifier.classify(
            result.output, returncode=result.exit_code, timed_out=result.timed_out).evidence)
        if category == "download_failed" and not self.network_down and (pin := pinned_elsewhere(result.output, constraints)):
            category = "deps_missing"
            evidence = f"{evidence} (the env has {pin}, which this install may not change)"
        self.record(step, False, packages=shown, category=category, exit_code=result.exit_code, evidence=evidence)
        self.last_output = result.output
        return False, category, evidence

    def install_declared(self, meta: dict[str, Any], requirements: list[str], project: str | None) -> None:
        """The repo's declared requirements, its local projects and the repo itself, in ONE installer
        call, so one resolution satisfies every declared pin together. When that fails for a reason other
        than the network: the requirements without the project, then the project with what is installed
        as constraints (its build metadata may need packages the declared set brings); when the
        requirements themselves cannot be resolved together, one at a time, and `pip check` later says
        what does not fit."""
        reqs: RequirementSet = meta["reqs"]
        editables = [*reqs.local_projects, *([project] if project else [])]
        if not requirements and not editables:
            return
        self.events.message("install:declared", "installing the declared requirements"
                            + (" and the repo itself" if project else "") + " in one resolution",
                            requirements=len(requirements), local_projects=reqs.local_projects, project=project)
        requirements = list(requirements)
        ok, category, evidence = self.install("install:declared", requirements, editables=editables, meta=meta)
        for _ in range(12):  # each turn takes one package out of the building: a bounded number of tries
            if ok or self.stopping(category):
                break
            culprit = unbuildable_package(self.last_output)
            clashing = [] if culprit else conflicting_requirements(self.last_output, requirements)
            if clashing:
                victim = clashing[-1]  # the one declared last goes; the earlier ones keep their pins
                requirements.remove(victim)
                self.fail("install:declared", "deps_missing", f"{victim} cannot be installed with the other declared "
                                                              f"requirements: {evidence}")
                self.events.message("install:declared", f"{victim} conflicts with the rest ({evidence}): resolving "
                                                        "the rest again without it, in one call")
                if not requirements and not editables:
                    return
            elif culprit and canonical(culprit) not in {canonical(n) for n in self.binary_only}:
                self.binary_only.append(culprit)
                self.events.message("install:declared", f"{culprit} cannot be built here ({evidence}): resolving "
                                                        "again in one call, with a release that has a wheel")
            else:
                absent = no_matching_distribution(self.last_output)  # a wheel-only package with no wheel
                forced = {canonical(n) for n in self.binary_only}
                declared = {canonical(n): r for r in requirements if (n := requirement_name(r))}
                chain = [absent] if absent and canonical(absent) in forced else []
                while chain and canonical(chain[-1]) not in declared and len(chain) < 6:
                    parent = requested_by(self.last_output, chain[-1])
                    if not parent or parent in chain:
                        break
                    chain.append(parent)
                named = [declared[canonical(chain[-1])]] if chain and canonical(chain[-1]) in declared else []
                if not named:
                    break
                if len(chain) > 1:  # the declared requirement that needs it goes, and says why
                    absent = f"{chain[-1]} (it needs {' -> '.join(chain[-2::-1])})"
                for requirement in named:
                    requirements.remove(requirement)
                    self.fail("install:declared", "native_extension",
                              f"{requirement} could not be built here and has no release with a wheel: {evidence}")
                self.events.message("install:declared", f"{absent} cannot be installed here: resolving the rest "
                                                        "again without it, in one call")
                if not requirements and not editables:
                    return
            ok, category, evidence = self.install("install:declared", requirements, editables=editables, meta=meta)
        if ok:
            return
        if self.stopping(category) or (len(requirements) + len(editables) == 1):
            self.fail("install:declared", category or "runtime", f"declared install failed: {evidence}")
            return
        if requirements and editables:
            self.events.message("install:declared", f"the declared requirements and the repo together failed "
                                                    f"({category}); the requirements alone first")
            ok, category, evidence = self.install("install:requirements", requirements, meta=meta)
        if not ok and requirements:
            self.fail("install:requirements", category or "runtime",
                      f"the declared requirements cannot be installed together: {evidence}")
            if self.stopping(category):
                return
            if len(requirements) > 1:
                self.events.message("install:requirements", "installing them one at a time, each with what is "
                                                            "installed as constraints, so none changes another")
                for requirement in requirements:
                    one_ok, one_category, one_evidence = self.install(
                        "install:requirements", [requirement], meta=meta, constraints=self.installed_constraints())
                    if not one_ok:
                        self.fail("install:requirements", one_category or "runtime",
                                  f"install failed: {requirement}: {one_evidence}")
                    if self.stopping(one_category):
                        return
        for editable in editables:
            one_ok, one_category, one_evidence = self.install(
                "install:project", [], editables=[editable], meta=meta, cwd=self.repo,
                constraints=self.installed_constraints())
            if not one_ok:
                self.fail("install:project", one_category or "runtime",
                          f"install of {editable} failed: {one_evidence}")

    def stopping(self, category: str | None) -> bool:
        """Whether a failure ends the installs: the network is down, the budget is spent, or a command
        ran out of time (another try would too)."""
        return self.network_down or category in ("timeout", "budget")

    def installed_constraints(self, *, free: Iterable[str] = ()) -> list[str]:
        """A constraints file pinning every distribution now in the env at its installed version (local,
        VCS and editable installs, and the `free` ones, left out: an index does not have the former),
        so that a later install can add packages but never downgrade, upgrade or replace one."""
        data = self.env_lookup([])
        direct = {canonical(name) for name in data.get("direct", [])} | {canonical(name) for name in free}
        lines = sorted(f"{name}=={version}" for name, version in data.get("versions", {}).items()
                       if name and version and canonical(name) not in direct)
        path = self.env_dir / ".resenv-baseline" / "installed-constraints.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
        return [str(path)]

    def match_torch_companions(self, meta: dict[str, Any], declared: Iterable[str]) -> None:
        """Put torchaudio / torchvision at the release that matches the installed torch (see
        `torch_companions`), everything else pinned as installed and the repo's own requirement for it
        in the same call: a release the repo's requirement excludes is never installed, and the
        mismatch is reported instead."""
        wrong = torch_companions(self.env_lookup([]).get("versions", {}))
        for dist, series in wrong.items():
            # the repo's own requirement for it goes in too: the installer refuses a series it excludes
            own = [r for r in declared if (name := requirement_name(r)) and canonical(name) == canonical(dist)]
            self.events.message("install:companions", f"{dist} does not match the installed torch: "
                                                      f"installing {dist}=={series}")
            ok, category, evidence = self.install("install:companions", [f"{dist}=={series}", *own], meta=meta,
                                                  constraints=self.installed_constraints(free=[dist]))
            if not ok:
                self.fail("install:companions", category or "runtime",
                          f"{dist}=={series} (to match torch) could not be installed"
                          + (f" with the repo's own {', '.join(own)}" if own else "") + f": {evidence}")

    def install_guesses(self, meta: dict[str, Any], guesses: dict[str, str]) -> None:
        """Distributions guessed for scanned imports that the declared install did not provide, in one
        installer call with everything installed as constraints: a guess may add packages, never change
        one the repo declared (or one those need). Where they cannot all join, each is tried alone
        against the same constraints, and a guess that cannot join is dropped and reported as a
        conflict with the resolver's own reason."""
        if not guesses:
            return
        constraints = self.installed_constraints()
        ok, category, evidence = self.install("install:scanned", list(guesses), meta=meta, constraints=constraints)
        if ok:
            return
        if self.stopping(category) or len(guesses) == 1:
            for dist, module in guesses.items():
                self.drop_guess(dist, module, category or "runtime", evidence)
            return
        self.events.message("install:scanned", f"the {len(guesses)} guessed packages cannot all be added to "
                                               f"what is installed ({category}); trying each alone")
        for dist, module in guesses.items():
            one_ok, one_category, one_evidence = self.install("install:scanned", [dist], meta=meta,
                                                              constraints=self.installed_constraints())
            if not one_ok:
                self.drop_guess(dist, module, one_category or "runtime", one_evidence)
            if self.stopping(one_category):
                rest = list(guesses)[list(guesses).index(dist) + 1:]
                for other in rest:
                    self.drop_guess(other, guesses[other], one_category or "runtime", "skipped: " + one_evidence)
                break

    def drop_guess(self, dist: str, module: str, category: str, reason: str) -> None:
        self.conflicts.append({"package": dist, "for_import": module, "category": category, "reason": reason[:300]})
        self.events.message("install:scanned", f"not installed: {dist} (guessed for import {module}): {reason}",
                            category=category)

    def env_lookup(self, names: list[str], python: str | None = None) -> dict[str, Any]:
        data = self.python_json("scan", ENV_SNIPPET, names, python=python)
        return data or {"found": {}, "map": {}, "versions": {}, "direct": [],
                        "stdlib": sorted(sys.stdlib_module_names), "version": None}

    # -- step 3 ----------------------------------------------------------------------------
    def pip_check(self) -> dict[str, Any]:
        """The installer's own consistency check of the env (``pip check`` / ``uv pip check``): every
        installed distribution's requirements are met by what is installed."""
        if self.installer == "uv":
            assert self.uv
            argv = [self.uv, "pip", "check", "--python", self.env_python]
        else:
            argv = [self.env_python, "-m", "pip", "check"]
        result = self.runner.run("check", argv, cwd=self.env_dir, env=self.child_env, timeout=300)
        if result.skipped or result.timed_out or result.exit_code is None:
            return {"ok": None, "problems": [], "command": argv[:4], "note": "not run to the end"}
        problems = [line.strip() for line in result.output.splitlines()
                    if line.strip() and ("requires" in line or "has requirement" in line or "not installed" in line
                                         or "incompatible" in line or "is not supported" in line)]
        if result.exit_code != 0 and not problems:
            problems = [line.strip() for line in result.output.splitlines() if line.strip()][-5:]
        check = {"ok": result.exit_code == 0, "problems": problems[:50], "command": argv[:4]}
        if not check["ok"]:
            self.fail("check", "deps_missing", f"{' '.join(argv[-2:]) if self.installer == 'uv' else 'pip check'}"
                      f" found {len(problems)} unmet requirement(s): " + "; ".join(problems[:3]))
        return check

    def verify(self, meta: dict[str, Any], own: list[str]) -> dict[str, Any] | None:
        packages = []
        for base in (self.repo, self.repo / "src"):
            if base.is_dir():
                packages += sorted(p.name for p in base.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
                                   and p.name not in VERIFY_SKIP_PACKAGES and p.name.isidentifier())
        packages += [name for name in meta["extensions"] if name not in packages]
        self.events.message("verify", "importing the repo's packages and the frameworks with the new interpreter",
                            modules=packages)
        data = self.python_json("verify", VERIFY_SNIPPET, packages, cwd=self.repo, timeout=300)
        if data is None:
            self.fail("verify", "runtime", "the verification script did not run in the new interpreter")
            return None
        for name, outcome in data.get("imports", {}).items():
            if not outcome.get("ok"):
                error = str(outcome.get("error"))
                category = classifier.classify(error, returncode=1, compiled_modules=meta["extensions"]).category
                self.fail("verify", category, f"import {name} failed: {error}")
        self.record("verify", all(o.get("ok") for o in data.get("imports", {}).values()),
                    imports=data.get("imports"))
        return data

    def verdict(self) -> str:
        """What was verified, in one sentence per fact, failures first; never "succeeded" over a failure."""
        parts = []
        if self.failures:
            parts.append("failed steps: " + "; ".join(f"{f['step']}: {f['category']}" for f in self.failures))
        if self.imports_missing:
            parts.append("imports still missing: " + ", ".join(self.imports_missing))
        if self.conflicts:
            parts.append("guessed packages not installed: "
                         + ", ".join(f"{c['package']} (for {c['for_import']}: {c['category']})" for c in self.conflicts))
        check = self.check.get("ok")
        parts.append("pip check: not run" if check is None else
                     "pip check: passed" if check else f"pip check: {len(self.check['problems'])} unmet requirement(s)")
        if not self.failures and not self.imports_missing:
            parts.insert(0, "every step succeeded and every scanned import resolves")
        return "; ".join(parts)

    def write_report(self, measured: dict[str, Any], final: bool) -> None:
        framework = measured.get("framework")
        report: dict[str, Any] = {
            "python_path": self.env_python,
            "python_version": measured.get("python_version"),
            "framework": None,
            "cuda_available": None,
            "gpu_count": None,
            "ddp_expected_ok": None,
        }
        if framework and framework.get("name"):
            report["framework"] = {"name": framework["name"], "version": framework.get("version")}
            if framework["name"] == "torch" and "cuda_available" in framework:
                report["cuda_available"] = framework["cuda_available"]
                report["gpu_count"] = framework.get("gpu_count")
        if measured.get("packages"):
            report["packages"] = measured["packages"]
        state = "final" if final else "preliminary (written when the env was created)"
        verdict = self.verdict() if final else "nothing verified yet"
        report["notes"] = (f"resenv baseline agent, {state}; installer {self.installer}"
                           f"{', offline' if self.args.offline else ''}; {verdict}. Only measured values are "
                           "claimed; the repo's entrypoints were not run and DDP was not tested.")
        report["baseline"] = {"final": final, "installer": self.installer, "offline": bool(self.args.offline),
                              "steps": self.steps, "failures": self.failures,
                              "imports_missing": self.imports_missing, "conflicts": self.conflicts,
                              "guessed": self.guessed, "pip_check": self.check,
                              "entrypoints": "not run (the probes run them)",
                              "seconds": round(time.monotonic() - self.runner.start, 3)}
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.report_path.with_name(self.report_path.name + ".tmp")
        temporary.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
        os.replace(temporary, self.report_path)
        self.events.message("report", f"wrote {state} report", path=str(self.report_path),
                            claims={k: report[k] for k in ("python_path", "python_version", "framework",
                                                           "cuda_available", "gpu_count", "ddp_expected_ok")})

    # -- main ------------------------------------------------------------------------------
    def run(self) -> int:
        events = self.events
        events.message("start", "resenv baseline agent", repo=str(self.repo), env=str(self.env_dir),
                       offline=bool(self.args.offline), budget_s=self.args.budget_s,
                       base_python=self.base_python)
        if not self.repo.is_dir():
            self.fail("start", "infra", f"repo {self.repo} is not a directory")
            return 2
        meta = self.read_metadata()
        reqs: RequirementSet = meta["reqs"]
        scan = scan_imports(self.repo, meta["extensions"])
        # step 2: the environment
        self.choose_python(meta["python_version"])
        self.choose_installer()
        if not self.create_env():
            return 2
        first = self.env_lookup([])
        self.write_report({"python_version": first.get("version")}, final=False)
        stdlib = first.get("stdlib") or sorted(sys.stdlib_module_names)
        imported = third_party_candidates(scan, stdlib)
        extras = select_extras(meta["optional"], imported, meta["name"])
        unused = sorted(set(meta["optional"]) - set(extras))
        events.message("scan", "imports scanned", third_party=sorted(imported), own=scan["own"],
                       unparsable=scan["unparsable"], extras_selected=extras, extras_not_imported=unused)
        static = list(reqs.requirements)
        for extra in extras:
            for requirement in meta["optional"][extra]:
                name = requirement_name(requirement)
                if meta["name"] and name and canonical(name) == canonical(meta["name"]):
                    continue
                if requirement not in static:
                    static.append(requirement)
        # The chosen extras' requirements are in `static` already, one by one: the project itself is
        # installed plain, so that a requirement dropped (unbuildable, say) does not come back through it.
        project = "." if meta["installable"] else None
        self.install_declared(meta, static, project)
        self.match_torch_companions(meta, static)
        # the import scan: what the declared install does not provide
        checks = sorted({module_for_check(name) for name in imported})
        lookup = self.env_lookup(checks) if checks else {"found": {}, "map": {}}
        missing = [name for name in checks if not lookup["found"].get(name)]
        guarded = [name for name in missing if all(info["guarded"] for dotted, info in imported.items()
                                                    if module_for_check(dotted) == name)]
        needed = [name for name in missing if name not in guarded]
        if guarded:
            events.message("scan", "optional imports (inside try/except ImportError) left alone", modules=guarded)
        base_map: dict[str, list[str]] = {}
        if needed:
            base_map = self.env_lookup([], python=self.base_python).get("map", {})
        guesses: dict[str, str] = {}
        declared = {canonical(n) for n in map(requirement_name, static) if n}
        declared_missing: dict[str, str] = {}  # import -> its declared distribution, which did not install
        unresolvable = []
        for name in needed:
            dist, how = distribution_for(name, lookup.get("map"), base_map)
            if dist is None:
                unresolvable.append(name)
                continue
            installed_dists = lookup.get("map", {}).get(name.split(".", 1)[0]) or []
            if installed_dists and how == "env metadata":
                self.fail("scan", "runtime", f"{name} is provided by installed {', '.join(installed_dists)} "
                                             "but cannot be found; not reinstalled")
                continue
            if canonical(dist) in declared:
                events.message("scan", f"import {name} is missing although {dist} is declared: not installed "
                                       "again without the repo's own version requirement")
                declared_missing[name] = dist
                continue
            if canonical(dist) in {canonical(d) for d in guesses}:
                continue
            guesses[dist] = name
            self.guessed[name] = dist
            events.message("scan", f"import {name} is missing: guessing {dist} ({how})")
        if unresolvable:
            events.message("scan", "no distribution known for: " + ", ".join(unresolvable))
        self.install_guesses(meta, guesses)
        if guesses:
            self.match_torch_companions(meta, static)
        # C extensions that still do not import: build them in place
        if meta["extensions"] and (self.repo / "setup.py").is_file():
            ext_found = self.env_lookup_in_repo(meta["extensions"])
            unbuilt = [name for name in meta["extensions"] if not ext_found.get(name)]
            if unbuilt:
                events.message("build_ext", "declared extensions not importable: building in place", modules=unbuilt)
                result = self.runner.run("build_ext", [self.env_python, "setup.py", "build_ext", "--inplace"],
                                         cwd=self.repo, env=self.child_env, install=True)
                self.record("build_ext", result.ok)
                if not result.ok:
                    self.fail("build_ext", failure_category(result.output, exit_code=result.exit_code,
                                                            timed_out=result.timed_out),
                              "python setup.py build_ext --inplace failed")
        # step 3: verify what was built, and report exactly that
        if needed:
            found = (self.env_lookup(needed) or {}).get("found", {})
            self.imports_missing = [name for name in needed if not found.get(name)]
            dropped = {conflict["for_import"]: conflict for conflict in self.conflicts}
            declared_failed = next((f for f in self.failures if f["step"].startswith("install:")), None)
            for name, dist in declared_missing.items():
                if declared_failed and name not in dropped:
                    dropped[name] = {"package": dist, "category": declared_failed["category"],
                                     "reason": "its declared install failed"}
            for name in self.imports_missing:
                why = dropped.get(name)
                self.fail("scan", why["category"] if why else missing_import_category(name),
                          f"import {name} still cannot be found"
                          + (f" ({why['package']} was not installed: {why['reason']})" if why else
                             f" (installed {self.guessed[name]} does not provide it)" if name in self.guessed else ""))
        self.check = self.pip_check()
        measured = self.verify(meta, scan["own"]) or {"python_version": first.get("version")}
        self.write_report(measured, final=True)
        ok = not self.failures
        events.message("done", "finished: " + self.verdict(), seconds=round(time.monotonic() - self.runner.start, 3))
        return 0 if ok else 1

    def env_lookup_in_repo(self, names: list[str]) -> dict[str, bool]:
        data = self.python_json("build_ext", ENV_SNIPPET, names, cwd=self.repo)
        return (data or {}).get("found", {})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="resenv's rule-based baseline agent")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--python", default=None, help="base interpreter (default: this one)")
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto")
    parser.add_argument("--uv", default=None, help="path of uv, when not on PATH")
    parser.add_argument("--budget-s", type=float, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    events = Events()
    try:
        return Agent(args, events).run()
    except Exception as exc:  # an agent bug: say so in the transcript, never hang or lie
        import traceback

        events.error("internal", "infra", f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:])
        return 2


if __name__ == "__main__":
    sys.exit(main())
