"""The dashboard's screens: run overview, job detail, hosts, history, compare, and the modals.

Screens never query the store on a timer themselves: the app's paint timer hands each one the
coalesced `Changes` of its feed (`apply_changes`), and the screen updates only what changed
(DataTable cells in place by stable row keys; rows are rebuilt only when the set of rows changes).
One-shot loads (a job's evidence, history, leases) run in worker threads.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Protocol

from rich.console import Group
from rich.progress_bar import ProgressBar as RichProgressBar
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button, DataTable, DirectoryTree, Footer, Input, Log, OptionList, Static, TabbedContent, TabPane,
)
from textual.notifications import SeverityLevel
from textual.widgets.option_list import Option

from ...engine.eventtext import gpu_use_text
from ...engine.wording import counted
from .. import data
from ..commands import BY_NAME, bindings_for, help_rows
from ..data import ALL_TIERS, Changes, JobView, Poller, RunFeed
from ..widgets import (
    GLYPH, GLYPH_STYLE, LEGEND, LEGEND_MARKUP, TIER_HEADER, Column, FitTable, FixedSparkline, FollowLog,
    TranscriptHighlighter, cost_text, duration, host_strip, job_cells, job_pyramid, overview_columns, pyramid_panel,
    state_text, tier_text, tokens_text,
)


class Dashboard(Protocol):
    """What the screens use of the app that shows them (`dashboard.ResenvApp`): the screens depend
    on this, the app on the screens."""

    db_path: Path
    readonly: bool
    poller: Poller

    @property
    def measuring(self) -> bool: ...

    def perf(self, kind: str, detail: str) -> None: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def open_run(self, run_id: str) -> None: ...

    def request_control(self, feed: RunFeed, action: str, *, job: JobView | None = None,
                        tier: str | None = None) -> None: ...


def _run_state(feed: RunFeed) -> tuple[str, str]:
    """(label, style) of the run's state, telling a live engine from a dead one."""
    run = feed.run
    state = run.get("state") or "?"
    if state in ("running", "paused") and not feed.live:
        return "interrupted (no live engine)", "bold yellow"
    style = {"running": "bold cyan", "paused": "bold yellow", "finished": "bold green", "cancelled": "grey62",
             "interrupted": "bold yellow", "queued": "grey62"}.get(state, "")
    return state, style


class DashScreen(Screen):
    """A screen whose keys, palette entries and help come from the command registry."""

    SCREEN_ID = ""
    feed: RunFeed | None = None
    readonly = False
    mounted = False  # True once on_mount has built the widgets: the paint timer only feeds such screens

    def on_mount(self) -> None:  # Textual calls this besides (after) a subclass's own on_mount
        if self.is_readonly():  # what read-only refuses is not offered: its keys leave the footer
            self._bindings = BindingsMap(bindings_for(self.SCREEN_ID, readonly=True))
            self.refresh_bindings()
        self.call_after_refresh(self._set_mounted)

    def _set_mounted(self) -> None:
        self.mounted = True
        self.when_mounted()

    def on_unmount(self) -> None:
        self.mounted = False  # being torn down (a quit, a pop): the paint timer must not reach into it

    def when_mounted(self) -> None:
        """The screen now receives its feed's changes (start streams here, not in on_mount)."""

    @property
    def dash(self) -> Dashboard:
        return self.app  # type: ignore[return-value]

    def is_readonly(self) -> bool:
        return self.readonly or self.dash.readonly

    def action_run_command(self, name: str) -> None:
        self.run_command(name)

    def run_command(self, name: str) -> None:
        command = BY_NAME[name]
        if command.mutating and self.is_readonly():
            self.dash.notify(f"read-only: {command.title.lower()} refused (this dashboard only watches)",
                             title="read-only", severity="warning")
            return
        handler = getattr(self, f"cmd_{name}", None) or getattr(self.app, f"cmd_{name}", None)
        if handler is None:
            self.dash.notify(f"{command.title}: not available here", severity="warning")
            return
        handler()

    def apply_changes(self, changes: Changes) -> None:
        """Called by the app's paint timer with the feed's coalesced changes."""

    def every_second(self) -> None:
        """Called once a second (elapsed clocks, staleness)."""

    def every_tick(self) -> None:
        """Called on every paint tick while the screen is visible (pending UI work, e.g. a filter)."""

    # -- generic movement -------------------------------------------------------------------------
    def cmd_cursor_down(self) -> None:
        self._move("down")

    def cmd_cursor_up(self) -> None:
        self._move("up")

    def _move(self, direction: str) -> None:
        widget = self.focused
        if widget is None:
            return
        for name in (f"action_cursor_{direction}", f"action_scroll_{direction}"):
            action = getattr(widget, name, None)
            if action is not None:
                action()
                return

    def cmd_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()


# -- modals -------------------------------------------------------------------------------------
class ConfirmScreen(ModalScreen[bool]):
    """Every mutating action goes through here, naming its target."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No"),
                Binding("escape", "answer(False)", "No", show=False)]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.question, "bold"), id="confirm-question")
            if self.detail:
                yield Static(Text(self.detail, "grey70"), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class HelpScreen(ModalScreen[None]):
    """Every key, then the commands only the palette has; in read-only mode without the commands it refuses."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, readonly: bool = False) -> None:
        super().__init__()
        self.readonly = readonly

    @staticmethod
    def _table(first: str) -> Table:
        table = Table(expand=True, box=None, header_style="bold", pad_edge=False)
        table.add_column(first, style="bold cyan", no_wrap=True, width=8)
        table.add_column("command", no_wrap=True, width=20)
        table.add_column("where", style="grey62", ratio=1)
        table.add_column("what it does", style="grey85", ratio=2)
        return table

    def compose(self) -> ComposeResult:
        keyed, palette = self._table("keys"), self._table("")
        for keys, title, where, description in help_rows(readonly=self.readonly):
            (keyed if keys else palette).add_row(keys, title, where, description)
        note = ("read-only: pause, resume, retry and cancel are refused, so they are not listed."
                if self.readonly else "* changes the run: asks for confirmation naming its target, then shows the "
                "engine's acknowledgement; refused with --readonly.")
        body = Group(
            Text("resenv-tui · keys and commands (the same list feeds the footer and ctrl+p)", "bold"), Text(""),
            keyed, Text("home end pgup pgdn  in every list and view; on a job's tiers they (and ← →) scroll the "
                        "open tab", "grey62"),
            Text(""), Text("In the command palette only (ctrl+p, then type its name)", "bold"), palette,
            Text(""), Text(note, "grey62"), Text.assemble(("tiers  ", "grey62"), LEGEND),
        )
        with VerticalScroll(id="help"):
            yield Static(body)

    def action_close(self) -> None:
        self.dismiss(None)


# -- run overview ---------------------------------------------------------------------------------
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
        state, style = _run_state(feed)
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


# -- job detail -----------------------------------------------------------------------------------
def tier_columns(category: int = 8) -> list[Column]:
    """The tiers table's columns: the category as wide as the longest one shown (never cut:
    `insufficient_hardware`), the command taking what is left; a narrow table drops time, then exit."""
    return [Column("tier", "tier", 4), Column("status", "status", 10), Column("category", "category", max(8, category)),
            Column("exit", "exit", 4, keep=3), Column("time", "time", 6, keep=4),
            Column("command", "command/reason", 14, keep=2, min_width=10)]


class TierTable(FitTable):
    """The job screen's tiers: its six rows always fit, so Home/End/PageUp/PageDown (and ←/→, which
    a row cursor does not use) scroll the open tab (transcript, raw log, report, file) instead, as
    they would with that tab focused: long log lines scroll sideways."""

    BINDINGS = [Binding(key, f"screen.scroll_tab('{action}')", show=False)
                for key, action in (("home", "scroll_home"), ("end", "scroll_end"), ("pageup", "page_up"),
                                    ("pagedown", "page_down"), ("left", "scroll_left"), ("right", "scroll_right"))]


CLAIMS = (
    ("python_path", "python_path", "python_path"),
    ("python_version", "python_version", "python_version"),
    ("framework.name", "framework", "framework"),
    ("framework.version", "framework.version", "framework_version"),
    ("cuda_available", "cuda_available", "cuda_available"),
    ("gpu_count", "gpu_count", "gpu_count"),
    ("ddp_expected_ok", "ddp_expected_ok", "ddp_ok"),
)
PAPER_CLAIMS = (("torch_version", "torch_version", "framework_version"),)
"""Claims of ResearchEnvBench's report format: a row only when the report uses them."""


def _framework_entry(observed: dict[str, Any], name: Any) -> dict[str, Any] | None:
    table = observed.get("frameworks")
    if not isinstance(table, dict) or not isinstance(name, str):
        return None
    # imported here: the audit module pulls in the census and classifier, ~0.1 s the dashboard's
    # open would otherwise spend before its first frame, for a screen opened later if ever
    from ...probes.audit import normalize_framework

    entry = table.get(normalize_framework(name))
    return entry if isinstance(entry, dict) else None


def _framework_state(entry: dict[str, Any] | None, field: str) -> str:
    if entry is None:
        return "not observed"
    if not entry.get("importable"):
        if not entry.get("installed"):
            return "not installed"
        if field != "version" or entry.get("version") is None:
            return "installed, does not import"
    return _show(entry.get("version")) if field == "version" else f"{entry.get('name')} {_show(entry.get('version'))}"


def _observed_for(path: str, claims: dict[str, Any], observed: dict[str, Any]) -> Any:
    """What the probes saw for one claim: the observation of the framework the claim is about.

    Evidence written before every framework was observed has no ``frameworks``: its flat keys are shown."""
    if not isinstance(observed.get("frameworks"), dict):
        legacy = {row_path: observed_key for row_path, _, observed_key in CLAIMS + PAPER_CLAIMS}
        value = observed.get(legacy.get(path, path))
        return value if path != "torch_version" or observed.get("framework") == "torch" else None
    framework = claims.get("framework") if isinstance(claims.get("framework"), dict) else {}
    named = framework.get("name")
    if path == "framework.name":
        return _framework_state(_framework_entry(observed, named), "name")
    if path == "framework.version":
        return _framework_state(_framework_entry(observed, named if named is not None else observed.get("framework")),
                                "version")
    if path == "torch_version":
        return _framework_state(_framework_entry(observed, "torch"), "version")
    if path in ("cuda_available", "gpu_count"):
        if observed.get("gpus_leased") == 0:
            return "no GPU leased to the job"
        if named is None and claims.get("torch_version") is not None:
            named = "torch"
        for name in (named, observed.get("framework")):
            entry = _framework_entry(observed, name)
            if entry is not None and entry.get("importable"):
                value = entry.get("cuda_available" if path == "cuda_available" else "device_count")
                return f"{entry.get('name')}: {_show(value)}"
        return "no framework imports" if observed.get("framework") == "none" else None
    return observed.get(path)


def _claim(claims: dict[str, Any], path: str) -> Any:
    if path == "framework":
        value = claims.get("framework")
        return value.get("name") if isinstance(value, dict) else value
    if path == "framework.version":
        value = claims.get("framework")
        return value.get("version") if isinstance(value, dict) else claims.get("framework_version")
    return claims.get(path)


def _claim_at(claims: dict[str, Any], path: str) -> Any:
    """The value of a not-scored key: top-level, or ``framework.KEY``."""
    if path.startswith("framework.") and isinstance(claims.get("framework"), dict):
        return claims["framework"].get(path.split(".", 1)[1])
    return claims.get(path)


def _not_scored(claims: dict[str, Any], evidence: dict[str, Any]) -> Text | None:
    """One line with the keys the audit kept but did not score (env_tool, env_name, unknown keys);
    notes have their own line."""
    keys = [key for key in evidence.get("not_scored") or [] if key != "notes"]
    if not keys:
        return None
    shown = []
    for key in keys:
        value = _claim_at(claims, key)
        shown.append(f"{key}: {value if isinstance(value, str) else json.dumps(value, default=str)}")
    return Text.assemble(("not scored (kept, never a claim): ", "grey62"), (" · ".join(shown), "grey70"))


def _show(value: Any, workdir: str | None = None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if workdir and text.startswith(workdir):
        text = "{workdir}" + text[len(workdir):]
    return text


def report_table(result: dict[str, Any] | None, scored: bool, workdir: str | None = None) -> Any:
    """The agent's report beside what the probes observed; every difference is a hallucination."""
    if result is None:
        return Text("C5 is not scored in this run." if not scored else
                    "No audit yet: C5 runs after the probes, once the agent has stopped.", "grey62")
    evidence = result.get("evidence") or {}
    claims = evidence.get("claims") or {}
    observed = evidence.get("observed") or {}
    halluc = {item.get("claim"): item for item in evidence.get("hallucinations") or []}
    checked = set(evidence.get("checked") or [])
    unverifiable = set(evidence.get("unverifiable") or [])
    table = Table(expand=True, header_style="bold", show_lines=False, box=None, pad_edge=False)
    table.add_column("claim", style="bold", no_wrap=True)
    table.add_column("agent's report.json", overflow="fold", ratio=3)
    table.add_column("probes observed", overflow="fold", ratio=3)
    table.add_column("verdict", ratio=3, overflow="fold")
    rows = CLAIMS + tuple(row for row in PAPER_CLAIMS if row[0] in claims)
    for path, claim_key, _ in rows:
        claim = _claim(claims, claim_key)
        seen = _observed_for(path, claims, observed)
        if path == "python_path" and observed:
            flags = [name for name, key in (("exists", "python_exists"), ("executable", "python_executable"),
                                            ("runs", "python_runs")) if observed.get(key) is False]
            seen = _show(seen, workdir) + (f"  ({', '.join('not ' + flag for flag in flags)})" if flags else "")
        if path in halluc:
            item = halluc[path]
            verdict = Text(f"✗ hallucination ({item.get('kind')}): {item.get('message', '')}", "bold red")
            style = "bold red"
        elif claim is None:
            verdict, style = Text("no claim (null = honest uncertainty)", "grey50"), "grey50"
        elif path in checked:
            verdict, style = Text("✓ matches", "green"), ""
        elif path in unverifiable:
            verdict, style = Text("unverifiable (nothing observed)", "yellow"), "yellow"
        else:
            verdict, style = Text("—", "grey50"), "grey50"
        table.add_row(path, Text(_show(claim, workdir), style),
                      Text(_show(seen, workdir) if not isinstance(seen, str) else seen, style), verdict)
    status = result.get("status")
    head = Text.assemble(("C5 report audit: ", "bold"), (f"{GLYPH.get(status, '?')} {status}", GLYPH_STYLE.get(status, "")))
    if result.get("category"):
        head.append(f" ({result['category']})", "bold red")
    count = len(halluc)
    head.append(f" · {count} hallucination{'s' if count != 1 else ''}", "bold red" if count else "green")
    parts: list[Any] = [head]
    if workdir:
        parts.append(Text(f"{{workdir}} = {workdir}", "grey50"))
    parts += [Text(""), table]
    packages = claims.get("packages")
    if isinstance(packages, dict) and packages:
        listed = ", ".join(f"{name} {version}" for name, version in list(packages.items())[:20])
        parts += [Text(""), Text.assemble(("packages (unverifiable, not counted): ", "grey62"), (listed, "grey70"))]
    if evidence.get("report_errors"):
        parts += [Text(""), Text("report errors: " + "; ".join(map(str, evidence["report_errors"])), "bold red")]
    if evidence.get("probe_errors"):
        parts += [Text(""), Text("probe output not readable (the audit fails on it): "
                                 + "; ".join(map(str, evidence["probe_errors"][:5])), "bold red")]
    if (kept := _not_scored(claims, evidence)) is not None:
        parts += [Text(""), kept]
    if claims.get("notes"):
        parts += [Text(""), Text.assemble(("notes (not a claim): ", "grey62"), (str(claims["notes"]), "grey70"))]
    environment = evidence.get("environment") or {}
    if environment.get("size_bytes"):
        parts.append(Text(f"environment: {environment.get('prefix')} · {environment['size_bytes'] / 2**20:.0f} MiB",
                          "grey62"))
    return Group(*parts)


def integrity_text(findings: list[dict[str, Any]]) -> Any:
    """What the agent changed that the probes did not judge on, and what was done about it: edited
    tracked files restored (with the diff), shadowing files quarantined, start-up hooks failing tiers."""
    if not findings:
        return Text("integrity: clean (the checkout was the pinned commit; no start-up hooks)\n", "green")
    parts: list[Any] = [Text(f"integrity: {len(findings)} finding{'s' if len(findings) != 1 else ''} "
                             "(the probes judged the repo as pinned)", "bold yellow")]
    for finding in findings:
        parts.append(Text.assemble(("  " + finding["kind"], "bold"), f" {finding['path']} ",
                                   (f"→ {finding['action']}", "yellow")))
        diff = (finding.get("detail") or {}).get("diff")
        if diff:
            parts.append(Text("\n".join("    " + line for line in diff.splitlines()[:40]), "grey70"))
        line = (finding.get("detail") or {}).get("line")
        if line:
            parts.append(Text("    " + line[:200], "grey70"))
    parts.append(Text(""))
    return Group(*parts)


class JobScreen(DashScreen):
    SCREEN_ID = "job"
    BINDINGS = bindings_for("job")

    def __init__(self, feed: RunFeed, job_id: int, *, readonly: bool = False) -> None:
        super().__init__()
        self.feed = feed
        self.job_id = job_id
        self.readonly = readonly
        self.detail: dict[str, Any] | None = None
        self.report: Any = None
        self.selected_tier: str | None = None
        self._detail_stale = False
        self._detail_loading = False
        self._following: bool | None = None
        self._raw_path: str | None = None
        self._raw_offset = 0
        self._files_mounted = False
        self.transcript_lines = 0

    def compose(self) -> ComposeResult:
        yield Static(id="job-header")
        with Horizontal(id="job-top"):
            yield Static(id="job-pyramid")
            with Vertical(id="tier-side"):
                yield TierTable(id="tiers", cursor_type="row", columns=tier_columns(), fill="command")
                yield Static(id="tier-detail")
        with TabbedContent(id="tabs"):
            with TabPane("Transcript", id="tab-transcript"):
                log = FollowLog(id="transcript", highlight=True, max_lines=100_000)
                log.highlighter = TranscriptHighlighter()
                yield log
            with TabPane("Raw log", id="tab-raw"):
                with Horizontal():
                    yield OptionList(id="raw-files")
                    yield FollowLog(id="raw-log", max_lines=200_000)
            with TabPane("Report vs probes", id="tab-report"):
                with VerticalScroll(id="report-scroll"):
                    yield Static(id="report")
            with TabPane("Files", id="tab-files"):
                with Horizontal(id="files-row"):
                    yield Static(Text("loading…", "grey50"), id="files-placeholder")
                    yield Log(id="file-preview", max_lines=5000)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#tiers", TierTable)
        table.fit()
        table.add_keyed_rows((tier, {"tier": tier}) for tier in ALL_TIERS)
        self.query_one("#job-pyramid", Static).border_title = "Pyramid"
        self.query_one("#tiers", DataTable).border_title = "Tiers · r retries the selected one"
        self.query_one("#transcript", Log).border_title = "following ▼"
        self.query_one("#raw-files", OptionList).border_title = "raw files"
        self._header()
        self._load_detail()
        table.focus()

    def when_mounted(self) -> None:
        self.feed.watch(self.job_id)  # backfill, then every new line, through apply_changes
        self.dash.poller.poke()

    def on_unmount(self) -> None:
        self.feed.watch(None)

    @property
    def job(self) -> JobView | None:
        return self.feed.jobs.get(self.job_id)

    # -- updates ----------------------------------------------------------------------------------
    def apply_changes(self, changes: Changes) -> None:
        log = self.query_one("#transcript", Log)
        if changes.transcript_reset:
            log.clear()
            self.transcript_lines = 0
        if changes.transcript:
            log.write_lines(changes.transcript)  # one batch per paint tick, however many events came
            self.transcript_lines += len(changes.transcript)
            if self.dash.measuring:  # perf_tui.py: the newest streamed line number shown
                match = re.search(r"streamed line (\d+)", changes.transcript[-1])
                self.dash.perf("transcript", match.group(1) if match else "0")
        if self.job_id in changes.jobs:
            self._header()
            self._detail_stale = True
        self._follow_title()

    def every_second(self) -> None:
        job = self.job
        if job is not None and job.state in ("running", "paused"):
            self._header()
        if self._detail_stale and not self._detail_loading:
            self._load_detail()
        self._tail_raw()

    def every_tick(self) -> None:
        self._follow_title()

    def _follow_title(self) -> None:
        found = self.query("#transcript")
        if not found:  # a tick can land while the screen is still composing or already going away
            return
        log = found.first(Log)
        following = log.is_vertical_scroll_end
        if following != self._following:
            self._following = following
            log.border_title = "following ▼" if following else "scrolled up · End or G follows again"

    def _header(self) -> None:
        job = self.job
        if job is None:
            self.query_one("#job-header", Static).update(Text(f"job {self.job_id}: loading…", "grey50"))
            return
        line = Text.assemble(
            (f"#{job.id} ", "grey62"), (job.repo, "bold"), (" / ", "grey62"), (job.agent, "bold magenta"), "  ",
            state_text(job.state, job.category), ("  attempt ", "grey62"), (str(job.attempts or "—"), "bold"),
            ("  on ", "grey62"), (job.where, "bold"),
        )
        if job.phase and job.state in ("running", "paused"):
            line.append("  phase ", "grey62")
            line.append(job.phase, "bold cyan")
        if job.queue:  # waiting in the cluster's queue, and why
            line.append(f"  {job.queue}", "bold yellow")
        line.append("  elapsed ", "grey62")
        line.append(duration(job.elapsed()), "bold")
        line.append(f"  tokens {tokens_text(job.tokens)}  cost {job.cost_text}", "grey62")
        if self.is_readonly():
            line.append("  READ-ONLY", "bold black on yellow")
        parts = [line]
        if job.reason:
            parts.append(Text(f"reason: {job.reason}", "yellow"))
        self.query_one("#job-header", Static).update(Group(*parts))

    @work(thread=True, exclusive=True, group="detail")
    def _load_detail(self) -> None:
        self._detail_loading = True
        self._detail_stale = False
        try:
            detail = data.job_detail(self.feed.db_path, self.job_id)
        finally:
            self._detail_loading = False
        self.app.call_from_thread(self._show_detail, detail)

    def _show_detail(self, detail: dict[str, Any]) -> None:
        self.detail = detail
        job = self.job
        results = detail["results"]
        scored = detail["tiers"]
        statuses = job.tier_display(scored) if job else {}
        for tier, result in results.items():
            statuses[tier] = result["status"]
        table = self.query_one("#tiers", TierTable)
        categories = []
        for tier in ALL_TIERS:
            result = results.get(tier)
            status = statuses.get(tier)
            evidence = (result or {}).get("evidence") or {}
            command = evidence.get("command")
            command_text = " ".join(map(str, command)) if isinstance(command, list) else (command or "")
            if not command_text and evidence.get("reason"):
                command_text = str(evidence["reason"])
            exit_code = evidence.get("exit_code")
            seconds = evidence.get("duration_s")
            category = (result or {}).get("category") or ""
            if tier == "C5" and evidence.get("hallucinations"):
                count = len(evidence["hallucinations"])
                category = category or f"{count} hallucination{'s' if count != 1 else ''}"
            if tier == "C5" and not command_text and result is not None:
                command_text = "report.json vs what the probes observed"
            cells = {
                "status": Text(f"{GLYPH.get(status, ' ')} {status}" if status else "  —", GLYPH_STYLE.get(status, "grey50")),
                "category": Text(category, "red" if status == "fail" else "grey62"),
                "exit": "" if exit_code is None else str(exit_code),
                "time": "" if seconds is None else f"{seconds:.1f}s",
                "command": Text(command_text, "grey70", no_wrap=True, overflow="ellipsis"),
            }
            for column, value in cells.items():
                table.update_cell(tier, column, value)
            categories.append(len(category))
        table.set_columns(tier_columns(max(categories)))
        self.statuses = statuses
        table.border_subtitle = detail.get("scoring") or ""
        if self.selected_tier is None or (self.selected_tier not in scored and not detail.get("_moved")):
            first = next((index for index, tier in enumerate(ALL_TIERS) if tier in scored), 0)
            detail["_moved"] = True
            table.move_cursor(row=first, animate=False)
            self.selected_tier = ALL_TIERS[first]
        self._tier_detail()
        self.report = Group(integrity_text(detail.get("findings") or []), report_table(
            results.get("C5"), "C5" in scored, (detail.get("attempt") or {}).get("workdir")))
        self.query_one("#report", Static).update(self.report)
        self._raw_files(detail["logs"])
        self._mount_files(detail)

    @on(DataTable.RowHighlighted, "#tiers")
    def _tier_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.selected_tier = event.row_key.value
        self._tier_detail()

    def _tier_detail(self) -> None:
        statuses = getattr(self, "statuses", {})
        pyramid = self.query_one("#job-pyramid", Static)
        pyramid.update(job_pyramid(statuses, self.selected_tier, max(16, (pyramid.content_region.width or 42) - 1)))
        tier = self.selected_tier or "C0"
        result = (self.detail or {}).get("results", {}).get(tier)
        widget = self.query_one("#tier-detail", Static)
        if result is None:
            scored = tier in (self.detail or {}).get("tiers", ALL_TIERS)
            widget.update(Text(f"{tier}: " + ("no result yet" if scored else "not scored in this run"), "grey50"))
            return
        evidence = result.get("evidence") or {}
        head = Text.assemble((f"{tier} ", "bold"), (f"{GLYPH.get(result['status'])} {result['status']}",
                                                    GLYPH_STYLE.get(result["status"], "")))
        if result.get("category"):
            head.append(f" · {result['category']}", "red")
        for key, label in (("exit_code", "exit"), ("duration_s", "s"), ("signature", "signature")):
            if evidence.get(key) is not None:
                head.append(f" · {label} {evidence[key]}" if label != "s" else f" · {evidence[key]:.1f}s", "grey70")
        if evidence.get("evidence_line"):
            head.append(f"\n{evidence['evidence_line']}", "yellow")
        if evidence.get("reason"):
            head.append(f"\n{evidence['reason']}", "grey70")
        if (gpu_use := gpu_use_text(evidence)) is not None:
            head.append(f"\n{gpu_use}", "grey70")
        if tier == "C5":
            count = len(evidence.get("hallucinations") or [])
            head.append(f"\n{count} hallucination(s) · see the “Report vs probes” tab", "bold red" if count else "green")
        tail = str(evidence.get("log_tail") or "").rstrip().splitlines()[-6:]
        widget.update(Group(head, Text("\n".join(tail), "grey62", no_wrap=True, overflow="ellipsis")))

    # -- raw log tab --------------------------------------------------------------------------------
    def _raw_files(self, logs: list[dict[str, Any]]) -> None:
        options = self.query_one("#raw-files", OptionList)
        known = [str(option.id) for option in options.options]
        wanted = [row["path"] for row in logs]
        if known == wanted:
            return
        highlighted = options.highlighted
        options.clear_options()
        for row in logs:
            size = row.get("nbytes") or 0
            label = Text.assemble((f"{row['name']}.{row['stream']}", "bold" if size else "grey50"),
                                  (f"  {size / 1024:.1f}K" if size else "  empty", "grey50"))
            options.add_option(Option(label, id=row["path"]))
        if logs:
            agent = next((index for index, row in enumerate(logs)
                          if row["name"].endswith("agent") and row["stream"] == "stdout"), 0)
            options.highlighted = highlighted if highlighted is not None and highlighted < len(logs) else agent

    @on(OptionList.OptionHighlighted, "#raw-files")
    def _raw_selected(self, event: OptionList.OptionHighlighted) -> None:
        path = str(event.option.id)
        if path != self._raw_path:
            self._raw_path = path
            self._load_raw(path)

    @work(thread=True, exclusive=True, group="raw")
    def _load_raw(self, path: str) -> None:
        lines, offset = data.read_tail(path)
        self.app.call_from_thread(self._show_raw, path, lines, offset)

    def _show_raw(self, path: str, lines: list[str], offset: int) -> None:
        if path != self._raw_path:
            return
        log = self.query_one("#raw-log", Log)
        log.clear()
        log.write_lines(lines or ["(empty)"])
        log.border_title = Path(path).name
        self._raw_offset = offset

    def _tail_raw(self) -> None:
        job = self.job
        if self._raw_path is None or job is None or job.state not in ("running", "paused"):
            return
        text, offset = data.read_more(self._raw_path, self._raw_offset)
        if text:
            self._raw_offset = offset
            self.query_one("#raw-log", Log).write(text)

    # -- files tab ----------------------------------------------------------------------------------
    def _mount_files(self, detail: dict[str, Any]) -> None:
        if self._files_mounted:
            return
        attempt = detail.get("attempt") or {}
        workdir = attempt.get("workdir")
        placeholder = self.query_one("#files-placeholder", Static)
        if not workdir or not Path(workdir).is_dir():
            placeholder.update(Text(f"no work dir yet ({workdir or 'the job has not started'})", "grey50"))
            return
        self._files_mounted = True
        tree = DirectoryTree(workdir, id="files")
        tree.border_title = workdir
        self.query_one("#files-row", Horizontal).mount(tree, before=placeholder)
        placeholder.remove()

    @on(DirectoryTree.FileSelected)
    def _file_selected(self, event: DirectoryTree.FileSelected) -> None:
        preview = self.query_one("#file-preview", Log)
        preview.clear()
        preview.border_title = str(event.path.name)
        try:
            with open(event.path, "rb") as handle:
                head = handle.read(64 * 1024)
        except OSError as error:
            preview.write_line(f"(cannot read: {error.strerror})")
            return
        if b"\0" in head[:4096]:
            preview.write_line(f"(binary file, {event.path.stat().st_size:,} bytes)")
            return
        preview.write_lines(head.decode(errors="replace").splitlines())

    def action_scroll_tab(self, action: str) -> None:
        """Home/End/PageUp/PageDown/←/→ on the tiers table: the open tab's view scrolls."""
        tabs = self.query_one("#tabs", TabbedContent)
        view = {"tab-transcript": "#transcript", "tab-raw": "#raw-log", "tab-report": "#report-scroll",
                "tab-files": "#file-preview"}.get(tabs.active, "#transcript")
        getattr(self.query_one(view), f"action_{action}")()
        self._follow_title()

    # -- commands -----------------------------------------------------------------------------------
    def cmd_follow(self) -> None:
        log = self.query_one("#transcript", Log)
        self.query_one("#tabs", TabbedContent).active = "tab-transcript"
        log.scroll_end(animate=False)
        self._follow_title()

    def cmd_next_tab(self) -> None:
        self._cycle_tab(1)

    def cmd_prev_tab(self) -> None:
        self._cycle_tab(-1)

    def _cycle_tab(self, step: int) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        ids = ["tab-transcript", "tab-raw", "tab-report", "tab-files"]
        tabs.active = ids[(ids.index(tabs.active) + step) % len(ids)] if tabs.active in ids else ids[0]

    def cmd_retry_tier(self) -> None:
        job = self.job
        tier = self.selected_tier or "C0"
        if job is not None:
            self.dash.request_control(self.feed, "retry", job=job, tier=tier)

    def cmd_retry_job(self) -> None:
        if self.job is not None:
            self.dash.request_control(self.feed, "retry", job=self.job)

    def cmd_pause_job(self) -> None:
        job = self.job
        if job is not None:
            self.dash.request_control(self.feed, "resume" if job.state == "paused" else "pause", job=job)

    def cmd_pause_run(self) -> None:
        self.dash.request_control(self.feed, "resume" if self.feed.run.get("state") == "paused" else "pause")

    def cmd_cancel_job(self) -> None:
        if self.job is not None:
            self.dash.request_control(self.feed, "cancel", job=self.job)

    def cmd_cancel_run(self) -> None:
        self.dash.request_control(self.feed, "cancel")


# -- hosts ----------------------------------------------------------------------------------------
class GpuRow(Horizontal):
    DEFAULT_CSS = """
    GpuRow { height: 2; }
    GpuRow.header { height: 1; color: $text-muted; }
    GpuRow > .gpu-name { width: 9; }
    GpuRow > .gpu-util { width: 1fr; }
    GpuRow > .gpu-util-pct { width: 7; text-align: right; padding-right: 1; }
    GpuRow > .gpu-mem { width: 12; }
    GpuRow > .gpu-stats { width: 31; padding-left: 1; text-wrap: nowrap; }
    GpuRow > .gpu-job { width: 30; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, host: str, gpu: int | None, name: str | None, header: bool = False) -> None:
        super().__init__(classes="header" if header else "")
        self.host = host
        self.gpu = gpu
        self.gpu_name = (name or "").replace("NVIDIA ", "")
        self.header = header

    def compose(self) -> ComposeResult:
        if self.header:
            for label, css in (("GPU", "gpu-name"), ("utilisation, fixed 0–100 %", "gpu-util"), ("now", "gpu-util-pct"),
                               ("memory", "gpu-mem"), ("used/total   temp  power", "gpu-stats"),
                               ("leased by", "gpu-job")):
                yield Static(label, classes=css)
            return
        yield Static(Text.assemble((f"GPU{self.gpu}", "bold"), ("\n" + self.gpu_name, "grey50")), classes="gpu-name")
        yield FixedSparkline(0, 100, "util", classes="gpu-util")
        yield Static(classes="gpu-util-pct")
        yield FixedSparkline(0, 1, "magenta", classes="gpu-mem")
        yield Static(classes="gpu-stats")
        yield Static(classes="gpu-job")

    def show(self, samples: list[data.Sample], lease: dict[str, Any] | None, now: float) -> None:
        if not self.query(".gpu-util"):
            return  # just mounted, not yet composed: the next refresh shows it
        util = self.query_one(".gpu-util", FixedSparkline)
        mem = self.query_one(".gpu-mem", FixedSparkline)
        last = samples[-1] if samples else None
        stale = last is None or now - last.ts > data.STALE_SAMPLE_S
        util.set([s.util for s in samples])
        total = next((s.mem_total for s in reversed(samples) if s.mem_total), None) or 1.0
        mem.set([s.mem_used for s in samples], hi=total)
        pct = self.query_one(".gpu-util-pct", Static)
        stats = self.query_one(".gpu-stats", Static)
        if last is None:
            pct.update(Text("  —", "grey50"))
            stats.update(Text("no samples yet", "grey50"))
        elif stale:
            pct.update(Text(" stale", "grey50 italic"))
            stats.update(Text(f"last sample {duration(now - last.ts)} ago", "grey50 italic"))
        else:
            pct.update(Text(f"{last.util or 0:4.0f}%", "bold"))
            stats.update(Text.assemble(
                (f"{(last.mem_used or 0) / 1024:5.1f}/{(last.mem_total or 0) / 1024:.0f} GiB", "magenta"),
                (f"  {last.temp:3.0f}°C" if last.temp is not None else "    —", "yellow"),
                (f"  {last.power:4.0f} W" if last.power is not None else "     —", "cyan"),
            ))
        job = self.query_one(".gpu-job", Static)
        job.update(Text.assemble(("◐ ", "cyan"), (f"{lease['key']}", "bold"), (f" #{lease['number']}", "grey50"),
                                 no_wrap=True, overflow="ellipsis") if lease else Text("idle", "grey50"))


class HostsScreen(DashScreen):
    SCREEN_ID = "hosts"
    BINDINGS = bindings_for("hosts")

    def __init__(self, feed: RunFeed, readonly: bool = False) -> None:
        super().__init__()
        self.feed = feed
        self.readonly = readonly
        self.leases: dict[tuple[str, int], dict[str, Any]] = {}
        self._layout: list[tuple[str, tuple[int, ...]]] = []

    def compose(self) -> ComposeResult:
        yield Static(id="hosts-header")
        yield VerticalScroll(id="hosts-body")
        yield Footer()

    def on_mount(self) -> None:
        self._rebuild()
        self._load_leases()

    def _gpus(self, host: data.HostView) -> tuple[int, ...]:
        return tuple(sorted(set(host.gpu_ids) | {g for (h, g) in self.feed.gpu_series() if h == host.name}))

    def _rebuild(self) -> None:
        body = self.query_one("#hosts-body", VerticalScroll)
        layout = [(host.name, self._gpus(host)) for host in self.feed.hosts.values()]
        if layout == self._layout and body.children:
            return
        self._layout = layout
        body.remove_children()
        boxes = []
        for host in self.feed.hosts.values():
            box = Vertical(classes="host-box", id=f"box-{host.name}")
            box.border_title = f"{host.name} · {host.kind} · {host.inventory.get('hostname', '')}"
            reason = Static(classes="host-reason", id=f"reason-{host.name}")
            reason.display = False  # until _show_state says why the host runs no jobs
            children: list[Any] = [Static(id=f"state-{host.name}"), reason]
            gpus = self._gpus(host)
            if gpus:
                children.append(GpuRow(host.name, None, None, header=True))
                children += [GpuRow(host.name, gpu, host.gpu_name(gpu)) for gpu in gpus]
            else:
                children.append(Static(Text("no GPU on this host — CPU jobs only", "grey62"), classes="no-gpu"))
            children.append(Static(classes="host-jobs", id=f"jobs-{host.name}"))
            boxes.append((box, children))
        if not boxes:
            body.mount(Static(Text("no hosts recorded for this run yet", "grey50")))
        for box, children in boxes:
            body.mount(box)
            box.mount(*children)
        self.call_after_refresh(self._refresh_rows)

    def _show_state(self, host: data.HostView) -> None:
        """A host's state, and why it runs no jobs, updated in place as the store changes."""
        style = "green" if host.state == "up" else "bold red"
        inv = host.inventory
        for box in self.query(f"#box-{host.name}"):
            box.border_subtitle = f"{host.state} · {inv.get('cpus', '?')} CPUs · {inv.get('slots', '?')} slots"
        for widget in self.query(f"#state-{host.name}"):
            widget.update(Text.assemble(("● ", style), (host.state, style), (f"  {inv.get('os', '')}", "grey50")))
        for widget in self.query(f"#reason-{host.name}"):
            widget.update(Text(host.state_line or "", style))
            widget.display = host.state_line is not None

    def apply_changes(self, changes: Changes) -> None:
        if changes.hosts or changes.gpu or changes.jobs or changes.run:
            self._rebuild()
            self._refresh_rows()

    def every_second(self) -> None:
        self._refresh_rows()
        if int(time.time()) % 2 == 0:
            self._load_leases()

    @work(thread=True, exclusive=True, group="leases")
    def _load_leases(self) -> None:
        leases = data.leases(self.feed.db_path, self.feed.run_id)
        self.app.call_from_thread(self._set_leases, leases)

    def _set_leases(self, leases: dict[tuple[str, int], dict[str, Any]]) -> None:
        self.leases = leases
        self._refresh_rows()

    def _refresh_rows(self) -> None:
        now = time.time()
        series = self.feed.gpu_series()
        for row in self.query(GpuRow):
            if row.header:
                continue
            row.show(series.get((row.host, row.gpu), []), self.leases.get((row.host, row.gpu)), now)
        for host in self.feed.hosts.values():
            self._show_state(host)
        running: dict[str, list[str]] = {}
        for job in self.feed.jobs.values():
            if job.state in ("running", "paused") and job.host:
                running.setdefault(job.host, []).append(job.key)
        for host in self.feed.hosts:
            for widget in self.query(f"#jobs-{host}"):
                keys = running.get(host, [])
                text = Text.assemble((f"{len(keys)} job(s) running here", "bold" if keys else "grey50"))
                if keys:
                    text.append(": " + ", ".join(keys[:12]) + (" …" if len(keys) > 12 else ""), "grey70")
                widget.update(text)
        state, style = _run_state(self.feed)
        self.query_one("#hosts-header", Static).update(Text.assemble(
            ("Hosts", "bold"), (f" · run {self.feed.run_id} ", "grey62"), ("● ", style), (state, style),
            ("   one cell per sample · fixed scales: util 0–100 %, memory 0–total", "grey50")))


# -- history --------------------------------------------------------------------------------------
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
        runs = data.history(self.dash.db_path)
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
        result = data.compare(self.dash.db_path, self.run_ids)
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


def dumps(value: Any) -> str:
    return json.dumps(value, default=str)
