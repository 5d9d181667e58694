"""Tier C0, import closure: the pinned pyright judges which of the census's imports the agent's
interpreter cannot resolve.

Rules (one implementation for every repo):

- pyright is resolvable by resenv itself (the PyPI package ``pyright``, pinned in resenv's
  dependencies; its wheel bundles the npm package, so only a ``node`` binary is needed), never
  installed into the agent's environment. It runs as
  ``node <pyright>/index.js --outputjson --pythonpath <python> -p <work_dir>/pyrightconfig.json``.
- The interpreter is checked FIRST (exists, executable, ``-c "import sys; print(sys.version)"``
  runs): pyright silently falls back to another interpreter when ``--pythonpath`` is broken.
  A missing or broken interpreter is status ``fail``, category ``entrypoint_not_found`` (the
  agent's reported entrypoint to its environment does not work), ``interpreter_ok`` False.
- The config lives in `work_dir`, never in the repo: only import rules are on
  (``reportMissingImports`` error, ``reportMissingModuleSource`` warning, everything else off),
  ``include`` lists exactly the census's ``.py`` files that still exist (so files the agent added,
  and any environment it created inside the repo, are never analyzed), ``exclude`` the usual
  directories plus every virtual environment found in the repo. The repo is pyright's execution
  root (its own packages resolve as when pyright runs in the repo), with ``src/`` as an extra
  path where pyright would add it by itself (a ``src`` dir that is not a package); the census's
  declared source roots and each file's static ``sys.path`` targets are import roots too (see
  :func:`write_config`), so a module the census counts as the repo's is never counted missing.
- Counted: distinct top-level modules of ``reportMissingImports`` diagnostics that are in the
  census, reported in census files; relative imports are ignored. ``reportMissingModuleSource``
  (pyright has bundled stubs but the package itself is not installed: ``yaml``, ``requests``,
  ``six``, ``tqdm``...) is reported apart in ``missing_source``: the paper-compatible ratio ignores
  it, as the paper did; the corrected third-party ratio and the status count it.
- Ratios: ``paper_ratio = 1 - |missing| / census.total`` (stdlib and repo modules in the
  denominator, as the paper computes); ``third_party_ratio = 1 - |missing & third_party| /
  census.third_party`` (1.0 when the census has no third-party module).
- Status ``pass`` iff neither ``missing`` nor ``missing_source`` has a module (an import that fails at
  run time is not closed, whatever stubs pyright bundles); else ``fail`` / ``deps_missing``. The
  paper-compatible ratio counts ``missing`` only; the third-party ratio counts both.
- A C0 that could not run scores as ALL-MISSING, never zero-missing: a broken interpreter
  (``fail``) and a pyright that crashed, printed no JSON or timed out (``error`` / ``infra``)
  both carry ``missing`` = every third-party module of the census, and ratios computed from it.

Pyright exits 1 when it found errors: that is its normal answer, not a failure; 2 and above are.

Known properties of the measure (kept, as they are pyright's and the paper's):
- pyright reports nothing in code it proves unreachable for the interpreter's version
  (``if sys.version_info[0] == 2: import urllib2``): such imports are in the census, never missing.
- ``# type: ignore`` comments are NOT honoured (``enableTypeIgnoreComments`` off): research code
  often writes ``import foo  # type: ignore``, which would otherwise hide a missing ``foo``.
  ``# pyright: ignore[...]`` comments in the repo are still honoured (pyright offers no switch).
- pyright evaluates imports in its binder, so skipping the type evaluation of unannotated function
  bodies (``analyzeUnannotatedFunctions`` off, with ``--level warning`` dropping the notes it
  prints) changes no import diagnostic and roughly halves the run on unannotated code. The rest
  of pyright's time is its checker walking every census file: ~10 s per MB of code on a 2-core box.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .capture import run_capped
from . import localroots
from .c0reuse import Answers, ReuseStore, pth_targets, record_answers, reuse_key
from .census import Census
from .mirror import write_replay

PYRIGHT_PIN = "1.1.414"  # keep equal to the `pyright==` pin in pyproject.toml
INTERPRETER_TIMEOUT = 20.0
ANSWER_BYTES = 64 * 1024  # more on stdout for `print(sys.version)` is no Python answering
PYRIGHT_JSON_BYTES = 64 * 2**20  # pyright's JSON report, read whole: more is an infra error
LOG_TAIL = 4000
_MISSING_RE = re.compile(r'^Import "([^"]+)" could not be resolved')
_ENV_DROP_PREFIXES = ("PYTHON", "PYRIGHT_PYTHON_", "VSCODE_")
_ENV_DROP = {"VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "NODE_OPTIONS", "NODE_PATH", "LANGUAGE", "LC_MESSAGES"}
_ALWAYS_EXCLUDE = ["**/node_modules", "**/__pycache__", "**/.git", "**/.hg", "**/.tox", "**/.nox"]
_ENV_SCAN_DEPTH = 3


@dataclass(frozen=True)
class C0Result:
    status: str                      # "pass" | "fail" | "error"
    category: str | None             # None | "deps_missing" | "entrypoint_not_found" | "infra"
    missing: list[str]               # distinct top-level modules (reportMissingImports), sorted
    missing_source: list[str]        # reportMissingModuleSource, sorted; not counted
    paper_ratio: float               # 1 - |missing| / census.total
    third_party_ratio: float         # 1 - |missing third-party| / census.third_party
    command: list[str]
    duration_s: float
    pyright_version: str
    interpreter_ok: bool
    log_tail: str
    ignored: int = 0                 # diagnostics dropped: file not in the census, module unknown, relative
    pyright_s: float = 0.0           # how long the pyright process itself ran
    python_version: str | None = None  # what the interpreter printed for sys.version
    reused_from: str | None = None   # set when pyright did not run: the verdict is the one kept by that attempt

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> C0Result:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})


# ---------------------------------------------------------------------------------------------------
# pyright itself


@dataclass(frozen=True)
class Pyright:
    argv: list[str]                  # prefix; the C0 arguments are appended
    version: str
    env: dict[str, str] = field(default_factory=dict)


def cache_dir() -> Path:
    """Where a non-bundled pyright's npm package (and a nodeenv, if no node exists) is cached:
    ``$RESENV_PYRIGHT_CACHE`` or ``<user cache>/resenv/pyright``."""
    custom = os.environ.get("RESENV_PYRIGHT_CACHE")
    if custom:
        return Path(custom)
    from platformdirs import user_cache_path

    return user_cache_path("resenv") / "pyright"


def find_pyright() -> Pyright:
    """The pinned pyright: the npm package bundled in the ``pyright`` wheel, run by ``node``.

    ``node`` is ``$RESENV_NODE``, else the first on PATH. Without a bundled copy or without node,
    falls back to the wheel's own launcher (``python -m pyright``) with its caches redirected to
    :func:`cache_dir` (it then installs the npm package ``pyright@<pin>`` there on first use, and a
    nodeenv if there is no node at all). Raises ``RuntimeError`` if the package is not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec("pyright")
    if spec is None or not spec.origin:
        raise RuntimeError("the pyright package is not installed in resenv's environment (pip install pyright==%s)"
                           % PYRIGHT_PIN)
    package = Path(spec.origin).parent
    version = PYRIGHT_PIN
    try:
        version_text = (package / "_version.py").read_text()
        match = re.search(r"__pyright_version__\s*=\s*['\"]([^'\"]+)", version_text)
        version = match.group(1) if match else version
    except OSError:
        pass
    bundled = package / "dist" / "index.js"
    node = os.environ.get("RESENV_NODE") or shutil.which("node")
    if bundled.is_file() and node:
        try:
            version = json.loads((package / "dist" / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            pass
        return Pyright(argv=[node, str(bundled)], version=version)
    cache = cache_dir()
    return Pyright(
        argv=[sys.executable, "-m", "pyright"], version=version,
        env={"PYRIGHT_PYTHON_CACHE_DIR": str(cache), "PYRIGHT_PYTHON_ENV_DIR": str(cache / "nodeenv"),
             "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"},
    )


# ---------------------------------------------------------------------------------------------------
# helpers


def _clean_env(base: Mapping[str, str] | None) -> dict[str, str]:
    """The environment for the interpreter check and pyright: `base` (default: ours) without
    anything that would change which packages the interpreter sees (PYTHONPATH, PYTHONHOME,
    VIRTUAL_ENV...) or which pyright runs, with a C locale so pyright's messages are English.
    Without a `base`, the user site-packages is off too (it would be ours, not the agent's)."""
    source = dict(os.environ if base is None else base)
    env = {k: v for k, v in source.items() if k not in _ENV_DROP and not k.startswith(_ENV_DROP_PREFIXES)}
    env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    env["LC_ALL"] = "C.UTF-8"
    env["LANG"] = "C.UTF-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # probes never write into the measured environment
    if base is None:
        # our HOME is not the agent's: its user site-packages must not count as the agent's work
        env["PYTHONNOUSERSITE"] = "1"
    return env


def _tail(text: str, limit: int = LOG_TAIL) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]




def _resolve_python(python: str, repo_dir: Path) -> Path:
    if os.sep in python or (os.altsep and os.altsep in python):
        path = Path(python)
        return path if path.is_absolute() else repo_dir / path
    found = shutil.which(python)
    return Path(found) if found else repo_dir / python


async def check_interpreter(python: Path, *, env: Mapping[str, str], cwd: Path,
                            timeout: float = INTERPRETER_TIMEOUT) -> tuple[bool, str]:
    """(runs, sys.version or the reason it does not)."""
    if not python.exists():
        return False, f"interpreter {python} does not exist"
    if python.is_dir():
        return False, f"interpreter {python} is a directory"
    if not os.access(python, os.X_OK):
        return False, f"interpreter {python} is not executable"
    try:
        # the agent's interpreter may answer with a flood: a capped head and tail of it are read
        run = await run_capped([str(python), "-c", "import sys; print(sys.version)"], env=env, cwd=cwd,
                               timeout=timeout, stop_after=ANSWER_BYTES)
    except OSError as exc:
        return False, f"interpreter {python} cannot be started: {exc}"
    if run.overflow:
        return False, (f"interpreter {python} printed more than {ANSWER_BYTES:,} bytes for `print(sys.version)`;"
                       f" it is no Python answering: {_tail(run.stdout.value().decode(errors='replace'), 300)}")
    if run.returncode is None:
        return False, f"interpreter {python} did not answer within {timeout:g}s"
    if run.returncode != 0:
        detail = (run.stderr.value() if run.stderr.total else run.stdout.value()).decode(errors="replace").strip()
        return False, f"interpreter {python} exited {run.returncode}: {_tail(detail, 1000)}"
    return True, run.stdout.value().decode(errors="replace").strip()


def _env_dirs(repo_dir: Path, depth: int = _ENV_SCAN_DEPTH) -> list[Path]:
    """Virtual environments (``pyvenv.cfg``) and conda envs (``conda-meta/``) inside the repo, down
    to `depth` levels; never descends into one it found, nor into node_modules / .git."""
    found: list[Path] = []
    frontier = [repo_dir]
    for _ in range(depth):
        following = []
        for directory in frontier:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False) or entry.name in ("node_modules", ".git", "__pycache__"):
                        continue
                except OSError:
                    continue
                path = Path(entry.path)
                if (path / "pyvenv.cfg").exists() or (path / "conda-meta").is_dir():
                    found.append(path)
                else:
                    following.append(path)
        frontier = following
    return found


def _module_of(diagnostic: Mapping[str, Any], source: Path) -> str | None:
    """The imported module of a missing-import diagnostic: from the message, else from the source
    text under the diagnostic's range (locale-independent)."""
    match = _MISSING_RE.match(str(diagnostic.get("message", "")))
    if match:
        return match.group(1)
    try:
        start, end = diagnostic["range"]["start"], diagnostic["range"]["end"]
        if start["line"] != end["line"]:
            return None
        line = source.read_text(errors="replace").splitlines()[start["line"]]
        text = line[start["character"]:end["character"]].strip()
        return text or None
    except (KeyError, IndexError, OSError, TypeError):
        return None


def _result(census: Census, *, status: str, category: str | None, missing: set[str], missing_source: set[str],
            command: list[str], started: float, version: str, interpreter_ok: bool, log: str, ignored: int = 0,
            python_version: str | None = None, pyright_s: float = 0.0) -> C0Result:
    total = census.total
    third_party = set(census.names("third_party"))
    paper = 1.0 - len(missing) / total if total else 1.0
    # The corrected ratio also counts packages pyright only "resolves" through its bundled stubs
    # (reportMissingModuleSource: yaml, requests, six...): importing them fails all the same.
    third = 1.0 - len((missing | missing_source) & third_party) / len(third_party) if third_party else 1.0
    return C0Result(
        status=status, category=category, missing=sorted(missing), missing_source=sorted(missing_source),
        paper_ratio=paper, third_party_ratio=third, command=list(command),
        duration_s=round(time.monotonic() - started, 3), pyright_version=version, interpreter_ok=interpreter_ok,
        log_tail=_tail(log), ignored=ignored, python_version=python_version, pyright_s=pyright_s,
    )


def write_config(repo_dir: Path, files: list[str], work_dir: Path, excluded: list[Path],
                 census: Census | None = None) -> Path:
    """The pyright config for C0, written to `work_dir` (paths relative to it, as pyright wants).

    Its import roots are the census's (:mod:`probes.localroots`), so a module the census counts as
    the repo's own is resolved inside the repo, never counted missing: the repo is the execution
    root (pyright resolves a file's absolute imports from there, then from the file's own
    directory up to the root), ``src/`` (when not a package) and the census's declared source roots
    are extra paths; a census file with static ``sys.path`` targets gets an execution environment
    of its own (rooted at the file, listed first), whose extra paths are its directory and
    ancestors, the same source roots and its targets.
    """
    def rel(path: Path) -> str:
        return os.path.relpath(path, work_dir).replace(os.sep, "/")

    src = repo_dir / "src"
    extra = [str(src)] if src.is_dir() and not (src / "__init__.py").exists() else []
    source_roots = list(census.roots) if census is not None else []
    extra += [str(repo_dir / root) for root in source_roots if (repo_dir / root).is_dir()]
    environments: list[dict[str, Any]] = []
    targets = census.path_targets if census is not None else {}
    for file in files:
        if file not in targets:
            continue
        roots = localroots.search_roots(source_roots, file, targets[file])
        paths = [str(repo_dir / root) if root else str(repo_dir) for root in roots if (repo_dir / root).is_dir()]
        environments.append({"root": str(repo_dir / file),
                             "extraPaths": paths + [p for p in extra if p not in paths]})
    environments.append({"root": str(repo_dir), "extraPaths": extra})
    config = {
        "include": [rel(repo_dir / f) for f in files],
        "exclude": [*_ALWAYS_EXCLUDE, *(rel(p) for p in excluded)],
        "executionEnvironments": environments,
        "stubPath": str(repo_dir / "typings"),
        "typeCheckingMode": "off",
        "enableTypeIgnoreComments": False,
        # Missing-import diagnostics come from pyright's binder, which runs on every function; the
        # checker's type evaluation does not add any. Skipping the bodies of unannotated functions
        # there halves pyright's time on research code (same diagnostics, checked on 239 stdlib
        # modules); the "analysis skipped" notes it adds are informations, dropped by --level.
        "analyzeUnannotatedFunctions": False,
        "reportMissingImports": "error",
        "reportMissingModuleSource": "warning",
        # typeCheckingMode "off" leaves exactly two other rules on; silence them
        "reportInvalidTypeForm": "none",
        "reportUndefinedVariable": "none",
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "pyrightconfig.json"
    path.write_text(json.dumps(config, indent=1) + "\n")
    return path


# ---------------------------------------------------------------------------------------------------
# the judge


async def run_c0(python: str, repo_dir: Path, census: Census, *, work_dir: Path, timeout: float,
                 env: Mapping[str, str] | None = None, pyright: Pyright | None = None,
                 reuse: ReuseStore | None = None) -> C0Result:
    """Judge import closure of `repo_dir` (the agent's checkout) under interpreter `python`.

    `census` comes from the pinned commit; `work_dir` receives the pyright config and raw output
    (``pyright.json``, ``pyright.stderr``); `timeout` bounds pyright (the interpreter check has its
    own short limit). `env`: the environment the interpreter normally runs in (e.g. the sandbox's,
    with its private HOME, so a user site-packages is seen as the agent left it); default ours.
    Never raises for anything the agent did; an unexpected error of our own is status ``error``.

    `reuse`: where verdicts are kept between attempts of a job. With it, pyright is told the
    interpreter's answers through a replay interpreter, and a verdict kept under the same key
    (:mod:`resenv.probes.c0reuse`: everything pyright reads) is returned without running pyright,
    with ``reused_from`` set.
    """
    started = time.monotonic()
    repo_dir = Path(repo_dir).absolute()
    work_dir = Path(work_dir).absolute()
    work_dir.mkdir(parents=True, exist_ok=True)
    run_env = _clean_env(env)
    all_third_party = set(census.names("third_party"))
    version = PYRIGHT_PIN
    command: list[str] = []
    interpreter_ok = False
    python_version: str | None = None
    try:
        interpreter = _resolve_python(python, repo_dir)
        check = [str(interpreter), "-c", "import sys; print(sys.version)"]
        interpreter_ok, answer = await check_interpreter(interpreter, env=run_env, cwd=work_dir)
        if not interpreter_ok:
            return _result(census, status="fail", category="entrypoint_not_found", missing=all_third_party,
                           missing_source=set(), command=check, started=started, version=version,
                           interpreter_ok=False, log=answer + "\nC0 could not run: scored as all third-party missing")
        python_version = answer

        try:
            tool = pyright or find_pyright()
        except RuntimeError as exc:
            return _result(census, status="error", category="infra", missing=all_third_party, missing_source=set(),
                           command=[], started=started, version=version, interpreter_ok=True, log=str(exc),
                           python_version=python_version)
        version = tool.version

        excluded = _env_dirs(repo_dir)
        present: list[str] = []
        gone: list[str] = []
        for rel in census.files:
            path = repo_dir / rel
            if any(path.is_relative_to(e) for e in excluded):
                continue
            (present if path.is_file() else gone).append(rel)
        notes = [f"interpreter: {interpreter} ({answer.splitlines()[0] if answer else '?'})"]
        if gone:
            notes.append(f"{len(gone)} census file(s) no longer in the checkout: {', '.join(gone[:20])}")
        if census.total == 0 or not present:
            notes.append("no census file to analyze" if census.total else "the census has no imports")
            status = "pass" if census.total == 0 else "fail"
            return _result(census, status=status, category=None if status == "pass" else "deps_missing",
                           missing=set() if status == "pass" else all_third_party, missing_source=set(),
                           command=[], started=started, version=version, interpreter_ok=True,
                           log="\n".join(notes), python_version=python_version)

        config = write_config(repo_dir, present, work_dir, excluded, census)
        key: str | None = None
        answers: Answers | None = None
        pyright_python = interpreter
        if reuse is not None:
            answers = await record_answers(interpreter, answer, env=run_env, cwd=work_dir, timeout=INTERPRETER_TIMEOUT)
            if answers is None:
                notes.append("C0 reuse: the interpreter's answers are not what pyright accepts; judged without reuse")
            else:
                pyright_python = write_replay(work_dir / "answers", answers.version, answers.version_info,
                                              answers.paths, answers.prefix)
        command = [*tool.argv, "--outputjson", "--level", "warning", "--pythonpath", str(pyright_python),
                   "-p", str(config)]
        if reuse is not None and answers is not None:
            settings = json.loads(config.read_text())
            extra = [Path(p) for env_ in settings["executionEnvironments"] for p in env_["extraPaths"]]
            roots = [*(Path(p) for p in answers.paths), *pth_targets(answers.paths), repo_dir,
                     *dict.fromkeys(extra)]
            key = await asyncio.to_thread(reuse_key, answers=answers, roots=roots, config=config,
                                          census=census.to_dict(), command=command, pyright_version=version)
            kept = reuse.load(key)
            if kept is not None:
                earlier = C0Result.from_dict(kept["result"])
                return replace(earlier, duration_s=round(time.monotonic() - started, 3), pyright_s=0.0,
                               reused_from=str(kept.get("label")), command=command,
                               log_tail=_tail(f"C0 reused the verdict of {kept.get('label')}: nothing pyright "
                                              f"reads has changed (key {key[:16]})\n{earlier.log_tail}"))
        pyright_started = time.monotonic()
        json_path = work_dir / "pyright.json"
        try:
            run = await run_capped(command, env={**run_env, **tool.env}, cwd=work_dir, timeout=timeout,
                                   stdout_path=json_path, stdout_limit=PYRIGHT_JSON_BYTES)
            pyright_s = round(time.monotonic() - pyright_started, 3)
        except OSError as exc:
            return _result(census, status="error", category="infra", missing=all_third_party, missing_source=set(),
                           command=command, started=started, version=version, interpreter_ok=True,
                           log=f"pyright could not start: {exc}", python_version=python_version)
        code = run.returncode
        err = run.stderr.value()
        (work_dir / "pyright.stderr").write_bytes(err)
        stderr = err.decode(errors="replace")
        if code is None:
            return _result(census, status="error", category="infra", missing=all_third_party, missing_source=set(),
                           command=command, started=started, version=version, interpreter_ok=True,
                           log=f"pyright timed out after {timeout:g}s\n{stderr}", python_version=python_version,
                           pyright_s=pyright_s)
        try:
            if run.overflow:
                raise ValueError(f"more than {PYRIGHT_JSON_BYTES:,} bytes")
            report = json.loads(json_path.read_bytes())
            if not isinstance(report, dict):
                raise TypeError(f"pyright printed {type(report).__name__}, not an object")
            diagnostics = report["generalDiagnostics"]
            if not isinstance(diagnostics, list):
                raise TypeError("generalDiagnostics is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            report, diagnostics = None, None
            problem = f"pyright printed no usable JSON ({exc})"
        else:
            problem = None if code in (0, 1) else f"pyright exited {code}"
        if problem is not None:
            return _result(census, status="error", category="infra", missing=all_third_party, missing_source=set(),
                           command=command, started=started, version=version, interpreter_ok=True,
                           log=f"{problem}\n{stderr}\n{run.stdout.value().decode(errors='replace')[-2000:]}",
                           python_version=python_version, pyright_s=pyright_s)
        version = str(report.get("version") or version)

        known = {m.name for m in census.modules}
        in_census = set(census.files)
        roots = {repo_dir, repo_dir.resolve()}
        missing: set[str] = set()
        missing_source: set[str] = set()
        ignored = 0
        for diagnostic in diagnostics:
            if not isinstance(diagnostic, dict):
                ignored += 1
                continue
            rule = diagnostic.get("rule")
            if rule not in ("reportMissingImports", "reportMissingModuleSource"):
                continue
            file = Path(str(diagnostic.get("file", "")))
            rel = next((file.relative_to(r).as_posix() for r in roots if file.is_relative_to(r)), None)
            module = _module_of(diagnostic, file)
            if rel not in in_census or not module or module.startswith("."):
                ignored += 1
                continue
            top = module.partition(".")[0]
            if top not in known:
                ignored += 1
                continue
            (missing if rule == "reportMissingImports" else missing_source).add(top)
        summary = report.get("summary") if isinstance(report.get("summary"), dict) else {}
        notes.append(f"pyright {version}: exit {code}, {summary.get('filesAnalyzed', '?')} files analyzed in "
                     f"{summary.get('timeInSec', '?')}s; missing: {', '.join(sorted(missing)) or 'none'}; "
                     f"missing source (not counted): {', '.join(sorted(missing_source)) or 'none'}; "
                     f"{ignored} diagnostic(s) ignored")
        if stderr.strip():
            notes.append(stderr.strip())
        status = "pass" if not missing and not missing_source else "fail"
        result = _result(census, status=status, category=None if status == "pass" else "deps_missing",
                         missing=missing, missing_source=missing_source, command=command, started=started,
                         version=version, interpreter_ok=True, log="\n".join(notes), ignored=ignored,
                         python_version=python_version, pyright_s=pyright_s)
        if reuse is not None and key is not None:
            reuse.save(key, result.to_dict())
        return result
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - our own bug: never zero-missing
        return _result(census, status="error", category="infra", missing=all_third_party, missing_source=set(),
                       command=command, started=started, version=version, interpreter_ok=interpreter_ok,
                       log=f"C0 judge failed: {type(exc).__name__}: {exc}", python_version=python_version)
