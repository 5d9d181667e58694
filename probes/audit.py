"""Tier C5: audit the agent's ``report.json`` against what the probes observed.

Every claim in the report is compared with an observation; each false claim is one
:class:`Hallucination` of kind ``path``, ``version`` or ``capability``. The rules, exactly:

* **No claim, no hallucination.** A key that is absent or ``null`` is honest uncertainty and is never
  counted. A claim with nothing observed to compare it with (``None`` in :class:`Observations`) is
  listed in ``unverifiable`` and is never counted either.
* **path** (``python_path``): the probes run the claimed interpreter, so the observed path *is* the
  claim; what is checked is that it exists, is executable and runs. At most one ``path`` hallucination,
  naming the first failed check in that order (a missing file is not also counted as "does not run").
* **version** (``python_version``, ``framework.version``, ``torch_version``): compared on the
  components the claim gives. ``"3.11"`` matches ``3.11.7``; ``"3.11.7"`` vs ``3.11.9`` is false; a
  ``Python `` / ``v`` prefix and a trailing `` (main, ...) [GCC ...]`` (as in ``sys.version``) are
  ignored; missing trailing release components of the observation count as 0 (PEP 440: ``2.0.0`` ==
  ``2.0``). A pre/post/dev suffix or a local label (``+cu121``) is compared only when the claim gives
  one: ``"2.3.1"`` matches ``2.3.1+cpu``, but ``"2.3.1+cu121"`` vs ``2.3.1+cpu`` (or vs a plain
  ``2.3.1``) is false, since it claims a different build. A claim that is not a version at all
  (``"latest"``) is false unless it equals the observation verbatim.
* **frameworks**: the probes observe EVERY framework they know (torch, jax, tensorflow; see
  ``resenv.probes.c2``), each on its own, so a claim about one is checked against the observation of
  that one (names normalized: ``pytorch`` == ``torch``, ``tf`` == ``tensorflow``, ``tensorflow-gpu``
  == ``tensorflow``, ...). ``framework.name`` is a capability claim (the env can run it): false
  (``capability``) when the framework is not installed, or is installed but does not import. A
  framework version claim (``framework.version``, ``torch_version``) is false (``capability``) when
  that framework is not installed, and false (``version``) when it is installed at another version.
  A framework the probes do not look for (``paddle``) was not observed: ``unverifiable``.
* **Absence is an observation.** A claim is false when it contradicts what the probes saw, and
  seeing that something is not there counts: a framework that is not installed, no framework
  importable, no GPU visible to the framework, no GPU leased to the job. ``unverifiable`` is only for
  what no probe observed at all (the frameworks probe never ran or crashed, a framework it does not
  look for, C4 not run).
* **GPU claims** (``cuda_available``, ``gpu_count``: what "the framework" sees), decided by the first
  of: (1) the lease - with no GPU leased to the job, ``cuda_available: true`` and ``gpu_count > 0``
  are false whatever a framework says, and a ``gpu_count`` above the number leased is false; (2) the
  GPU view of the framework the report names (``framework.name``, else ``torch`` for a
  ``torch_version``) when it imports, else of the framework the repo runs on (the one C2 judges,
  ``Observations.framework``); (3) no framework importable: no CUDA, no GPU, so ``true`` / ``> 0`` are
  false; (4) no GPU leased confirms ``false`` / ``0``. A report naming a framework the probe does not
  look for leaves (2) and (3) unobserved.
* **capability**, too: ``ddp_expected_ok`` contradicted by C4 (true but C4 failed - and,
  symmetrically, false but C4 passed: a false claim either way). C4 skipped or not run (``ddp_ok``
  None) leaves the DDP claim ``unverifiable``.
* **status**: a missing or invalid report is ``fail`` with category ``missing_report`` /
  ``invalid_report`` and no hallucinations (those are counted apart). Otherwise ``pass`` iff there
  are no hallucinations - but ``skip`` when not a single claim could be compared (nothing observed),
  so an unmeasured job never scores as a clean pass. A probe output the engine could not read (a
  field of the wrong type: the agent's interpreter printed it) is not used, and makes the audit
  ``fail`` with category ``runtime`` and the problems in ``probe_errors``: an environment that
  garbles its observations must not pass the audit on the claims left. ``error`` means the audit
  itself broke (a bug or an unexpected ``ReportLoad``); the reason is in ``report_errors``.
* **ResearchEnvBench's format** (see ``resenv.probes.report``): ``torch_version: X`` is the claim
  ``framework: {name: torch, version: X}``, audited under the claim path ``torch_version``; a report
  that gives both ``framework`` and ``torch_version`` makes two claims, and both are audited. A
  ``framework`` with a version but no name claims that version for the framework the repo runs on.

Claims in ``packages`` are listed as unverifiable (no observation covers them). ``notes``,
``env_tool``, ``env_name``, unknown keys and unknown keys inside ``framework`` are no claims: they are
listed, in the report's order, in ``not_scored`` (so the evidence shows them; nothing is dropped).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from resenv.probes.c2 import NO_FRAMEWORK, FrameworkSeen
from resenv.probes.report import ReportLoad, validate_report

__all__ = ["NO_FRAMEWORK", "AuditResult", "FrameworkSeen", "Hallucination", "Observations", "audit",
           "normalize_framework", "normalize_version", "not_scored", "parse_version", "version_matches"]

HallucinationKind = Literal["path", "version", "capability"]


@dataclass(frozen=True)
class Observations:
    """What the probes measured in the claimed interpreter (None = not measured)."""

    python_path: str | None = None
    python_exists: bool | None = None
    python_executable: bool | None = None
    python_runs: bool | None = None
    python_version: str | None = None
    # Every framework the probe looks for (torch, jax, tensorflow), by import name. None: the probe
    # never ran, or crashed, so no framework was observed at all.
    frameworks: dict[str, FrameworkSeen] | None = None
    # The framework the repo runs on, as C2 judges it (claims that name no framework are about it);
    # NO_FRAMEWORK when none imports; None when not observed.
    framework: str | None = None
    gpus_leased: int | None = None  # GPUs the job was leased (the agent and the probes saw only these)
    ddp_ok: bool | None = None  # C4 outcome; None if C4 skipped / not run / not applicable
    probe_errors: tuple[str, ...] = ()  # what the probes printed that could not be read (wrong types)


@dataclass(frozen=True)
class Hallucination:
    claim: str  # JSON path of the claim, e.g. "gpu_count", "framework.version"
    kind: HallucinationKind
    claimed: Any
    observed: Any
    message: str


@dataclass(frozen=True)
class AuditResult:
    status: Literal["pass", "fail", "error", "skip"]
    category: Literal["missing_report", "invalid_report", "runtime"] | None = None
    hallucinations: list[Hallucination] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # claims compared with an observation
    unverifiable: list[str] = field(default_factory=list)  # claims made, nothing observed to compare
    report_errors: list[str] = field(default_factory=list)
    not_scored: list[str] = field(default_factory=list)  # keys kept and shown, never claims (env_tool, notes, ...)
    probe_errors: list[str] = field(default_factory=list)  # probe output that could not be read: fails the audit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# versions

_VERSION_RE = re.compile(
    r"""
    ^\s*(?:python\s*)?v?
    (?:(?P<epoch>\d+)!)?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d+)?)?
    (?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?
    (?P<plus>\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*)?)?
    (?:\s+\(.*)?$
    """,
    re.VERBOSE | re.IGNORECASE | re.DOTALL,
)
_PRE_NAMES = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


class Version(NamedTuple):
    epoch: int | None
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: tuple[str, ...] | None  # None: no label given; () for a bare "+"


def parse_version(text: str) -> Version | None:
    """A lenient PEP 440 parse (plus ``Python 3.11.7`` / ``v1.2``); None if it is not a version."""
    m = _VERSION_RE.match(text)
    if not m:
        return None
    g = m.groupdict()
    pre = (_PRE_NAMES[g["pre_l"].lower()], int(g["pre_n"] or 0)) if g["pre_l"] else None
    if g["post_n1"] is not None:
        post: int | None = int(g["post_n1"])
    elif g["post_l"]:
        post = int(g["post_n2"] or 0)
    else:
        post = None
    dev = int(g["dev_n"] or 0) if g["dev_l"] else None
    local = tuple(re.split(r"[-_.]", g["local"].lower())) if g["local"] else (() if g["plus"] else None)
    return Version(
        epoch=int(g["epoch"]) if g["epoch"] is not None else None,
        release=tuple(int(x) for x in g["release"].split(".")),
        pre=pre, post=post, dev=dev, local=local,
    )


def normalize_version(text: str) -> str:
    """``"Python 3.11.7 (main, ...)"`` -> ``"3.11.7"``; text that is not a version comes back stripped."""
    v = parse_version(text)
    if v is None:
        return text.strip()
    out = (f"{v.epoch}!" if v.epoch is not None else "") + ".".join(map(str, v.release))
    if v.pre:
        out += f"{v.pre[0]}{v.pre[1]}"
    if v.post is not None:
        out += f".post{v.post}"
    if v.dev is not None:
        out += f".dev{v.dev}"
    if v.local is not None:
        out += "+" + ".".join(v.local)
    return out


def version_matches(claimed: str, observed: str) -> bool | None:
    """True/False: the claim holds/fails on the components it gives. None: the observation is not a
    version and differs from the claim verbatim, so nothing can be said."""
    if claimed.strip().lower() == observed.strip().lower():
        return True
    c, o = parse_version(claimed), parse_version(observed)
    if o is None:
        return None
    if c is None:
        return False
    if c.epoch is not None and c.epoch != (o.epoch or 0):
        return False
    obs_release = o.release + (0,) * max(0, len(c.release) - len(o.release))
    if c.release != obs_release[: len(c.release)]:
        return False
    if c.pre is not None and c.pre != o.pre:
        return False
    if c.post is not None and c.post != o.post:
        return False
    if c.dev is not None and c.dev != o.dev:
        return False
    if c.local is not None and c.local != o.local:
        return False
    return True


# ------------------------------------------------------------------------------------------------
# framework names

_FRAMEWORK_ALIASES = {
    "pytorch": "torch", "torch": "torch",
    "tf": "tensorflow", "tensorflow": "tensorflow", "tensorflow_gpu": "tensorflow",
    "tensorflow_cpu": "tensorflow", "tf_nightly": "tensorflow", "tensorflow_macos": "tensorflow",
    "jax": "jax", "jaxlib": "jax",
    "paddle": "paddle", "paddlepaddle": "paddle", "paddlepaddle_gpu": "paddle",
    "mxnet": "mxnet", "mindspore": "mindspore",
}


def normalize_framework(name: str) -> str:
    """``"PyTorch"`` -> ``"torch"``, ``"tensorflow-gpu"`` -> ``"tensorflow"``, ``"jax[cuda12]"`` -> ``"jax"``."""
    key = re.sub(r"\[.*\]$", "", name.strip().lower())
    key = re.sub(r"[-_. ]+", "_", key)
    return _FRAMEWORK_ALIASES.get(key, key)


# ------------------------------------------------------------------------------------------------
# the audit


def audit(load: ReportLoad, observed: Observations) -> AuditResult:
    """Compare every claim of a loaded report with the observations (rules in the module docstring)."""
    if load.status == "missing":
        return AuditResult(status="fail", category="missing_report", report_errors=list(load.errors))
    if load.status == "invalid":
        return AuditResult(status="fail", category="invalid_report", report_errors=list(load.errors))
    if load.status != "ok":
        return AuditResult(status="error", report_errors=[f"$: unexpected report load status {load.status!r}"])
    if load.report is None:
        return AuditResult(status="error", report_errors=["$: report load is ok but carries no report"])
    # A ReportLoad built by hand bypasses load_report's validation; never compare untyped claims.
    errors = validate_report(load.report)
    if errors:
        return AuditResult(status="fail", category="invalid_report", report_errors=errors)
    try:
        return _audit(load.report, observed)
    except Exception as e:  # the judge must not take the job down; surface it as an audit error
        return AuditResult(status="error", report_errors=[f"$: audit failed: {type(e).__name__}: {e}"])


class _Ledger:
    def __init__(self) -> None:
        self.hallucinations: list[Hallucination] = []
        self.checked: list[str] = []
        self.unverifiable: list[str] = []

    def false(self, claim: str, kind: HallucinationKind, claimed: Any, observed: Any, message: str) -> None:
        self.checked.append(claim)
        self.hallucinations.append(Hallucination(claim, kind, claimed, observed, message))


SCORED_KEYS = ("python_path", "python_version", "framework", "torch_version", "cuda_available", "gpu_count",
               "ddp_expected_ok", "packages")
"""Top-level report keys the audit reads as claims; every other key is listed as not scored."""

_FRAMEWORK_CLAIM_KEYS = ("name", "version")


def not_scored(report: dict[str, Any]) -> list[str]:
    """The report's non-null keys that are no claim, in the report's order: ``env_tool``, ``env_name``,
    ``notes``, unknown keys, and unknown keys inside ``framework`` (as ``framework.KEY``)."""
    out = [key for key, value in report.items() if key not in SCORED_KEYS and value is not None]
    framework = report.get("framework")
    if isinstance(framework, dict):
        out += [f"framework.{key}" for key, value in framework.items()
                if key not in _FRAMEWORK_CLAIM_KEYS and value is not None]
    return out


def _audit(report: dict[str, Any], obs: Observations) -> AuditResult:
    led = _Ledger()
    _check_path(report.get("python_path"), obs, led)
    _check_version("python_version", report.get("python_version"), obs.python_version, "Python", led)
    _check_framework(report.get("framework"), obs, led)
    if report.get("torch_version") is not None:
        _check_framework_version("torch_version", "torch", report["torch_version"], obs, led)
    _check_gpu_claims(report, obs, led)
    ddp = report.get("ddp_expected_ok")
    if ddp is not None:
        if obs.ddp_ok is None:
            led.unverifiable.append("ddp_expected_ok")
        else:
            _check_bool("ddp_expected_ok", ddp, obs.ddp_ok, "the multi-GPU (C4) run succeeds", led)
    if report.get("packages"):
        led.unverifiable.append("packages")
    if led.hallucinations or obs.probe_errors:
        status = "fail"
    elif led.checked:
        status = "pass"
    else:
        status = "skip"
    return AuditResult(status=status, category="runtime" if obs.probe_errors else None,
                       hallucinations=led.hallucinations, checked=led.checked, unverifiable=led.unverifiable,
                       not_scored=not_scored(report), probe_errors=list(obs.probe_errors))


def _check_path(claim: str | None, obs: Observations, led: _Ledger) -> None:
    if claim is None:
        return
    checks = [(obs.python_exists, "does not exist"), (obs.python_executable, "is not executable"),
              (obs.python_runs, "does not run")]
    if all(seen is None for seen, _ in checks):
        led.unverifiable.append("python_path")
        return
    for seen, what in checks:
        if seen is False:
            led.false("python_path", "path", claim, what, f"claimed interpreter {claim} {what}")
            return
    led.checked.append("python_path")


def _check_version(claim_path: str, claim: str | None, seen: str | None, what: str, led: _Ledger) -> None:
    if claim is None:
        return
    if seen is None:
        led.unverifiable.append(claim_path)
        return
    ok = version_matches(claim, seen)
    if ok is None:
        led.unverifiable.append(claim_path)
    elif ok:
        led.checked.append(claim_path)
    else:
        shown = normalize_version(seen)
        if parse_version(claim) is None:
            msg = f"claimed {what} version {claim!r} is not a version; observed {shown}"
        else:
            msg = f"claimed {what} {normalize_version(claim)}, observed {shown}"
        led.false(claim_path, "version", claim, seen, msg)


def _seen(obs: Observations, name: str) -> FrameworkSeen | None:
    """The probe's observation of framework `name`; None when it was not observed (the probe did not
    run, or does not look for that framework)."""
    if obs.frameworks is None:
        return None
    return obs.frameworks.get(normalize_framework(name))


def _missing(seen: FrameworkSeen) -> str:
    if not seen.installed:
        return f"{seen.name} is not installed"
    return f"{seen.name} is installed but does not import ({seen.error or 'no error given'})"


def _check_framework(claim: dict[str, Any] | None, obs: Observations, led: _Ledger) -> None:
    if claim is None:
        return
    name, version = claim.get("name"), claim.get("version")
    if name is not None:
        seen = _seen(obs, name)
        if seen is None:
            led.unverifiable.append("framework.name")
        elif seen.importable:
            led.checked.append("framework.name")
        else:
            led.false("framework.name", "capability", name, "not installed" if not seen.installed else "does not import",
                      f"claimed framework {name}, but {_missing(seen)}")
    if version is not None:
        _check_framework_version("framework.version", name, version, obs, led)


def _check_framework_version(claim_path: str, name: str | None, version: str, obs: Observations,
                             led: _Ledger) -> None:
    """A version claim about framework `name` (``torch_version``, ``framework.version``), or, with
    `name` None (a ``framework`` with a version and no name), about the framework the repo runs on."""
    if name is None:
        if obs.framework is None:
            led.unverifiable.append(claim_path)
            return
        if obs.framework == NO_FRAMEWORK:
            led.false(claim_path, "capability", version, None,
                      f"claimed a framework at version {version}, but no framework is importable")
            return
        name = obs.framework
    seen = _seen(obs, name)
    if seen is None or (seen.installed and seen.version is None):
        led.unverifiable.append(claim_path)
    elif not seen.installed:
        led.false(claim_path, "capability", version, "not installed", f"claimed {name} {version}, but {_missing(seen)}")
    else:
        _check_version(claim_path, version, seen.version, seen.name, led)


def _named_framework(report: dict[str, Any]) -> str | None:
    framework = report.get("framework")
    named = framework.get("name") if isinstance(framework, dict) else None
    if named is None and report.get("torch_version") is not None:
        named = "torch"
    return named


def _check_gpu_claims(report: dict[str, Any], obs: Observations, led: _Ledger) -> None:
    """``cuda_available`` and ``gpu_count``, against the first observation that decides, in order:

    1. the lease: with no GPU leased to the job, CUDA available and any GPU are false whatever a
       framework says; more GPUs than leased are false too (the job could see no others);
    2. the GPU view of the framework the report names when it imports, else of the framework the
       repo runs on;
    3. the absence of any importable framework (the probe looked): no CUDA, no GPU;
    4. the lease again: no GPU leased confirms a denial (``false`` / ``0``).

    Nothing of these observed (the frameworks probe did not run or crashed, or the report names a
    framework the probe does not look for) leaves the claim unverifiable.
    """
    named, leased = _named_framework(report), obs.gpus_leased
    view: FrameworkSeen | None = None
    none_importable = False
    if obs.frameworks is not None and (named is None or _seen(obs, named) is not None):
        for name in (named, obs.framework):
            if name is not None and (seen := _seen(obs, name)) is not None and seen.importable:
                view = seen
                break
        none_importable = view is None and obs.framework == NO_FRAMEWORK
    no_lease = "no GPU was leased to the job"

    cuda = report.get("cuda_available")
    if cuda is not None:
        if cuda and leased == 0:
            led.false("cuda_available", "capability", cuda, False, f"claimed that CUDA is available, but {no_lease}")
        elif view is not None and view.cuda_available is not None:
            _check_bool("cuda_available", cuda, view.cuda_available, f"{view.name} sees CUDA", led)
        elif none_importable:
            _check_bool("cuda_available", cuda, False, "CUDA is available", led, why="no framework is importable")
        elif leased == 0:
            led.checked.append("cuda_available")
        else:
            led.unverifiable.append("cuda_available")

    count = report.get("gpu_count")
    if count is not None:
        if leased is not None and count > leased:
            why = no_lease if leased == 0 else f"the job was leased {leased}"
            led.false("gpu_count", "capability", count, leased, f"claimed {count:g} GPUs, but {why}")
        elif view is not None and view.device_count is not None:
            _check_gpu_count(count, view.device_count, led, f"{view.name} sees {view.device_count}")
        elif none_importable:
            _check_gpu_count(count, 0, led, "no framework is importable")
        elif leased == 0:
            led.checked.append("gpu_count")
        else:
            led.unverifiable.append("gpu_count")


def _check_bool(claim_path: str, claim: bool, seen: bool, what: str, led: _Ledger, why: str | None = None) -> None:
    if claim == seen:
        led.checked.append(claim_path)
    else:
        said = "claimed" if claim else "denied"
        fact = why or ("it does" if seen else "it does not")
        led.false(claim_path, "capability", claim, seen, f"{said} that {what}, but {fact}")


def _check_gpu_count(claim: int | float, seen: int, led: _Ledger, why: str) -> None:
    if claim == seen:
        led.checked.append("gpu_count")
    else:
        led.false("gpu_count", "capability", claim, seen, f"claimed {claim:g} GPUs, but {why}")
