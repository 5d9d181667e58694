"""How long a job is expected to take, for the dispatch policy (`engine.packing`): from the store's
history of attempts, else an upper bound from the benchmark's timeouts.

An estimate only orders and packs jobs; a wrong one never changes a verdict. So the history is read
once when the engine starts (every run in the store: a suite is run again and again, with new agents
and after fixes) and grows as this run's attempts end. The best match wins: the same repo and agent,
then the same repo under any agent (a repo's own install, build and probes dominate). A repo never
seen gets the sum of its phase timeouts, never another repo's figure: it can run no longer, so the
policy never backfills around it on a guess.
"""

from __future__ import annotations

import math
import sqlite3
import statistics
from collections import defaultdict, deque
from collections.abc import Iterable

from ..outcomes import INFRA_CATEGORIES
from ..spec import Timeouts

KEPT_PER_KEY = 9  # the newest attempts each estimate is the median of


def timeout_bound(timeouts: Timeouts) -> float:
    """The longest a job can run: every phase up to its timeout."""
    return float(timeouts.provision + timeouts.checkout + timeouts.agent + timeouts.probes + timeouts.audit
                 + timeouts.teardown)


class DurationEstimates:
    """Median wall time of finished attempts, by (repo, agent) and by repo."""

    def __init__(self, bound_s: float, history: Iterable[tuple[str, str, float]] = ()) -> None:
        self.bound_s = bound_s
        self._seen: dict[tuple[str, str, str | None], deque[float]] = defaultdict(
            lambda: deque(maxlen=KEPT_PER_KEY))
        for repo_id, agent, seconds in history:
            self.record(repo_id, agent, seconds)

    def record(self, repo_id: str, agent: str, seconds: float) -> None:
        """One finished attempt's wall time; one that cannot be a duration (negative after a clock
        step, not finite) teaches nothing."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        for key in (("pair", repo_id, agent), ("repo", repo_id, None)):
            self._seen[key].append(seconds)

    def estimate(self, repo_id: str, agent: str) -> float:
        for key in (("pair", repo_id, agent), ("repo", repo_id, None)):
            found = self._seen.get(key)
            if found:
                return statistics.median(found)
        return self.bound_s


def attempt_history(conn: sqlite3.Connection) -> list[tuple[str, str, float]]:
    """Every whole-job attempt in the store that ran to its own end (not cancelled, not an
    infrastructure failure, which says nothing of the job), oldest first."""
    placeholders = ", ".join("?" for _ in INFRA_CATEGORIES)
    rows = conn.execute(
        "SELECT j.repo_id, j.agent, a.finished_at - a.started_at FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " WHERE a.scope = 'job' AND a.state IN ('done', 'error') AND a.finished_at IS NOT NULL"
        f" AND a.started_at IS NOT NULL AND a.finished_at >= a.started_at"
        f" AND (a.category IS NULL OR a.category NOT IN ({placeholders}))"
        " ORDER BY a.finished_at", tuple(sorted(INFRA_CATEGORIES))).fetchall()
    return [(row[0], row[1], float(row[2])) for row in rows if isinstance(row[2], (int, float))]
