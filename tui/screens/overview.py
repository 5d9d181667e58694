"""The run overview: every job of a run with its tiers, state, time and cost, the run's pyramid and
its hosts, sorted and filtered, kept current cell by cell.
"""

from __future__ import annotations

import time
from typing import Any

from rich.progress_bar import ProgressBar as RichProgressBar
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Input, Static

from ...engine.wording import counted
from ..commands import bindings_for
from ..data import RunFeed
from ..views import Changes, JobView
from ..widgets import (
    FitTable,
    LEGEND_MARKUP,
    duration,
    host_strip,
    job_cells,
    overview_columns,
    pyramid_panel,
    tokens_text,
)
from .base import DashScreen, run_state
from .job import JobScreen


SORTS = ("attention", "repo", "agent", "state", "elapsed", "cost", "id")
TABLE_HZ = 4.0


class OverviewScreen(DashScreen):
    SCREEN_ID = "overview"
    BINDINGS = bindings_for("overview")

    def __init__(self, feed: RunFeed, *, readonly: bool = False, base: bool = True) -> None:
        super().__init__()
        self.feed = feed
        self.readonly = readonly
        self.base = base
        self.sort_mode = 0
        self.filter_text = ""
        self._filter_dirty = False
        self._rows: set[int] = set()
        self._cells: dict[int, dict[str, Any]] = {}
        self._sort_keys: dict[int, Any] = {}
        self._dirty: set[int] = set()
        self._table_at = 0.0
        self._ready = False
        self._built_from: dict[int, JobView] | None = None  # the feed's jobs the table was built from

    def compose(self) -> ComposeResult:
        yield Static(id="run-header")
        yield FitTable(id="jobs", cursor_type="row", zebra_stripes=True, columns=overview_columns(()))
        with Horizontal(id="bottom"):
            yield Static(id="pyramid")
            yield Static(id="hoststrip")
        yield Input(id="filter", placeholder="filter: words that must all appear (repo, agent, state, host, fail, #id)")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#jobs", FitTable).fit()
        self.query_one("#pyramid", Static).border_title = "Pyramid · C0–C4 passed/judged per agent"
        self.query_one("#hoststrip", Static).border_title = "Hosts · GPU util (0–100 %)"
        self.query_one("#run-header", Static).update(Text("loading run…", "grey50"))
        self.query_one("#filter", Input).display = False
        if self.feed.loaded.is_set():
            self.apply_changes(Changes(job_set=True, run=True, scores=True, hosts=True, gpu=True))

    # -- updates ----------------------------------------------------------------------------------
    def apply_changes(self, changes: Changes) -> None:
        feed = self.feed
        if not feed.loaded.is_set() or not feed.run:
            return
        if not self._ready:
            self._ready = True
            changes.job_set = True
            self.call_after_refresh(self._want_scores)  # after the table's first frame
        now = time.time()
        # a set of jobs is a new dict (updates change it in place): the one built from needs no rebuild
        if (changes.job_set and self.feed.jobs is not self._built_from) or self._filter_dirty:
            self._rebuild(now)
        elif changes.jobs:
            self._dirty |= changes.jobs  # applied by every_tick, at most TABLE_HZ times a second
        if changes.run or changes.jobs or changes.job_set or changes.usage:
            self._header(now)
        if changes.scores:
            self._pyramid()
        if changes.hosts or changes.gpu:
            self._hosts(now)

    def _want_scores(self) -> None:
        self.feed.scores_wanted.set()
        self.dash.poller.poke()

    def every_tick(self) -> None:
        if not self._ready:
            return
        if self._filter_dirty:
            self._rebuild(time.time())
        elif self._dirty and time.monotonic() - self._table_at >= 1 / TABLE_HZ:
            # Every cell update makes DataTable re-render all visible cells, so the table takes the
            # changes of several paint ticks at once.
            dirty, self._dirty = self._dirty, set()
            self._table_at = time.monotonic()
            self._update_rows(dirty, time.time())

    def every_second(self) -> None:
        if not self._ready:
            return
        now = time.time()
        jobs = self.feed.jobs
        self._dirty |= {job_id for job_id in self._rows if jobs[job_id].state in ("running", "paused")}
        self._header(now)
        self._hosts(now)

    def _visible(self, job: JobView) -> bool:
        if not self.filter_text:
            return True
        haystack = job.search_text()
        return all(word in haystack for word in self.filter_text.lower().split())

    def _sort_key(self, job: JobView, now: float) -> Any:
        mode = SORTS[self.sort_mode]
        if mode == "attention":
            return (job.attention, job.id)
        if mode == "repo":
            return (job.repo, job.agent, job.id)
        if mode == "agent":
            return (job.agent, job.repo, job.id)
        if mode == "state":
            return (job.state, job.id)
        if mode == "elapsed":
            return (-(job.elapsed(now) or 0.0), job.id)
        if mode == "cost":
            return (-(job.cost or 0.0), -job.tokens, job.id)
        return (job.id,)

    def _rebuild(self, now: float) -> None:
        """The set of rows changed (first load, new jobs, filter): rebuild the table once."""
        self._filter_dirty = False
        self._dirty = set()
        self._table_at = time.monotonic()
        table = self.query_one("#jobs", FitTable)
        selected = self._selected_id()
        self._built_from = self.feed.jobs
        jobs = [job for job in self._built_from.values() if self._visible(job)]
        keys = {job.id: self._sort_key(job, now) for job in jobs}
        jobs.sort(key=lambda job: keys[job.id])
        table.clear()
        table.set_columns(overview_columns(self.feed.jobs.values()))  # widths for every job, filtered or not
        self._rows = set()
        self._cells = {}
        self._sort_keys = keys
        tiers = self.feed.tiers_selected
        rows = []
        for job in jobs:
            cells = job_cells(job, tiers, now)
            rows.append((str(job.id), dict(cells)))  # the table keeps (and updates) its own
            self._cells[job.id] = cells
            self._rows.add(job.id)
        table.add_keyed_rows(rows)
        self.dash.perf("rebuilt", str(len(rows)))
        self._restore_cursor(selected)
        self._table_title()

    def _update_rows(self, ids: set[int], now: float) -> None:
        table = self.query_one("#jobs", FitTable)
        tiers = self.feed.tiers_selected
        resort = False
        membership_changed = False
        for job_id in ids:
            job = self.feed.jobs.get(job_id)
            if job is None:
                continue
            visible = self._visible(job)
            if visible != (job_id in self._rows):
                membership_changed = True
                continue
            if not visible:
                continue
            cells = job_cells(job, tiers, now)
            old = self._cells.get(job_id)
            for column, value in cells.items():
                if old is None or value != old.get(column):
                    table.update_cell(str(job_id), column, value)
            self._cells[job_id] = cells
            key = self._sort_key(job, now)
            if key != self._sort_keys.get(job_id):
                self._sort_keys[job_id] = key
                resort = True
        if membership_changed:
            self._rebuild(now)
        elif resort and SORTS[self.sort_mode] != "elapsed":
            self._resort()
        elif resort and int(now) % 5 == 0:  # elapsed order changes every second: re-sort every 5 s
            self._resort()

    def _resort(self) -> None:
        table = self.query_one("#jobs", DataTable)
        selected = self._selected_id()
        keys = self._sort_keys
        table.sort("id", key=lambda job_id: keys.get(job_id, (9, job_id)))
        self._restore_cursor(selected)

    def _selected_id(self) -> int | None:
        table = self.query_one("#jobs", DataTable)
        if not table.row_count:
            return None
        try:
            row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return int(row_key.value) if row_key.value is not None else None

    def _restore_cursor(self, job_id: int | None) -> None:
        table = self.query_one("#jobs", DataTable)
        if job_id is None or job_id not in self._rows:
            return
        index = table.get_row_index(str(job_id))
        if index != table.cursor_row:
            table.move_cursor(row=index, animate=False)

    def _table_title(self) -> None:
        table = self.query_one("#jobs", DataTable)
        shown, total = len(self._rows), len(self.feed.jobs)
        title = f"Jobs · sorted by {SORTS[self.sort_mode]}"
        if self.filter_text:
            title += f" · filter “{self.filter_text}”: {shown} of {total}"
        table.border_title = title
        table.border_subtitle = LEGEND_MARKUP

    def _header(self, now: float) -> None:
        feed = self.feed
        run = feed.run
        counts = feed.status_counts
        total = len(feed.jobs)
        finished = sum(counts.get(state, 0) for state in ("done", "error", "cancelled"))
        state, style = run_state(feed)
        started = run.get("started_at")
        end = run.get("finished_at") if run.get("state") not in ("running", "paused") and run.get("finished_at") else now
        if state.startswith("interrupted") and run.get("heartbeat_at"):
            end = run["heartbeat_at"]
        elapsed = (end - started) if started else None
        eta = "—"
        if elapsed and finished and finished < total and run.get("state") in ("running", "paused") and feed.live:
            eta = duration(elapsed / finished * (total - finished))
        elif finished == total and total:
            eta = "done"
        # A narrow terminal (80 columns) keeps the run's state and every count: the state goes
        # first, the run's name and id are cut instead; the glyphs of the counts lose their words
        # (the jobs table's legend has them) but errors and failing tiers keep theirs.
        narrow = self.has_class("-narrow")
        name = ((f"{run.get('name', '')}", "bold"), ("  run ", "grey62"), (feed.run_id, "bold"))
        where = (("● ", style), (state, style), ("  ", ""), *name) if narrow else (
            ("resenv ", "bold magenta"), *name, ("  ● ", style), (state, style))
        left = Text.assemble(*where)
        if self.is_readonly():
            left.append("  READ-ONLY", "bold black on yellow")
        # the leading space: a name cut to fit never runs into "elapsed"
        right = Text.assemble((" elapsed ", "grey62"), (duration(elapsed), "bold"), ("  ETA ", "grey62"), (eta, "bold"))
        line2 = Text.assemble(
            (f"{counted(total, 'job')}  ", "bold"),
            ("✓ ", "green"), (f"{counts.get('done', 0)}{'' if narrow else ' done'}  ", ""),
            ("◐ ", "cyan"), (f"{counts.get('running', 0) + counts.get('paused', 0)}{'' if narrow else ' running'}  ", ""),
            ("· ", "grey62"), (f"{counts.get('queued', 0)}{'' if narrow else ' queued'}  ", ""),
            ("! ", "bold red"), (f"{counts.get('error', 0)} error  ", ""),
            ("✗ ", "bold red"), (f"{counts.get('failing', 0)} {'failing' if narrow else 'with failing tiers'}", ""),
        )
        if counts.get("cancelled"):
            line2.append(f"  ⊘ {counts['cancelled']} cancelled", "grey62")
        right2 = Text.assemble(("tokens ", "grey62"), (tokens_text(feed.tokens), "bold"), ("  cost ", "grey62"),
                               (feed.cost_text, "bold"))
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        grid.add_column(justify="right", no_wrap=True)
        grid.add_row(left, right)
        grid.add_row(line2, right2)
        percent = f"{100 * finished / total:3.0f}%" if total else "  —"
        grid.add_row(RichProgressBar(total=total or 1, completed=finished, complete_style="green",
                                     finished_style="green", style="grey23"),
                     Text.assemble((f" {percent} ", "bold"), (f"{finished}/{total} finished", "grey62")))
        self.query_one("#run-header", Static).update(grid)

    def _pyramid(self) -> None:
        panel = self.query_one("#pyramid", Static)
        scores = self.feed.scores
        panel.update(pyramid_panel(scores, max(20, panel.content_region.width or 60)))
        if scores is not None:  # which scoring, by which rules: a rescored run says so
            panel.border_subtitle = scores.header()
            # jobs that ended in error are outside every denominator: one more line says how many, by category
            errors = any(score.errors for score in scores.agents.values())
            self.query_one("#bottom").styles.height = 10 if errors else 9
            panel.border_title = ("Pyramid · C0–C4 passed/judged · ! infra errs not in rates" if errors
                                  else "Pyramid · C0–C4 passed/judged per agent")

    def on_resize(self, event: Any) -> None:
        if self._ready:
            self.call_after_refresh(self._pyramid)

    def _hosts(self, now: float) -> None:
        spark = 8 if self.has_class("-narrow") else 16  # a narrow strip leaves the pyramid's counts room
        self.query_one("#hoststrip", Static).update(host_strip(self.feed.hosts, self.feed.gpu_series(), now, spark))

    # -- commands ---------------------------------------------------------------------------------
    def selected_job(self) -> JobView | None:
        job_id = self._selected_id()
        return self.feed.jobs.get(job_id) if job_id is not None else None

    @on(DataTable.RowSelected, "#jobs")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click) opens the job of the row it was on, whatever a re-sort did since."""
        if event.row_key.value is not None:
            self._open(int(event.row_key.value))

    def cmd_open(self) -> None:
        self._open(self._selected_id())

    def _open(self, job_id: int | None) -> None:
        if job_id is not None and job_id in self.feed.jobs:
            self.app.push_screen(JobScreen(self.feed, job_id, readonly=self.readonly))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "run_command" and parameters == ("back",) and self.base and not self.filter_text:
            return False  # nothing to go back to: keep esc out of the footer
        return True

    def cmd_back(self) -> None:
        if self.filter_text or self.query_one("#filter", Input).display:
            self._set_filter("")
            return
        if not self.base:
            self.app.pop_screen()

    def cmd_sort(self) -> None:
        self.sort_mode = (self.sort_mode + 1) % len(SORTS)
        now = time.time()
        self._sort_keys = {job_id: self._sort_key(self.feed.jobs[job_id], now) for job_id in self._rows}
        self._resort()
        self._table_title()
        self.dash.notify(f"sorted by {SORTS[self.sort_mode]}", timeout=1.5)

    def cmd_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._filter_dirty = True  # applied on the next paint tick, however fast the user types
        self.refresh_bindings()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            event.input.display = False
        self.query_one("#jobs", DataTable).focus()

    def _set_filter(self, text: str) -> None:
        box = self.query_one("#filter", Input)
        box.value = text
        self.filter_text = text
        self._filter_dirty = True
        box.display = bool(text)
        self.query_one("#jobs", DataTable).focus()
        self.refresh_bindings()
        self.apply_changes(Changes())

    def key_escape(self) -> None:
        if self.query_one("#filter", Input).has_focus:
            self._set_filter("")

    def cmd_pause_job(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.dash.request_control(self.feed, "resume" if job.state == "paused" else "pause", job=job)

    def cmd_pause_run(self) -> None:
        self.dash.request_control(self.feed, "resume" if self.feed.run.get("state") == "paused" else "pause")

    def cmd_retry_job(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.dash.request_control(self.feed, "retry", job=job)

    def cmd_cancel_job(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.dash.request_control(self.feed, "cancel", job=job)

    def cmd_cancel_run(self) -> None:
        self.dash.request_control(self.feed, "cancel")
