"""What the installers' output says: the failure's category (as the judges' classifier names it), the
resolver's reason, the package that cannot build, the requirements in conflict and who asked for
them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from .constants import NETWORK_SIGNS
from .metadata import canonical, requirement_name
from .shared import classifier


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
