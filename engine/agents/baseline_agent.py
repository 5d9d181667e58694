#!/usr/bin/env python3
"""resenv's built-in baseline agent: deterministic, rule-based, no LLM, and honest.

ONE stdlib-only script (Python >= 3.11, for tomllib) that builds a Python environment for a repo
and reports only what it measured. Its parts are staged beside it as the package ``baseline_kit``
(``metadata``: the readers of what a repo declares; ``scanner``: the import scan; ``resolver``: what
the installers' output says; ``runner``: its events and commands); the judges' modules it loads are
staged beside it as one package ``resenv_shared`` (``baseline_kit/shared.py``): the
build-configuration reader (``probes/buildinfo.py``), the failure classifier
(``probes/classifier.py``) and the rule for the repo's own modules (``probes/localroots.py``, the
census's). The `baseline` adapter (`baseline.py` beside this file) runs it inside the job's sandbox, so the
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
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Iterable

STAGED_PACKAGE = "resenv_baseline"
"""Run as a script (in the sandbox), this file belongs to no package: its folder becomes one under
this name (PEP 366), so the kit staged beside it, ``baseline_kit/``, is imported as inside resenv."""

if not __package__:
    _package = types.ModuleType(STAGED_PACKAGE)
    _package.__path__ = [str(Path(__file__).resolve().parent)]
    sys.modules[STAGED_PACKAGE] = _package
    __package__ = STAGED_PACKAGE

# The kit is imported once the package exists (above).
from .baseline_kit.constants import NET_TIMEOUT_S, VERIFY_SKIP_PACKAGES  # noqa: E402
from .baseline_kit.metadata import (  # noqa: E402
    RequirementSet,
    canonical,
    find_requirement_files,
    read_environment_yml,
    read_pyproject,
    read_python_version,
    read_requirements,
    read_setup_cfg,
    read_setup_py,
    requirement_name,
)
from .baseline_kit.resolver import (  # noqa: E402
    conflicting_requirements,
    failure_category,
    index_unreachable,
    missing_import_category,
    no_matching_distribution,
    pinned_elsewhere,
    requested_by,
    resolver_reason,
    torch_companions,
    unbuildable_package,
    uv_options,
)
from .baseline_kit.runner import Events, Runner  # noqa: E402
from .baseline_kit.scanner import (  # noqa: E402
    distribution_for, module_for_check, scan_imports, select_extras, third_party_candidates,
)
from .baseline_kit.shared import classifier  # noqa: E402


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
