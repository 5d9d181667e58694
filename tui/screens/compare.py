"""The compare screen: runs side by side, tier by tier."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.widgets import Footer, Static

from ...engine.wording import counted
from .. import queries
from ..commands import bindings_for
from ..views import ALL_TIERS
from ..widgets import Column, FitTable, LEGEND, TIER_HEADER, tier_text
from .base import DashScreen


class CompareScreen(DashScreen):
    SCREEN_ID = "compare"
    BINDINGS = bindings_for("compare")

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        yield Static(id="compare-header")
        yield FitTable(id="matrix", cursor_type="row", zebra_stripes=True, fill="repo", header_height=2)
        yield Footer()

    def on_mount(self) -> None:
        self._load()

    @work(thread=True)
    def _load(self) -> None:
        result = queries.compare(self.dash.db_path, self.run_ids)
        self.app.call_from_thread(self._show, result)

    def _show(self, result: dict[str, Any]) -> None:
        table = self.query_one("#matrix", FitTable)
        # every column stays (a row is a repo and an agent; a column a run): names shrink, and more
        # runs than the terminal holds scroll sideways
        table.set_columns([Column("repo", "repo", 16, min_width=8), Column("agent", "agent", 12, min_width=6)]
                          + [Column(run_id, Text(f"{run_id}\n{TIER_HEADER}"), 20) for run_id in self.run_ids])
        totals: dict[str, dict[str, list[int]]] = {run_id: {} for run_id in self.run_ids}
        rows: list[tuple[str, dict[str, Any]]] = []
        for (repo, agent), per_run in sorted(result["cells"].items()):
            cells: dict[str, Any] = {"repo": Text(repo, no_wrap=True, overflow="ellipsis"),
                                     "agent": Text(agent, no_wrap=True, overflow="ellipsis")}
            for run_id in self.run_ids:
                if run_id not in per_run:
                    cells[run_id] = Text("not in this run", "grey42")
                    continue
                statuses = {tier: per_run[run_id].get(tier) or "pending" for tier in ALL_TIERS}
                for tier, status in statuses.items():
                    tally = totals[run_id].setdefault(tier, [0, 0])
                    if status in ("pass", "fail"):
                        tally[1] += 1
                        tally[0] += status == "pass"
                cells[run_id] = tier_text(statuses)
            rows.append((f"{repo}/{agent}", cells))
        summary: dict[str, Any] = {"repo": Text("passed per tier", "bold"), "agent": ""}
        for run_id in self.run_ids:
            summary[run_id] = Text("".join(f"{totals[run_id].get(t, [0, 0])[0]:<3}" for t in ALL_TIERS).rstrip(), "bold")
        rows.append(("__total__", summary))
        table.add_keyed_rows(rows)
        names = "  ".join(f"{run_id} = {(result['runs'].get(run_id) or {}).get('name', '?')}" for run_id in self.run_ids)
        self.query_one("#compare-header", Static).update(Group(
            Text.assemble(("Compare", "bold"), (f" · {counted(len(result['cells']), 'repo/agent pair')} × {counted(len(self.run_ids), 'run')}",
                                                "grey62")),
            Text(names, "grey62"), Text.assemble(("last row: jobs passing each tier   ", "grey50"), LEGEND)))
        table.focus()
