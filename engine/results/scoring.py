"""Scores of a run: per-agent pyramid pass rates with their denominators, C0 ratios, C5 counts, spend.

Denominators are explicit: a tier counts a job only when it was judged (`pass` or `fail`). Skips
(not applicable, insufficient hardware) and infrastructure errors leave the denominator and are
counted in their own columns, so a missing GPU never reads as an agent failure. A job whose final
state is `error` is counted per agent by its category, so it never vanishes silently from the pass
rates; when that category is an infrastructure one (a failed checkout, the model's API down:
`outcomes.INFRA_CATEGORIES`) the job is outside every denominator, whatever an earlier attempt
judged. Any other error (a phase timeout an agent's environment can provoke, say) keeps what was
judged: an agent cannot leave the denominators by making its own job fail.

Dollars are shown by engine/money.py (unknown is `—`, never `$0.00`); JSON keeps the number, null
when unknown.

Every score is of one scoring of the run (engine/results/scorings.py): by default the latest, and every
rendering names it and its rules version, so a rescored run is never mistaken for its original.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .scorings import Scoring, list_scorings, not_rescored, not_rescored_lines, resolve_scoring
from .scorings import header as scoring_header
from ..store.db import StoreReader
from .findings import job_findings
from ..money import add, spend, usd
from ..outcomes import errors_text, is_infra
from ..tiers import ALL_TIERS
from ..runfacts import run_tiers

PYRAMID = ("C0", "C1", "C2", "C3", "C4")
HALLUCINATION_KINDS = ("path", "version", "capability")


@dataclass
class TierScore:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    insufficient_hardware: int = 0
    errors: int = 0

    @property
    def denominator(self) -> int:
        return self.passed + self.failed

    @property
    def rate(self) -> float | None:
        return self.passed / self.denominator if self.denominator else None

    def text(self) -> str:
        return f"{self.passed}/{self.denominator}"


@dataclass
class AgentScore:
    agent: str
    jobs: int = 0
    tiers: dict[str, TierScore] = field(default_factory=lambda: {tier: TierScore() for tier in ALL_TIERS})
    c0_missing: int = 0
    c0_total: int = 0
    c0_third_party_missing: int = 0
    c0_third_party_total: int = 0
    hallucinations: Counter = field(default_factory=Counter)
    report_problems: Counter = field(default_factory=Counter)
    agent_seconds: float = 0.0  # working time only: never queue, hold or pause
    queue_seconds: float = 0.0  # waits in a cluster's queue, apart
    input_tokens: int | None = None  # None: no job reported tokens (a baseline, a command agent)
    output_tokens: int | None = None
    cost_usd: float | None = None  # None: no job's cost is known
    cost_partial: bool = False  # some tokens had no price: a known cost is a lower bound
    env_bytes: list[int] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)  # jobs that ended in `error`, by category

    def add_cost(self, cost: float | None, partial: bool) -> None:
        self.cost_usd, self.cost_partial = add((self.cost_usd, self.cost_partial), (cost, partial))

    @property
    def cost_text(self) -> str:
        return usd(self.cost_usd, self.cost_partial)

    @property
    def agent_time_text(self) -> str:
        """`12.3s`, or `12.3s (+40.1s queued)` when its jobs also waited in a cluster's queue."""
        queued = f" (+{self.queue_seconds:.1f}s queued)" if self.queue_seconds >= 0.05 else ""
        return f"{self.agent_seconds:.1f}s{queued}"

    @property
    def tokens_text(self) -> str:
        """`1200/340`, or `—` when no job reported tokens (unknown, as `resenv show` says it: never 0)."""
        return "—" if self.input_tokens is None else f"{self.input_tokens}/{self.output_tokens or 0}"

    @property
    def c5_scored(self) -> bool:
        """Whether C5 judged any job of the agent: if not, its hallucination counts are unknown, not 0."""
        return self.tiers["C5"].denominator > 0

    def hallucination_counts(self) -> dict[str, int] | None:
        """Contradicted claims by kind, every kind present (0 when none); None when C5 was not scored."""
        return {kind: self.hallucinations.get(kind, 0) for kind in HALLUCINATION_KINDS} if self.c5_scored else None

    @property
    def errors_text(self) -> str:
        return errors_text(self.errors)

    @property
    def env_bytes_median(self) -> int | None:
        """The median size of the agent's environments (the upper one of an even count); None: none measured."""
        return sorted(self.env_bytes)[len(self.env_bytes) // 2] if self.env_bytes else None

    @property
    def c0_paper_ratio(self) -> float | None:
        return 1 - self.c0_missing / self.c0_total if self.c0_total else None

    @property
    def c0_third_party_ratio(self) -> float | None:
        if not self.c0_third_party_total:
            return None
        return 1 - self.c0_third_party_missing / self.c0_third_party_total


@dataclass
class RunScores:
    run: dict[str, Any]
    agents: dict[str, AgentScore]
    repos: list[dict[str, Any]]  # one pyramid row per job: repo, agent, tier -> status/category
    per_job_hallucinations: list[dict[str, Any]]
    findings: list[dict[str, Any]] = field(default_factory=list)  # integrity findings, one row each
    errors: list[dict[str, Any]] = field(default_factory=list)  # jobs that ended in `error`, one row each
    scoring: Scoring | None = None  # which scoring of the run these are
    scorings: list[Scoring] = field(default_factory=list)  # all of them, the original first
    not_rescored: list[dict[str, Any]] = field(default_factory=list)  # jobs this scoring did not judge

    def header(self) -> str:
        """`scoring: rescore 1 (rules 2026.12), original: rules …`: what every rendering starts with."""
        return scoring_header(self.scoring, self.scorings) if self.scoring is not None else ""

    def header_lines(self) -> list[str]:
        return [self.header(), *not_rescored_lines(self.not_rescored)] if self.scoring is not None else []


def choose_scoring(
    reader: StoreReader, run_id: str, ref: Scoring | str | int | None = "latest",
) -> tuple[Scoring, list[Scoring]]:
    """The scoring `ref` names (`original`, `latest` or a rescore's number) and every scoring of the run."""
    scorings = list_scorings(reader.rows, run_id)
    if isinstance(ref, Scoring):
        return ref, scorings
    return resolve_scoring(scorings, ref), scorings


def latest_results(
    reader: StoreReader, run_id: str, scoring: Scoring | None = None,
) -> dict[int, dict[str, dict[str, Any]]]:
    """The newest result of each tier of each job in one scoring (default: the latest); within a
    scoring a tier retry supersedes what it re-ran."""
    if scoring is None:
        scoring, _ = choose_scoring(reader, run_id)
    where, params = scoring.where()
    latest: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    rows = reader.conn.execute(
        # Only C0's figures and C5's findings are read from the evidence: skip the other blobs.
        "SELECT job_id, tier, status, category,"
        " CASE WHEN tier IN ('C0', 'C5') THEN evidence_json END AS evidence_json"
        f" FROM tier_results WHERE run_id = ? AND {where} ORDER BY id", (run_id, *params))
    for job_id, tier, status, category, evidence_json in rows:
        latest[job_id][tier] = {"status": status, "category": category, "evidence_json": evidence_json}
    for tiers in latest.values():
        for row in tiers.values():
            text = row.pop("evidence_json")
            row["evidence"] = json.loads(text) if text else {}
    return latest


def score_run(reader: StoreReader, run_id: str, scoring: Scoring | str | int | None = "latest") -> RunScores:
    """Scores of one scoring of the run (`latest` by default; `original` or a rescore's number)."""
    run = reader.run(run_id)
    assert run is not None
    jobs = reader.jobs(run_id)
    chosen, scorings = choose_scoring(reader, run_id, scoring)
    results = latest_results(reader, run_id, chosen)
    agents: dict[str, AgentScore] = {}
    repos, hallucinated = [], []
    # Agent time is the agent phases' working time (queue, holds and pauses left out); a phase recorded
    # before that was kept has its wall time. Queue time is every phase's wait in a cluster's queue.
    times = {row["job_id"]: row for row in reader.rows(
        "SELECT a.job_id, SUM(CASE WHEN p.name = 'agent' THEN COALESCE(p.active_s, p.finished_at - p.started_at)"
        " END) AS seconds, SUM(p.queued_s) AS queued FROM phases p JOIN attempts a"
        " ON a.id = p.attempt_id WHERE a.run_id = ? GROUP BY a.job_id", (run_id,))}
    usage = {row["job_id"]: row for row in reader.rows(
        "SELECT job_id, SUM(input_tokens + cached_input_tokens + cache_write_tokens) AS input,"
        " SUM(output_tokens) AS output, SUM(cost_usd) AS cost, COUNT(cost_usd) AS priced, COUNT(*) AS n"
        " FROM usage WHERE run_id = ? GROUP BY job_id", (run_id,))}
    ended = {row["job_id"]: row for row in reader.rows(  # the latest full attempt: why a job in `error` ended
        "SELECT a.job_id, a.category, a.reason FROM attempts a WHERE a.run_id = ? AND a.scope = 'job'"
        " AND a.number = (SELECT MAX(number) FROM attempts WHERE job_id = a.job_id AND scope = 'job')", (run_id,))}
    errors = []
    for job in jobs:
        score = agents.setdefault(job["agent"], AgentScore(job["agent"]))
        score.jobs += 1
        if (spent := times.get(job["id"])) is not None:
            score.agent_seconds += spent["seconds"] or 0.0
            score.queue_seconds += spent["queued"] or 0.0
        if job["id"] in usage:
            score.input_tokens = (score.input_tokens or 0) + (usage[job["id"]]["input"] or 0)
            score.output_tokens = (score.output_tokens or 0) + (usage[job["id"]]["output"] or 0)
            found = usage[job["id"]]
            score.add_cost(*spend(found["cost"], found["priced"], found["n"]))
        failed = job["state"] == "error"  # counted by its category
        category = (ended.get(job["id"]) or {}).get("category") if failed else None
        outside = failed and is_infra(category)  # infrastructure: outside every denominator
        row: dict[str, Any] = {"repo": job["repo_id"], "agent": job["agent"], "state": job["state"],
                               "category": category, "reason": job["reason"] if failed else None}
        if failed:
            score.errors[category or "uncategorized"] += 1
            reason = job["reason"] or (ended.get(job["id"]) or {}).get("reason")
            errors.append({"repo": job["repo_id"], "agent": job["agent"], "category": category,
                           "infra": is_infra(category), "reason": reason})
        for tier in ALL_TIERS:
            result = results.get(job["id"], {}).get(tier)
            row[tier] = None if result is None else {"status": result["status"], "category": result["category"]}
            if result is not None and not outside:
                _count(score, tier, result)
        repos.append(row)
        c5 = results.get(job["id"], {}).get("C5") if not outside else None
        if c5 is not None:
            evidence = c5["evidence"]
            kinds = Counter(item["kind"] for item in evidence.get("hallucinations", []))
            if kinds:
                hallucinated.append({"repo": job["repo_id"], "agent": job["agent"], **kinds})
            environment = evidence.get("environment") or {}
            if environment.get("size_bytes") is not None:
                score.env_bytes.append(environment["size_bytes"])
    by_job = job_findings(reader, run_id)
    findings = [{"repo": job["repo_id"], "agent": job["agent"], **{k: f[k] for k in ("kind", "path", "action")}}
                for job in jobs for f in by_job.get(job["id"], [])]
    return RunScores(run=run, agents=agents, repos=repos, per_job_hallucinations=hallucinated, findings=findings,
                     errors=errors, scoring=chosen, scorings=scorings, not_rescored=not_rescored(reader.rows, chosen))


def _count(score: AgentScore, tier: str, result: dict[str, Any]) -> None:
    tally = score.tiers[tier]
    status, category = result["status"], result["category"]
    if status == "pass":
        tally.passed += 1
    elif status == "fail":
        tally.failed += 1
    elif status == "skip":
        tally.skipped += 1
        if category == "insufficient_hardware":
            tally.insufficient_hardware += 1
    else:
        tally.errors += 1
    evidence = result["evidence"]
    if tier == "C0" and "census" in evidence:
        # A C0 that could not run (error) carries all-missing figures: it counts, never as zero-missing.
        census = evidence["census"]
        missing = set(evidence.get("missing", []))
        third_party = {module["name"] for module in census.get("modules", []) if module.get("kind") == "third_party"}
        score.c0_missing += len(missing)
        score.c0_total += census.get("total", 0)
        score.c0_third_party_missing += len((missing | set(evidence.get("missing_source", []))) & third_party)
        score.c0_third_party_total += census.get("third_party", 0)
    if tier == "C5":
        if category in ("missing_report", "invalid_report"):
            score.report_problems[category] += 1
        for item in evidence.get("hallucinations", []):
            score.hallucinations[item["kind"]] += 1


# -- rendering ------------------------------------------------------------------------------
def state_note(run: dict[str, Any]) -> str:
    """` · interrupted`: what a title adds for a run that has not finished (its numbers are partial)."""
    return "" if run["state"] == "finished" else f" · {run['state']}"


def _state_lines(run: dict[str, Any]) -> list[str]:
    return [] if run["state"] == "finished" else [f"run state: {run['state']} (the numbers are of the jobs judged so far)"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def c0_text(resolved: int, total: int) -> str:
    """`41/41 (100.0%)`: imports resolved out of all (the figure's C0 bar prints the same); `—`: no census."""
    return f"{resolved}/{total} ({_pct(resolved / total)})" if total else "—"


NOT_SCORED = "—"  # a C5 count of an agent C5 judged no job of: unknown, never 0


def agent_table(scores: RunScores) -> tuple[list[str], list[list[str]]]:
    header = ["agent", "jobs", "C0 paper", "C0 3rd-party", *PYRAMID[1:], "C5 path", "C5 version",
              "C5 capability", "no/invalid report", "agent time", "tokens in/out", "cost", "env size",
              "errors"]
    rows = []
    for score in scores.agents.values():
        tiers = []
        for tier in PYRAMID[1:]:
            tally = score.tiers[tier]
            text = f"{tally.text()} ({_pct(tally.rate)})"
            if tally.insufficient_hardware:
                text += f" [{tally.insufficient_hardware} no hw]"
            if tally.errors:
                text += f" [{tally.errors} err]"
            tiers.append(text)
        size = score.env_bytes_median
        counts = score.hallucination_counts()
        rows.append([
            score.agent, str(score.jobs), c0_text(score.c0_total - score.c0_missing, score.c0_total),
            c0_text(score.c0_third_party_total - score.c0_third_party_missing, score.c0_third_party_total), *tiers,
            *(NOT_SCORED if counts is None else str(counts[kind]) for kind in HALLUCINATION_KINDS),
            str(sum(score.report_problems.values())), score.agent_time_text,
            score.tokens_text, score.cost_text,
            "—" if size is None else f"{size / 2**20:.0f} MiB (median)", score.errors_text or "—",
        ])
    return header, rows


def repo_table(scores: RunScores) -> tuple[list[str], list[list[str]]]:
    header = ["repo", "agent", "state", *ALL_TIERS]
    rows = []
    for row in scores.repos:
        cells = []
        for tier in ALL_TIERS:
            result = row[tier]
            if result is None:
                cells.append("·")
            else:
                cells.append(result["status"] + (f" ({result['category']})" if result["category"] else ""))
        state = f"{row['state']}/{row['category']}" if row["state"] == "error" and row["category"] else row["state"]
        rows.append([row["repo"], row["agent"], state, *cells])
    return header, rows


def render(scores: RunScores, fmt: str) -> str:
    """The report as markdown (`md`), `json` or `latex`; CSV, one table per file, is engine/results/report_csv.py."""
    if fmt == "json":
        return json.dumps(to_json(scores), indent=2)
    tables = [("Agents", *agent_table(scores)), ("Repos", *repo_table(scores))]
    if scores.errors:
        tables.append(("Jobs that ended in error (infrastructure ones outside every denominator)", ["repo", "agent", "category", "infra", "reason"],
                       [[e["repo"], e["agent"], e["category"] or "uncategorized", "yes" if e["infra"] else "no",
                         e["reason"] or ""] for e in scores.errors]))
    if scores.findings:
        tables.append(("Integrity findings", ["repo", "agent", "kind", "path", "action"],
                       [[f["repo"], f["agent"], f["kind"], f["path"], f["action"]] for f in scores.findings]))
    if fmt == "latex":
        comments = "".join(f"% {_ascii(line)}\n" for line in [*scores.header_lines(), *_state_lines(scores.run)])
        return comments + "\n\n".join(_latex(title, header, rows) for title, header, rows in tables) + "\n"
    parts = [f"# resenv report · run {scores.run['id']} · {scores.run['name']}{state_note(scores.run)}"]
    if scores.scoring is not None:
        parts.append("\n".join(scores.header_lines()))
    for title, header, rows in tables:
        parts.append(f"## {title}\n\n" + _markdown(header, rows))
    parts.append("Pass rates are passed/judged; skips (`no hw`: too few GPUs on the host) and infrastructure "
                 "errors (`err`) are outside the denominator, and so is every job that ended in error (counted per "
                 "agent by category in `errors`). C0 paper = 1 − missing/all imports (stdlib and "
                 "repo-own included, as the paper counts); C0 3rd-party = the same over third-party imports only.")
    return "\n\n".join(parts) + "\n"


def to_json(scores: RunScores) -> dict[str, Any]:
    agents = {}
    for name, score in scores.agents.items():
        agents[name] = {
            "jobs": score.jobs,
            "c0": {"paper_ratio": score.c0_paper_ratio, "third_party_ratio": score.c0_third_party_ratio,
                   "missing": score.c0_missing, "total": score.c0_total,
                   "third_party_missing": score.c0_third_party_missing, "third_party_total": score.c0_third_party_total},
            "tiers": {tier: asdict(tally) | {"denominator": tally.denominator, "rate": tally.rate}
                      for tier, tally in score.tiers.items()},
            "hallucinations": score.hallucination_counts(), "report_problems": dict(score.report_problems),
            **({} if score.c5_scored else {"hallucinations_not_scored": _why_c5_not_scored(scores.run)}),
            "agent_seconds": score.agent_seconds, "queue_seconds": score.queue_seconds,
            "input_tokens": score.input_tokens,
            "output_tokens": score.output_tokens, "cost_usd": score.cost_usd, "cost_partial": score.cost_partial,
            "env_bytes": score.env_bytes,
            "errors": {"total": sum(score.errors.values()), "by_category": dict(score.errors),
                       "infra": sum(n for category, n in score.errors.items() if is_infra(category)),
                       "outside_denominators": "infra"},  # which of them: the infrastructure ones
        }
    scoring = None
    if scores.scoring is not None:
        scoring = scores.scoring.to_json() | {"header": scores.header(), "not_rescored": scores.not_rescored,
                                              "original_rules_version": scores.scorings[0].rules_version}
    return {"run": {key: scores.run[key] for key in ("id", "name", "suite", "state")}, "scoring": scoring,
            "scorings": [item.to_json() for item in scores.scorings], "agents": agents,
            "repos": scores.repos, "hallucinations_per_job": scores.per_job_hallucinations,
            "integrity_findings": scores.findings, "errors": scores.errors}


def _why_c5_not_scored(run: dict[str, Any]) -> str:
    """Why an agent has no C5 counts: the run did not select C5, or C5 judged none of its jobs."""
    if "C5" not in run_tiers(run):
        return "C5 is not among the run's tiers"
    return "C5 judged no job of this agent"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


LATEX_ESCAPES = str.maketrans({"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                               "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"})


# What the tables print beyond ASCII, in plain LaTeX: the file compiles with pdflatex and no input
# encoding package. Any other character (in a job's reason, say) becomes `?`.
LATEX_NON_ASCII = {"—": "---", "–": "--", "·": "--", "−": "-", "…": r"\ldots{}", "×": r"$\times$",
                   "→": r"$\to$"}


def _ascii(text: str) -> str:
    """`text` (already escaped for LaTeX) in ASCII: the characters above spelled in LaTeX, others `?`."""
    for char, plain in LATEX_NON_ASCII.items():
        text = text.replace(char, plain)
    return text.encode("ascii", "replace").decode("ascii")


def _latex(title: str, header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return " & ".join(_ascii(cell.translate(LATEX_ESCAPES)) for cell in cells) + r" \\"

    body = "\n".join(line(row) for row in rows)
    return (f"% {_ascii(title)}\n\\begin{{tabular}}{{{'l' * len(header)}}}\n\\toprule\n{line(header)}\n\\midrule\n"
            f"{body}\n\\bottomrule\n\\end{{tabular}}")
