"""The closing summary of `resenv run`: how the run went, where its records are, what to type next.

Every number here is read from the scores `resenv report` prints (engine/results/scoring.py `score_run`
and `agent_table`) and the job rows `resenv show` prints (engine/results/views.py `job_rows`), never
computed a second way: the summary of a run and its report cannot disagree. It reads the store
after the engine has recorded the run's end, so an interrupted or cancelled run gets one too.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ..attempt import attempt_dir
from ..outcomes import errors_text, state_text
from ..paths import absolute, default_db
from .scoring import HALLUCINATION_KINDS, PYRAMID, RunScores, agent_table, score_run
from ..store.db import StoreReader
from .views import TIERS, job_rows
from ..wording import counted, duration, fold

WIDTH = 80
"""The summary is laid out for an 80-column terminal; only a path or a command with one runs longer."""


def summary_lines(db: Path, run_id: str) -> list[str]:
    """The summary of run `run_id` as plain lines (no markup), from its latest scoring."""
    reader = StoreReader(db)
    try:
        run = reader.run(run_id)
        assert run is not None
        scores = score_run(reader, run_id)
        rows = job_rows(reader, run_id, scores.scoring)
    finally:
        reader.close()
    states = Counter(row["state"] for row in rows)
    took = duration(run["finished_at"] - run["started_at"]) if run["started_at"] and run["finished_at"] else "—"
    lines = fold(f"run {run_id} {run['state']} in {took}: {counted(len(rows), 'job')} ("
                 + ", ".join(f"{n} {state}" for state, n in sorted(states.items())) + ")")
    lines += scores.header_lines()
    lines += _pyramid(scores)
    lines += _failures(rows, scores.repos, Path(run["data_dir"]))
    lines += [f"store:    {db}", f"raw logs: {Path(run['data_dir']) / 'jobs'}/<repo>--<agent>/attempt-<n>/logs/"]
    lines += _next_steps(run_id, run["state"], rows, db)
    return lines


def _pyramid(scores: RunScores) -> list[str]:
    """Per agent: C0–C4 as passed/judged (what `report` prints), C5's hallucinations and unusable
    reports, and the jobs that ended in error by category (outside the denominators when infra)."""
    header, table = agent_table(scores)
    lines = ["pyramid (passed/judged; skips and infra errors are outside the denominators):"]
    for score, cells in zip(scores.agents.values(), table):
        cell = dict(zip(header, cells))
        c0 = score.tiers["C0"]
        parts = [f"C0 {c0.text()} (imports {cell['C0 paper']})", *(f"{tier} {cell[tier]}" for tier in PYRAMID[1:])]
        lines += _packed(f"  {score.agent} ({counted(score.jobs, 'job')}):", parts)
        if score.tiers["C5"].denominator:
            c5 = ", ".join(f"{cell['C5 ' + kind]} {kind}" for kind in HALLUCINATION_KINDS)
            lines.append(f"    C5 hallucinations: {c5}; no/invalid report: {cell['no/invalid report']}")
        else:  # no report was audited: zero hallucinations would be a count of nothing
            lines.append("    C5 not scored")
        if score.errors:
            lines += fold(f"ended in error: {errors_text(score.errors)}", indent="    ")
    return lines


def _packed(head: str, parts: list[str], width: int = WIDTH) -> list[str]:
    """`head` and the parts two spaces apart, on as many lines of `width` as they need; a part is
    never split, so a tier and its numbers stay together."""
    lines, line = [], head
    for part in parts:
        if line != head and len(line) + 2 + len(part) > width:
            lines.append(line)
            line = "    " + part
        else:
            line += (" " if line == head else "  ") + part
    return [*lines, line]


def _failures(rows: list[dict[str, Any]], verdicts: list[dict[str, Any]], data_dir: Path) -> list[str]:
    """Tier failures and error jobs by category, then each job that has one: its failing tiers, each
    with why and the raw log to read, or why it ended in error and its logs; then the jobs that did
    not finish. `verdicts` are the scores' rows (`RunScores.repos`), one per job in the order of
    `rows`. Paths go on lines of their own, so that the rest fits 80 columns."""
    by_category: Counter[str] = Counter()
    failed: list[str] = []
    unfinished: list[str] = []
    not_finished = 0
    for row, judged in zip(rows, verdicts, strict=True):
        bad: list[tuple[str, str]] = []
        for tier in TIERS:
            found = judged[tier]
            if found is not None and found["status"] in ("fail", "error"):
                verdict = "/".join(filter(None, (found["status"], found["category"])))
                by_category[verdict] += 1
                bad.append((tier, verdict))
        if row["state"] not in ("done", "error"):
            reason = f" ({row['reason']})" if row["reason"] else ""
            unfinished += fold(f"{row['key']}: {row['state']}{reason}", indent="  ")
            not_finished += 1
            continue
        if row["state"] == "error":
            by_category[state_text("error", row["category"] or "uncategorized")] += 1
        elif not bad:
            continue
        what = ", ".join([state_text(row["state"], row["category"]), *(f"{tier} {verdict}" for tier, verdict in bad)])
        failed += fold(f"{row['key']}: {what}", indent="  ")
        if row["state"] == "error":
            if row["reason"]:
                failed += fold(row["reason"], indent="    ")
            failed.append(f"    logs: {attempt_dir(data_dir, row['repo_id'], row['agent'], max(row['attempts'], 1)) / 'logs'}")
        for tier, _ in bad:
            if (why := row["tier_reasons"].get(tier)) is not None:
                failed += fold(f"{tier}: {why}", indent="    ")
            if (log := row["tier_logs"].get(tier)) is not None:
                failed.append(f"    log: {log}")
    lines = [*fold(f"failures by category: {_tally(by_category)}"), *failed] if failed else ["failures: none"]
    if unfinished:
        lines += [f"not finished: {counted(not_finished, 'job')}", *unfinished]
    return lines


def _tally(counts: Counter[str]) -> str:
    """``2 fail/runtime, 1 error/infra``: the most frequent first."""
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def typed(program: str) -> str:
    """`program` (``resenv``, ``resenv-tui``) as a person must type it here for it to be this
    installation's: bare when the shell's PATH finds this one, else its path (relative to the
    working directory when it is under it: ``.venv/bin/resenv``), as for a venv never activated."""
    argv0 = Path(sys.argv[0])
    mine = argv0 if argv0.name == program else Path(sys.executable).parent / program
    if not mine.is_file():
        return program
    found = shutil.which(program)
    if found is not None and Path(found).resolve() == mine.resolve():
        return program
    mine = mine.absolute()
    try:
        return str(mine.relative_to(Path.cwd()))
    except ValueError:
        return str(mine)


def _next_steps(run_id: str, state: str, rows: list[dict[str, Any]], db: Path) -> list[str]:
    """What to type next, runnable as printed: this installation's commands, and this store's
    `--db` whenever it is not the one they would open without it."""
    steps: list[tuple[list[str], str]] = []
    if state == "interrupted":
        steps.append((["run", "--resume", run_id], "finish it: interrupted jobs run again"))
    elif state == "cancelled":
        stopped = [row["key"] for row in rows if row["state"] == "cancelled"]
        if stopped:
            steps += [(["control", "retry", run_id, stopped[0]], "queue a cancelled job again (each one)"),
                      (["run", "--resume", run_id], "then run what is queued")]
    steps += [(["show", run_id], "every job, tier by tier"),
              (["report", run_id], "the scores (--format csv|json|latex)")]
    store = [] if absolute(db) == default_db() else ["--db", str(absolute(db))]
    commands = [(shlex.join([typed("resenv"), *args, *store]), why) for args, why in steps]
    commands.append((shlex.join([typed("resenv-tui"), run_id, *store]), "dashboard: transcripts, logs, controls"))
    width = max(len(command) for command, _ in commands)
    if 2 + width + 4 + max(len(why) for _, why in commands) <= WIDTH:
        return ["next:", *(f"  {command.ljust(width)}  # {why}" for command, why in commands)]
    return ["next:", *(line for command, why in commands for line in (f"  # {why}", f"  {command}"))]
