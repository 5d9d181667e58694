"""`resenv run --dry-run`: the job plan of a run, printed without touching the store or the network.

One line per job (repo task × agent) with the tiers it will score (C1/C3/C4 only where the repo has
an entrypoint, C0/C2/C5 always), the GPUs it leases, and the assets it declares.
"""

from __future__ import annotations

from dataclasses import dataclass

from .runs import RunPlan
from .spec import TIER_CODES, Benchmark, Entrypoint
from .wording import counted


@dataclass(frozen=True)
class PlannedJob:
    key: str
    repo: str
    agent: str
    source: str
    tiers: tuple[str, ...]
    skipped: dict[str, str]  # tier code -> reason
    gpus: int
    assets: tuple[str, ...]


def plan_jobs(bench: Benchmark, plan: RunPlan) -> list[PlannedJob]:
    """The jobs `create_run` would insert, with what each needs; raises SpecLookupError on bad names."""
    suite = bench.suite(plan.suite)
    repos = [suite.repo(repo_id) for repo_id in plan.repos] if plan.repos else list(suite.repos)
    for agent in plan.agents:
        bench.agent(agent)
    for host in plan.hosts:
        bench.host(host)
    jobs = []
    for repo in repos:
        runnable, skipped = set(), {}
        for tier, target in repo.tiers().items():
            if isinstance(target, Entrypoint):
                runnable.add(TIER_CODES[tier])
            else:
                skipped[TIER_CODES[tier]] = target
        tiers = tuple(t for t in plan.tiers if t in runnable or t not in TIER_CODES.values())
        source = getattr(repo.source, "git", None)
        source = f"{source}@{repo.source.commit[:12]}" if source else str(getattr(repo.source, "path", ""))
        assets = tuple(asset.label() for asset in repo.assets)
        for agent in plan.agents:
            jobs.append(PlannedJob(f"{repo.id}/{agent}", repo.id, agent, source, tiers,
                                   {k: v for k, v in skipped.items() if k in plan.tiers},
                                   repo.gpus_needed(plan.tiers), assets))
    return jobs


def render_plan(plan: RunPlan, jobs: list[PlannedJob]) -> str:
    lines = [f"dry run: suite {plan.suite} · {counted(len({j.repo for j in jobs}), 'repo')} × "
             f"{counted(len(plan.agents), 'agent')} = {counted(len(jobs), 'job')} · hosts {', '.join(plan.hosts)}"
             f" · tiers {','.join(plan.tiers) or 'none'}"]
    for job in jobs:
        lines.append(f"{job.key}  tiers {','.join(job.tiers) or '-'}  gpus {job.gpus}  "
                     f"assets {', '.join(job.assets) or 'none declared'}  source {job.source}")
        for code, reason in job.skipped.items():
            lines.append(f"    {code} skip: {reason}")
    counts = {code: sum(code in j.tiers for j in jobs) for code in plan.tiers}
    lines.append("jobs per tier: " + "  ".join(f"{code} {n}" for code, n in counts.items()))
    lines.append(f"max GPUs per job: {max((j.gpus for j in jobs), default=0)}; nothing was stored or fetched")
    return "\n".join(lines) + "\n"
