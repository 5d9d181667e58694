"""Integrity of what is judged: the agent's environment, against the repo as pinned.

An agent is asked to build an environment, not to change the repository. Three moves would let it pass
tiers without building anything, so the judge undoes or refuses each before any probe runs:

* **tracked files edited** (an entrypoint rewritten to ``print("ok")``, a failing import deleted):
  every tracked path whose content, type or mode differs from the pinned commit is *restored* to the
  pinned version. Build outputs are untracked, so they stay.
* **a file shadowing an import** (a stub ``missing_pkg.py`` or ``missing_pkg/`` dropped beside the
  entrypoint): an untracked entry in a directory an import can be resolved from (see
  :func:`import_dirs`) whose module name is one the census counts is *quarantined*: moved out of
  the checkout into the attempt's quarantine folder, so no probe can import it. A compiled module the
  repo declares (an in-place ``build_ext`` output) is a build output, not a shadow. Bytecode caches
  (``__pycache__``, stray ``.pyc`` files) are quarantined too: an unchecked-hash ``.pyc`` is loaded
  whatever the restored source says.
* **an interpreter start-up hook** (a ``.pth`` import line or a ``sitecustomize`` written by the agent,
  which can turn a traceback into exit status 0 or fake a GPU): it lives in the environment, which the
  probes never change, so every tier that runs the interpreter (C0-C4) *fails* as ``tampered``.

Each becomes one :class:`Finding`, recorded per attempt and shown with the tier results. The findings
are pure data computed from the scans of ``kit/treescan.py`` and ``kit/hookscan.py``; carrying out the
restore and the quarantine is the engine's job.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from .census import Census

COMPILED_SUFFIXES = (".so", ".pyd")
DIFF_LINES = 200
TAMPERED = "tampered"


@dataclass(frozen=True)
class Finding:
    """One change the judge does not score on: ``kind`` says what, ``action`` what was done."""

    kind: str  # tracked_modified | tracked_missing | tracked_replaced | tracked_mode | shadow | startup_hook
    #            | unrestorable (the tree could not be put back) | malformed_scan (a scan answered wrong types)
    path: str
    action: str  # restored | quarantined | tier_failed
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Integrity:
    """Everything the integrity check found for one attempt."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def restore(self) -> list[str]:
        return [f.path for f in self.findings if f.action == "restored"]

    @property
    def quarantine(self) -> list[str]:
        return [f.path for f in self.findings if f.action == "quarantined"]

    @property
    def blocking(self) -> list[Finding]:
        """Findings that fail the probe tiers: start-up hooks, a tree that could not be restored."""
        return [f for f in self.findings if f.action == "tier_failed"]

    def summary(self) -> str:
        """One line for tables: counts per kind, or ``clean``."""
        if not self.findings:
            return "clean"
        counts: dict[str, int] = {}
        for finding in self.findings:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
        return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))


PYRIGHT_ROOTS = ("src", "typings")
"""Folders C0's pyright resolves imports from whenever they exist (its extra path and stub path)."""


def import_dirs(commands: Iterable[str | list[str]], source_files: Iterable[str] = ()) -> list[str]:
    """Directories of the checkout that an import can be resolved from: the root (the working
    directory, ``python -m``), the folder of every repo-relative ``.py`` script an entrypoint names,
    every folder holding a tracked ``.py`` file and each folder above it (code that puts its own
    folders on ``sys.path``, and pyright, which also looks beside the importing file and above it),
    and pyright's ``src`` and ``typings``."""
    dirs = {"", *PYRIGHT_ROOTS}
    for command in commands:
        words = command if isinstance(command, list) else _split(command)
        for word in words:
            if word.endswith(".py") and not word.startswith(("/", "{", "-")) and ".." not in word:
                parent = str(PurePosixPath(word).parent)
                dirs.add("" if parent == "." else parent)
    for path in source_files:
        for parent in PurePosixPath(path).parents:
            dirs.add("" if str(parent) == "." else str(parent))
    return sorted(dirs)


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


IMPORTABLE_FILES = (".py", ".pyc", *COMPILED_SUFFIXES)


def module_name(path: str, kind: str | None = None) -> str | None:
    """The top-level module an entry would be imported as, or None when Python cannot import it: a
    folder ``pkg`` (not ``pkg.egg-info``: a dot is no part of a module name), ``mod.py``, ``mod.pyc``,
    ``mod.cpython-311-x86_64-linux-gnu.so``."""
    name = PurePosixPath(path).name
    if kind == "module":
        if not name.endswith(IMPORTABLE_FILES):
            return None
        stem = name.split(".", 1)[0]
    else:
        stem = name
    return stem if stem.isidentifier() else None


def _is_build_output(entry: Mapping[str, Any], compiled: set[str]) -> bool:
    """A compiled module the repo declares, built in place: the build's own output, not a shadow."""
    name = PurePosixPath(str(entry["path"])).name
    return entry.get("kind") == "module" and name.endswith(COMPILED_SUFFIXES) and module_name(name, "module") in compiled


SCAN_LISTS = ("changed", "untracked", "bytecode", "hooks")
"""The lists a scan answers with; every entry is an object with a string ``path``."""


def scan_problems(scan: Any) -> list[str]:
    """What in a scan's answer has the wrong type (a scan run on the job's host, or in its container
    with the python3 there, answers with whatever that program prints). The judges below skip such
    entries; the caller decides what a malformed answer means."""
    if not isinstance(scan, Mapping):
        return [f"the scan answered {type(scan).__name__}, not an object"]
    problems = []
    for key in SCAN_LISTS:
        value = scan.get(key, [])
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {type(value).__name__}")
            continue
        bad = sum(1 for entry in value if not _entry_ok(entry))
        if bad:
            problems.append(f"{key}: {bad} entr{'y' if bad == 1 else 'ies'} not an object with a string path")
    return problems


def _entry_ok(entry: Any) -> bool:
    return isinstance(entry, Mapping) and isinstance(entry.get("path"), str)


def _entries(scan: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = scan.get(key, []) if isinstance(scan, Mapping) else []
    return [entry for entry in value if _entry_ok(entry)] if isinstance(value, list) else []


def judge_tree(scan: Mapping[str, Any], census: Census, compiled_modules: Iterable[str] = ()) -> list[Finding]:
    """Findings from a tree scan: tracked changes to restore, shadowing entries to quarantine.
    Entries of the wrong type are skipped (see `scan_problems`)."""
    compiled = {name.rsplit(".", 1)[-1] for name in compiled_modules}
    imported = {module.name for module in census.modules}
    findings: list[Finding] = []
    for change in _entries(scan, "changed"):
        kind = {"missing": "tracked_missing", "replaced": "tracked_replaced",
                "mode": "tracked_mode"}.get(str(change.get("change")), "tracked_modified")
        detail = {key: value for key, value in change.items() if key not in ("path",)}
        findings.append(Finding(kind, change["path"], "restored", detail))
    for entry in _entries(scan, "untracked"):
        entry_kind = entry.get("kind") if isinstance(entry.get("kind"), str) else None
        name = module_name(entry["path"], entry_kind)
        if name is not None and name in imported and not _is_build_output(entry, compiled):
            findings.append(Finding("shadow", entry["path"], "quarantined", {
                "module": name, "entry": entry_kind, "census_kind": census.kind_of(name)}))
    return findings


def bytecode_paths(scan: Mapping[str, Any]) -> list[str]:
    """Bytecode caches to move out before the probes: housekeeping, not a finding (running the repo's
    code leaves them in every honest checkout), but a planted one would replace a restored source."""
    return [entry["path"] for entry in _entries(scan, "bytecode")]


def judge_hooks(scan: Mapping[str, Any], *, since: float | None, owned: Iterable[str] = ()) -> list[Finding]:
    """Start-up hooks the agent left: each fails the probe tiers.

    A hook is the agent's when its file lies under a directory the job owns (``owned``: its work dir
    and HOME) or was written after ``since``, the host's clock when the checkout was verified, before
    the agent started (a file's ctime cannot be set back). Hooks the host's interpreter already had
    are the host's business and are left alone."""
    roots = [root.rstrip("/") + "/" for root in owned]
    findings = []
    for hook in _entries(scan, "hooks"):
        path, changed = hook["path"], hook.get("ctime")
        mine = any(path.startswith(root) for root in roots)
        written = (isinstance(changed, (int, float)) and not isinstance(changed, bool) and since is not None
                   and changed >= since - 1)
        if mine or written:
            findings.append(Finding("startup_hook", path, "tier_failed",
                                    {key: value for key, value in hook.items() if key != "path"}))
    return findings


def unified_diff(path: str, pinned: bytes, found: bytes | None) -> str:
    """A capped unified diff from the pinned content to what the agent left (text files only)."""
    if found is None:
        return ""
    if b"\0" in pinned[:8192] or b"\0" in found[:8192]:
        return f"binary file: {len(pinned)} bytes pinned, {len(found)} bytes found"
    lines = list(difflib.unified_diff(pinned.decode(errors="replace").splitlines(keepends=True),
                                      found.decode(errors="replace").splitlines(keepends=True),
                                      fromfile=f"a/{path} (pinned)", tofile=f"b/{path} (agent)"))
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"... {len(lines) - DIFF_LINES} more diff lines\n"]
    return "".join(lines)
