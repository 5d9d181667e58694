"""Tier C2, CUDA alignment, host side: read the frameworks probe's output and judge the framework the
repo runs on. The C5 audit reads the same observations.

The probe (``probes/kit/frameworks.py``) runs with the agent's interpreter, so what it prints is
untrusted: :func:`read_frameworks` checks every field's type and never raises. A wrong type anywhere
makes the whole output unusable (a sane interpreter never prints one): the caller fails its tier
with the problems as the reason, and nothing of that output is used.

Which framework C2 judges (:func:`judged_frameworks`), by one rule for every repo:

1. the frameworks (torch, jax, tensorflow) that the repo's import census (of the pinned commit)
   imports unconditionally at module level: ALL of them must pass, since the repo needs each;
2. else, when the repo imports frameworks only conditionally (in ``try`` blocks, under ``if``,
   inside functions): the first of those that imports, in the order torch, jax, tensorflow;
3. else (the census has no framework, or there is no census): the first framework that imports, in
   that order.

So a JAX repo is judged on JAX even when a CPU-only torch sits beside it. When nothing among the
candidates of rules 2 and 3 imports, the first installed one is judged (its import error says why),
or, when none is even installed, the tier fails ``deps_missing``.

One framework passes (:func:`judge_c2`) when it imports, measured without error, was built for CUDA,
that CUDA is one the driver supports, and it sees at least one GPU. Failures, in that order:
``deps_missing`` (not installed), the classifier's category of its import or measurement error
(``cuda_mismatch`` for a missing ``libcudart``, ``native_extension`` for an undefined symbol, ...),
``cuda_mismatch`` (CPU-only build, or built for a CUDA newer than the driver's), ``no_gpu``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .census import Census
from .classifier import classify

FRAMEWORKS = ("torch", "jax", "tensorflow")
"""The frameworks the probe observes, in the order of the fallback rule."""

NO_FRAMEWORK = "none"
"""The judged framework's name when the probes looked and no framework was importable."""


@dataclass(frozen=True)
class FrameworkSeen:
    """What the frameworks probe saw of one framework (None: not measured, e.g. after an error)."""

    name: str
    installed: bool  # a module of that name is on the interpreter's path
    importable: bool  # `import name` succeeded
    version: str | None = None  # the module's __version__, or its distribution's when it does not import
    cuda_build: str | None = None  # CUDA it was built for; None for a CPU-only build
    cuda_available: bool | None = None
    device_count: int | None = None
    error: str | None = None  # "Type: message" of the import or measurement failure


# ------------------------------------------------------------------------------------------------
# reading the probe's output


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_FIELDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("installed", lambda v: isinstance(v, bool), "true or false"),
    ("importable", lambda v: isinstance(v, bool), "true or false"),
    ("version", lambda v: v is None or isinstance(v, str), "a string or null"),
    ("cuda_build", lambda v: v is None or isinstance(v, str), "a string or null"),
    ("cuda_available", lambda v: v is None or isinstance(v, bool), "true, false or null"),
    ("device_count", lambda v: v is None or (_is_int(v) and v >= 0), "a non-negative integer or null"),
    ("error", lambda v: v is None or isinstance(v, str), "a string or null"),
)


def read_frameworks(output: Any) -> tuple[dict[str, FrameworkSeen] | None, list[str]]:
    """The probe's JSON object as typed observations, one per framework of :data:`FRAMEWORKS`.

    Returns ``(observations, [])``, or ``(None, problems)`` when any field has the wrong type or is
    missing; each problem starts with the JSON path it is about. Keys the judge does not read
    (``devices``, ``nccl``, ``_exit``, ...) are not checked: they are only shown.
    """
    if not isinstance(output, dict):
        return None, [f"$: expected a JSON object, got {_show(output)}"]
    table = output.get("frameworks")
    if not isinstance(table, dict):
        return None, [f"frameworks: expected an object, got {_show(table)}"]
    problems: list[str] = []
    seen: dict[str, FrameworkSeen] = {}
    for name in FRAMEWORKS:
        entry = table.get(name)
        if not isinstance(entry, dict):
            problems.append(f"frameworks.{name}: expected an object, got {_show(entry)}")
            continue
        bad = [f"frameworks.{name}.{key}: expected {want}, got {_show(entry.get(key))}"
               for key, ok, want in _FIELDS if not ok(entry.get(key))]
        if not bad and entry["importable"] and not entry["installed"]:
            bad.append(f"frameworks.{name}: importable but not installed")
        problems += bad
        if not bad:
            seen[name] = FrameworkSeen(
                name=name, installed=entry["installed"], importable=entry["importable"], version=entry.get("version"),
                cuda_build=entry.get("cuda_build"), cuda_available=entry.get("cuda_available"),
                device_count=entry.get("device_count"), error=entry.get("error"))
    return (None, problems) if problems else (seen, [])


# ------------------------------------------------------------------------------------------------
# which framework is judged


def repo_frameworks(census: Census | None) -> tuple[list[str], list[str]]:
    """(imported unconditionally, imported only conditionally): the frameworks of the census."""
    if census is None:
        return [], []
    used = [module for name in FRAMEWORKS if (module := census.module(name)) and module.kind == "third_party"]
    return ([m.name for m in used if m.unconditional], [m.name for m in used if not m.unconditional])


def judged_frameworks(seen: Mapping[str, FrameworkSeen], census: Census | None) -> tuple[list[str], str]:
    """The frameworks C2 judges (all must pass) and, in words, why those (rules in the module docstring)."""
    unconditional, conditional = repo_frameworks(census)
    if unconditional:
        return unconditional, "the repo imports " + ", ".join(unconditional) + " unconditionally"
    candidates: list[str]
    if conditional:
        candidates = conditional
        basis = "the first importable of the frameworks the repo imports conditionally (" + ", ".join(conditional) + ")"
    else:
        candidates = list(FRAMEWORKS)
        basis = ("the first importable in the order torch, jax, tensorflow ("
                 + ("the census has no framework import" if census is not None else "no census") + ")")
    for wanted in (lambda s: s.importable, lambda s: s.installed):
        if chosen := [name for name in candidates if name in seen and wanted(seen[name])]:
            return chosen[:1], basis
    return candidates, basis


def primary_framework(seen: Mapping[str, FrameworkSeen], census: Census | None) -> str:
    """The framework the repo runs on: the first judged one that imports; :data:`NO_FRAMEWORK` if none
    does. Claims that name no framework (``cuda_available``, ``gpu_count``) are about this one."""
    judged, _ = judged_frameworks(seen, census)
    return next((name for name in judged if name in seen and seen[name].importable), NO_FRAMEWORK)


# ------------------------------------------------------------------------------------------------
# the verdict


@dataclass(frozen=True)
class C2Verdict:
    status: Literal["pass", "fail"]
    category: str | None
    reason: str | None
    judged: list[str]
    basis: str
    framework: str  # the framework that decided: the first failing one, else the first judged
    evidence_line: str | None = None
    verdicts: dict[str, str] = field(default_factory=dict)  # per judged framework: "pass" or its category


def _judge_one(seen: FrameworkSeen, driver_cuda: str | None,
               cuda_supported: Callable[[str | None, str | None], bool | None]) -> tuple[str, str, str | None] | None:
    """None if the framework passes, else (category, reason, classifier evidence line)."""
    name = seen.name
    if not seen.importable:
        if not seen.installed:
            return "deps_missing", f"{name} is not installed", None
        verdict = classify(seen.error or "", returncode=1, tier="C2")
        return verdict.category, f"{name} does not import: {seen.error or 'no error given'}", verdict.evidence
    if seen.error:
        verdict = classify(seen.error, returncode=1, tier="C2")
        return verdict.category, f"measuring {name} failed: {seen.error}", verdict.evidence
    if not seen.cuda_build:
        build = f"{name} {seen.version}" if seen.version else name
        return "cuda_mismatch", f"{build} has no CUDA build (a CPU-only build)", None
    if cuda_supported(seen.cuda_build, driver_cuda) is False:
        return "cuda_mismatch", f"{name} is built for CUDA {seen.cuda_build}, the driver supports {driver_cuda}", None
    if not seen.cuda_available or not seen.device_count:
        return "no_gpu", f"{name} sees no GPU", None
    return None


def judge_c2(seen: Mapping[str, FrameworkSeen], census: Census | None, *, driver_cuda: str | None,
             cuda_supported: Callable[[str | None, str | None], bool | None]) -> C2Verdict:
    """C2's verdict on the judged frameworks; `cuda_supported(build, driver)` says whether a driver
    runs a CUDA build (None: unknown, which does not fail the tier)."""
    judged, basis = judged_frameworks(seen, census)
    if not any(name in seen and seen[name].installed for name in judged):
        names = ", ".join(judged)
        reason = f"{names} is not installed" if len(judged) == 1 else f"none of {names} is installed"
        return C2Verdict("fail", "deps_missing", reason, judged, basis, judged[0],
                         verdicts={name: "deps_missing" for name in judged})
    verdicts: dict[str, str] = {}
    failure: tuple[str, tuple[str, str, str | None]] | None = None
    for name in judged:
        outcome = _judge_one(seen[name], driver_cuda, cuda_supported)
        verdicts[name] = "pass" if outcome is None else outcome[0]
        if outcome is not None and failure is None:
            failure = (name, outcome)
    if failure is None:
        return C2Verdict("pass", None, None, judged, basis, judged[0], verdicts=verdicts)
    name, (category, reason, line) = failure
    return C2Verdict("fail", category, reason, judged, basis, name, line, verdicts)
