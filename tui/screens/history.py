"""The history screen: every run in the store with its pass rates per tier, cost and duration."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Input, Static

from ...engine.wording import counted
from .. import queries
from ..commands import bindings_for
from ..views import ALL_TIERS
from ..widgets import Column, FitTable, cost_text, duration, state_text, tokens_text
from .base import DashScreen
from .compare import CompareScreen


HISTORY_SORTS = ("started", "name", "cost", "duration", "C1")
RATES_HEADER = "  C0  C1  C2  C3  C4  C5"


def rates_text(tiers: dict[str, dict[str, int]]) -> Text:
    """Pass rate per tier (passed/judged, in %), one 3-wide cell each under RATES_HEADER."""
    text = Text(no_wrap=True)
    for tier in ALL_TIERS:
        counts = tiers.get(tier) or {}
        judged = counts.get("pass", 0) + counts.get("fail", 0)
        if not judged:
            text.append("   –", "grey42")
            continue
        rate = counts.get("pass", 0) / judged
        style = "green" if rate >= 0.8 else ("yellow" if rate >= 0.5 else "red")
        text.append(f" {100 * rate:3.0f}", style)
    return text


class HistoryScreen(DashScreen):
    SCREEN_ID = "history"
    BINDINGS = bindings_for("history")
    COLUMNS = (Column("run", "run", 22), Column("name", "name", 16, keep=1, min_width=8),
               Column("state", "state", 11, keep=2), Column("jobs", "jobs", 5, keep=6),
               Column("rates", RATES_HEADER, 24), Column("tokens", "tokens", 6, keep=5),
               Column("cost", "cost", 8, keep=4), Column("duration", "time", 7, keep=3))

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict[str, Any]] = []
        self.marked: list[str] = []
        self.sort_mode = 0
        self.filter_text = ""
        self._shown: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("History", "bold"), ("  every run in ", "grey62"), (str(self.dash.db_path), "bold"),
                                   ("\nenter opens a run read-only · space marks · c compares the marked runs "
                                    "(repo × run pyramids)", "grey50")),
                     id="history-header")
        yield FitTable(id="runs", cursor_type="row", zebra_stripes=True, columns=self.COLUMNS, fill="name")
        yield Input(id="history-filter", placeholder="filter runs")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", FitTable)
        table.fit()
        table.border_title = "Runs · pass rate per tier in % (passed/judged, latest result per job and tier)"
        self.query_one("#history-filter", Input).display = False
        self._load()
        table.focus()

    def every_second(self) -> None:
        if int(time.time()) % 5 == 0:
            self._load()

    @work(thread=True, exclusive=True, group="history")
    def _load(self) -> None:
        runs = queries.history(self.dash.db_path)
        self.app.call_from_thread(self._show, runs)

    def _key(self, run: dict[str, Any]) -> Any:
        mode = HISTORY_SORTS[self.sort_mode]
        if mode == "name":
            return (run["name"], run["id"])
        if mode == "cost":
            return (-(run["cost"] or 0.0), run["id"])
        if mode == "duration":
            return (-self._duration(run), run["id"])
        if mode == "C1":
            counts = run["tiers"].get("C1") or {}
            judged = counts.get("pass", 0) + counts.get("fail", 0)
            return (-(counts.get("pass", 0) / judged) if judged else 1, run["id"])
        return (-(run["created_at"] or 0), run["id"])

    @staticmethod
    def _duration(run: dict[str, Any]) -> float:
        if not run.get("started_at"):
            return 0.0
        end = run.get("finished_at") or (time.time() if run.get("live") else run.get("heartbeat_at")) or run["started_at"]
        return end - run["started_at"]

    def _cells(self, run: dict[str, Any]) -> dict[str, Any]:
        state = run["state"]
        if state in ("running", "paused") and not run.get("live"):
            state = "interrupted"
        marked = run["id"] in self.marked
        return {
            "run": Text.assemble(("✱ " if marked else "  ", "bold yellow"),
                                 (run["id"], "bold yellow" if marked else "bold")),
            "name": Text(run["name"], no_wrap=True, overflow="ellipsis"),
            "state": state_text(state) if state in ("running", "paused")
            else Text(state, {"finished": "green", "interrupted": "yellow", "cancelled": "grey50"}.get(state, "")),
            "jobs": Text(str(run["jobs"]), justify="right"), "rates": rates_text(run["tiers"]),
            "tokens": Text(tokens_text(run["tokens"]), justify="right"),
            "cost": Text(cost_text(run["cost"], run.get("cost_partial", False)), justify="right"),
            "duration": Text(duration(self._duration(run) or None), justify="right"),
        }

    def _show(self, runs: list[dict[str, Any]]) -> None:
        self.runs = runs
        self._render_rows()

    def _render_rows(self) -> None:
        table = self.query_one("#runs", FitTable)
        words = self.filter_text.lower().split()
        runs = [run for run in self.runs
                if all(word in f"{run['id']} {run['name']} {run['state']} {run['suite']}".lower() for word in words)]
        runs.sort(key=self._key)
        ids = [run["id"] for run in runs]
        if ids != self._shown:
            selected = self._selected()
            table.clear()
            table.add_keyed_rows((run["id"], self._cells(run)) for run in runs)
            self._shown = ids
            if selected in ids:
                table.move_cursor(row=ids.index(selected), animate=False)
        else:
            for run in runs:
                for column, value in self._cells(run).items():
                    if table.get_cell(run["id"], column) != value:
                        table.update_cell(run["id"], column, value)
        table.border_subtitle = f"{counted(len(ids), 'run')} · sorted by {HISTORY_SORTS[self.sort_mode]}" + (
            f" · {len(self.marked)} marked" if self.marked else "")

    def _selected(self) -> str | None:
        table = self.query_one("#runs", FitTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    @on(DataTable.RowSelected, "#runs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self.cmd_open()

    def cmd_open(self) -> None:
        run_id = self._selected()
        if run_id is not None:
            self.dash.open_run(run_id)

    def cmd_mark(self) -> None:
        run_id = self._selected()
        if run_id is None:
            return
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        self._render_rows()
        self.cmd_cursor_down()

    def cmd_compare(self) -> None:
        if len(self.marked) < 2:
            self.dash.notify("mark two or more runs with space first", severity="warning")
            return
        self.app.push_screen(CompareScreen(list(self.marked)))

    def cmd_sort(self) -> None:
        self.sort_mode = (self.sort_mode + 1) % len(HISTORY_SORTS)
        self._shown = []
        self._render_rows()

    def cmd_filter(self) -> None:
        box = self.query_one("#history-filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#history-filter")
    def _filter(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._render_rows()

    @on(Input.Submitted, "#history-filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.display = False
        self.query_one("#runs", FitTable).focus()

    def cmd_back(self) -> None:
        box = self.query_one("#history-filter", Input)
        if box.display:
            box.value = ""
            box.display = False
            self.filter_text = ""
            self._render_rows()
            self.query_one("#runs", FitTable).focus()
            return
        super().cmd_back()
