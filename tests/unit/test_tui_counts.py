"""The dashboard counts in prose as the CLI does: `1 job`, never `1 jobs`."""

from __future__ import annotations

from resenv.engine.results.scoring import AgentScore
from resenv.tui.widgets import agent_pyramid, duration


def test_an_agent_with_one_job_is_titled_one_job() -> None:
    assert agent_pyramid(AgentScore("baseline", jobs=1), 40)[0].plain.rstrip() == "baseline · 1 job"
    assert agent_pyramid(AgentScore("baseline", jobs=2), 40)[0].plain.rstrip() == "baseline · 2 jobs"


def test_the_dashboard_reads_times_as_the_cli_does() -> None:
    assert [duration(s) for s in (None, 42, 485, 7380)] == ["—", "42s", "8m05s", "2h03m"]
