"""`resenv run --dry-run`: the job plan of a run, printed without touching the store or the network.

The plan says what the run would do, not what the spec wishes: per job the tiers it will score, the
ones it will skip and why (not applicable to the repo, or too few GPUs on the run's hosts), the GPUs
it leases (only for the selected tiers that need them: `--tiers C0,C1,C5` leases none), and each asset
as cached, not cached or unpinned; per host the GPUs it has, the jobs it can take, and which tiers run
and skip there. The lease rules are the scheduler's own (`RepoTask.gpus_needed`, `HostPool`): a job
goes to a host with enough GPUs, or, where no host of the run has enough, to those with the most.
GPU counts come from the spec, or from this machine's driver for a local `gpus: auto`; a remote
host's `auto` is asked only when the run starts, so the plan says it does not know.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .assets import AssetCache
from .hosts.pool import detect_local_gpus
from .runs import RunPlan
from .spec import Benchmark, Entrypoint, GitSource
from .tiers import ENTRYPOINT_OF, GPUS_FOR
from .wording import counted, fold

HARDWARE = "insufficient_hardware"
NOT_APPLICABLE = "not_applicable"
GPUS_FROM = {"spec": "the spec", "driver": "this machine's driver"}


@dataclass(frozen=True)
class Skip:
    tier: str
    category: str  # not_applicable | insufficient_hardware
    reason: str


@dataclass(frozen=True)
class HostSkip:
    tier: str
    category: str  # insufficient_hardware: a job placed here would run the tier on a bigger host
    reason: str
    jobs: int  # the jobs placed here that would run the tier with enough GPUs


@dataclass(frozen=True)
class PlannedAsset:
    label: str
    status: str  # cached | not cached | unpinned


@dataclass(frozen=True)
class PlannedHost:
    name: str
    kind: str
    gpus: int | None  # None: unknown until the run starts (a remote host's `gpus: auto`)
    gpus_from: str  # spec | driver | unknown
    jobs: int  # jobs the scheduler may place here
    runs: tuple[str, ...]  # tiers some job placed here will score
    skips: tuple[HostSkip, ...]  # tiers jobs placed here would run on a bigger host, with why
    note: str | None = None  # why the host takes no job, when it takes none


@dataclass(frozen=True)
class PlannedJob:
    key: str
    repo: str
    agent: str
    source: str
    tiers: tuple[str, ...]  # the tiers it will score
    skipped: tuple[Skip, ...]
    gpus: int  # the GPUs it leases
    gpus_wanted: int  # what its selected tiers ask for (more than `gpus` when no host has that many)
    hosts: tuple[str, ...]  # the hosts it may run on
    assets: tuple[PlannedAsset, ...]
    assets_needed: bool  # whether a tier it scores runs the repository's code (what assets are for)


@dataclass(frozen=True)
class Plan:
    suite: str
    agents: tuple[str, ...]
    tiers: tuple[str, ...]
    hosts: tuple[PlannedHost, ...]
    jobs: tuple[PlannedJob, ...]

    def to_json(self) -> dict[str, Any]:
        """The plan as `--dry-run --json` prints it (documented in README, 'Usage')."""
        tiers = {code: sum(code in job.tiers for job in self.jobs) for code in self.tiers}
        return {**asdict(self), "jobs_per_tier": tiers, "max_gpus_per_job": max((j.gpus for j in self.jobs), default=0),
                "stored": False}


def host_gpus(spec: Any) -> tuple[int | None, str]:
    """The GPU count of a host as the run would see it, and where that count comes from."""
    gpus = getattr(spec, "gpus", "auto")
    if gpus != "auto":
        return (gpus if isinstance(gpus, int) else len(gpus)), "spec"
    if spec.kind == "local":
        return len(detect_local_gpus()), "driver"
    return None, "unknown"


def tier_gpus(repo: Any, code: str) -> int:
    """GPUs tier `code` runs on for `repo` (0 for the tiers that need none)."""
    entry = repo.tiers().get(ENTRYPOINT_OF.get(code, ""))
    if isinstance(entry, Entrypoint):
        return entry.gpus
    return GPUS_FOR.get(code, 0)


def asset_statuses(repo: Any, cache: AssetCache) -> tuple[PlannedAsset, ...]:
    """Each asset of the repo as the engine's cache holds it, then those not pinned yet."""
    pinned = tuple(PlannedAsset(asset.label(), "cached" if cache.is_cached(asset) else "not cached")
                   for asset in repo.assets)
    return pinned + tuple(PlannedAsset(label, "unpinned") for label in repo.unpinned_assets)


def plan_jobs(bench: Benchmark, plan: RunPlan, cache: AssetCache) -> Plan:
    """The jobs `create_run` would insert and where they would go; raises SpecLookupError on bad names."""
    suite = bench.suite(plan.suite)
    repos = [suite.repo(repo_id) for repo_id in plan.repos] if plan.repos else list(suite.repos)
    for agent in plan.agents:
        bench.agent(agent)
    counts = {name: host_gpus(bench.host(name)) for name in plan.hosts}
    known = [gpus for gpus, _ in counts.values() if gpus is not None]
    unknown = len(known) < len(counts)
    most = None if unknown else max(known)
    jobs = []
    for repo in repos:
        wanted = repo.gpus_needed(plan.tiers)
        leased = wanted if most is None else min(wanted, most)
        # the scheduler's placement (HostPool.lease): a host with at least the GPUs the job leases
        where = tuple(name for name, (gpus, _) in counts.items() if gpus is None or gpus >= leased)
        runs, skipped = [], []
        for code in plan.tiers:
            target = repo.tiers().get(ENTRYPOINT_OF.get(code, ""))
            if isinstance(target, str):
                skipped.append(Skip(code, NOT_APPLICABLE, target))
            elif code in GPUS_FOR and tier_gpus(repo, code) > leased:
                have = f"at most {counted(leased, 'GPU')}" if leased else "no GPU"
                skipped.append(Skip(code, HARDWARE, f"needs {counted(tier_gpus(repo, code), 'GPU')}; "
                                                    f"the run's hosts have {have}"))
            else:
                runs.append(code)
        source = (f"{repo.source.git}@{repo.source.commit[:12]}" if isinstance(repo.source, GitSource)
                  else str(repo.source.path))
        assets = asset_statuses(repo, cache)
        needed = any(code in ENTRYPOINT_OF for code in runs)
        for agent in plan.agents:
            jobs.append(PlannedJob(f"{repo.id}/{agent}", repo.id, agent, source, tuple(runs), tuple(skipped),
                                   leased, wanted, where, assets, needed))
    hosts = tuple(_planned_host(name, bench.host(name).kind, *counts[name], jobs, plan.tiers) for name in plan.hosts)
    return Plan(plan.suite, tuple(plan.agents), tuple(plan.tiers), hosts, tuple(jobs))


def _planned_host(name: str, kind: str, gpus: int | None, gpus_from: str, jobs: list[PlannedJob],
                  tiers: tuple[str, ...]) -> PlannedHost:
    here = [job for job in jobs if name in job.hosts]
    runs = tuple(code for code in tiers if any(code in job.tiers for job in here))
    without = "no GPU on this host" if not gpus else f"the host has {counted(gpus or 0, 'GPU')}"
    skips = []
    for code in tiers:
        wanting = sum(any(skip.tier == code and skip.category == HARDWARE for skip in job.skipped) for job in here)
        if wanting:
            skips.append(HostSkip(code, HARDWARE, without, wanting))
    note = None
    if not here and jobs:
        fewest = min(job.gpus for job in jobs)
        note = (f"takes no job: every job leases at least {counted(fewest, 'GPU')} and another host of the run "
                f"has them (this one has {gpus})")
    return PlannedHost(name, kind, gpus, gpus_from, len(here), runs, tuple(skips), note)


def render_plan(plan: Plan) -> str:
    """The plan as lines for an 80-column terminal: hosts first (the tiers they run, the tiers jobs
    placed there skip for want of GPUs and for how many jobs), then each job, its skips with their
    category, its assets and its source, paths and names on lines of their own."""
    jobs = plan.jobs
    lines = fold(f"dry run: suite {plan.suite} · {counted(len({j.repo for j in jobs}), 'repo')} × "
                 f"{counted(len(plan.agents), 'agent')} = {counted(len(jobs), 'job')} · "
                 f"hosts {', '.join(host.name for host in plan.hosts)} · tiers {','.join(plan.tiers) or 'none'}")
    for host in plan.hosts:
        gpus = "GPUs unknown until the run starts, gpus: auto" if host.gpus is None else \
            f"{counted(host.gpus, 'GPU')} from {GPUS_FROM[host.gpus_from]}"
        line = f"host {host.name} ({host.kind}, {gpus}): "
        if host.note:
            lines += fold(line + host.note)
            continue
        lines += fold(line + f"{counted(host.jobs, 'job')} may run here")
        lines.append(f"    runs {','.join(host.runs) or 'no tier'}")
        grouped: dict[tuple[int, str], list[str]] = {}
        for skip in host.skips:
            grouped.setdefault((skip.jobs, f"{skip.category}: {skip.reason}"), []).append(skip.tier)
        for (n, reason), codes in grouped.items():
            verb = "skips" if len(codes) == 1 else "skip"
            lines += fold(f"{','.join(codes)} {verb} for {counted(n, 'job')} ({reason})", indent="    ")
    for job in jobs:
        lines.append(f"{job.key}  tiers {','.join(job.tiers) or '-'}  gpus {job.gpus}")
        for skip in job.skipped:
            lines += fold(f"{skip.tier} skip ({skip.category}): {skip.reason}", indent="    ")
        lines += _asset_lines(job)
        lines.append(f"    source {job.source}")
    counts = plan.to_json()["jobs_per_tier"]
    lines += fold("jobs per tier: " + "  ".join(f"{code} {n}" for code, n in counts.items()))
    lines.append(f"max GPUs per job: {max((j.gpus for j in jobs), default=0)}; nothing was stored or fetched")
    return "\n".join(lines)


def _asset_lines(job: PlannedJob) -> list[str]:
    """What a job's tiers need fetched: each asset on its own line, or why none is needed."""
    if not job.assets:
        return ["    assets none"]
    if not job.assets_needed:
        codes = ", ".join(ENTRYPOINT_OF)
        return [f"    assets not needed: no selected tier runs the code ({codes})"]
    return [f"    asset {asset.label} [{asset.status}]" for asset in job.assets]
