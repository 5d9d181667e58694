"""Small widgets and renderers of the dashboard: tier glyphs, pyramids, the fitted tables, a
fixed-scale sparkline, the host strip, the following log and the transcript highlighter."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.highlighter import Highlighter
from rich.markup import escape
from rich.style import Style
from rich.text import Text
from textual import events
from textual.reactive import reactive
from textual.widget import Widget
from textual.geometry import Size
from textual.widgets import DataTable, Log

from ..engine import wording
from ..engine.wording import counted
from textual.widgets.data_table import ColumnKey, DuplicateKey, Row, RowKey

from ..engine.money import usd
from ..engine.outcomes import errors_text
from .data import STALE_SAMPLE_S
from .views import ALL_TIERS, PYRAMID, HostView, JobView, Sample, displayed_tiers

if TYPE_CHECKING:
    from ..engine.results.scoring import AgentScore, RunScores

# -- tier glyphs ------------------------------------------------------------------------------
GLYPH = {"pass": "✓", "fail": "✗", "skip": "–", "error": "!", "running": "◐", "pending": "·", None: " "}
GLYPH_STYLE = {
    "pass": "bold green", "fail": "bold red", "skip": "grey50", "error": "bold yellow", "running": "bold cyan",
    "pending": "grey42", None: "",
}
STATE_STYLE = {
    "running": "bold cyan", "paused": "bold yellow", "queued": "grey58", "done": "green", "error": "bold red",
    "cancelled": "grey50",
}
STATE_MARK = {"running": "◐", "paused": "‖", "queued": "·", "done": "✓", "error": "!", "cancelled": "⊘"}
TIER_HEADER = "C0 C1 C2 C3 C4 C5"
LEGEND_MARKUP = ("[green]✓[/] pass  [red]✗[/] fail  [grey50]–[/] skip  [cyan]◐[/] running  "
                 "[grey42]·[/] pending  [yellow]![/] error")
LEGEND = Text.assemble(
    ("✓", GLYPH_STYLE["pass"]), " pass  ", ("✗", GLYPH_STYLE["fail"]), " fail  ", ("–", GLYPH_STYLE["skip"]),
    " skip  ", ("◐", GLYPH_STYLE["running"]), " running  ", ("·", GLYPH_STYLE["pending"]), " pending  ",
    ("!", GLYPH_STYLE["error"]), " error",
)


def tier_text(statuses: dict[str, str | None]) -> Text:
    """Six glyphs under the `C0 C1 C2 C3 C4 C5` header (each glyph under its tier's C)."""
    return _tier_text(tuple(statuses.get(tier) for tier in ALL_TIERS))


@lru_cache(maxsize=4096)
def _tier_text(statuses: tuple[str | None, ...]) -> Text:
    """Shared, never mutated: thousands of rows with the same pyramid cost one Text."""
    text = Text(no_wrap=True)
    for index, status in enumerate(statuses):
        text.append(GLYPH.get(status, "?"), GLYPH_STYLE.get(status, ""))
        if index < len(statuses) - 1:
            text.append("  ")
    return text


def job_tier_text(job: JobView, selected: Sequence[str]) -> Text:
    """The jobs table's tier cell. A job that is not running shows its results as they are, so its
    cell is looked up by its results (a big run has a few hundred distinct ones among its jobs)."""
    if job.state in ("running", "paused"):
        return tier_text(job.tier_display(selected))
    return _settled_tier_text(tuple(job.tiers.items()), tuple(selected))


@lru_cache(maxsize=4096)
def _settled_tier_text(results: tuple[tuple[str, str], ...], selected: tuple[str, ...]) -> Text:
    """`tier_text(job.tier_display(selected))` of a job that is not running."""
    return tier_text(displayed_tiers(dict(results), selected))


@lru_cache(maxsize=64)
def state_text(state: str, category: str | None = None, short: bool = False) -> Text:
    """A job's state with its mark; a job that ended in error with its category (`! error/model_api`;
    `short`, for the jobs table's narrow column: `! model_api`, the mark and colour saying error)."""
    shown = (category if short else f"{state}/{category}") if state == "error" and category else state
    return Text(f"{STATE_MARK.get(state, ' ')} {shown}", STATE_STYLE.get(state, ""), no_wrap=True)


@lru_cache(maxsize=256)
def queue_state_text(queue: str) -> Text:
    """A running job whose command waits in a Slurm queue, by the reason the column has room
    for (`⧗ Resources`); the job's header shows the whole state."""
    code, _, reason = queue.removeprefix("slurm ").partition(" ")
    shown = reason or {"PD": "in queue", "S": "suspended"}.get(code, code)
    return Text(f"⧗ {shown}", "yellow", no_wrap=True)


def duration(seconds: float | None) -> str:
    """A time as the CLI prints it (engine/wording.py), `—` when unknown."""
    return "—" if seconds is None else wording.duration(seconds)


def tokens_text(tokens: int) -> str:
    if not tokens:
        return "—"
    if tokens < 10_000:
        return f"{tokens:,}"
    if tokens < 10_000_000:
        return f"{tokens / 1000:.1f}k"
    return f"{tokens / 1e6:.1f}M"


def cost_text(cost: float | None, partial: bool = False) -> str:
    """Dollars as every view shows them (engine/money.py): None is `—`, a known zero `$0.00`."""
    return usd(cost, partial)


@lru_cache(maxsize=65536)
def _escaped(text: str) -> str:
    """`escape`, remembered: a run's repos, agents and hosts repeat across its rows and rebuilds."""
    return escape(text)


def job_cells(job: JobView, selected: Sequence[str], now: float) -> dict[str, Any]:
    """The overview row of one job, by column key. Plain strings where they will do (DataTable
    renders only the visible ones; building 10,000 Text objects per rebuild is what costs), escaped
    because DataTable reads strings as markup; numbers padded to their column's width."""
    return {
        "id": job.id, "repo": _escaped(job.repo), "agent": _escaped(job.agent), "where": _escaped(job.where),
        "state": state_text(job.state, job.category, short=True) if not job.queue else queue_state_text(job.queue),
        "tiers": job_tier_text(job, selected), "attempt": str(job.attempts) if job.attempts else "—",
        "tokens": f"{tokens_text(job.tokens):>6}", "cost": f"{job.cost_text:>8}",
        "elapsed": f"{duration(job.elapsed(now)):>7}",
    }


@dataclass(frozen=True)
class Column:
    """One column of a FitTable. `width`: the cells it wants; `keep`: its rank when the table is too
    narrow for every column (0 never goes, the highest goes first); `min_width`: how far it may shrink
    (its cells end in an ellipsis) to save a column from going."""

    key: str
    label: str | Text
    width: int
    keep: int = 0
    min_width: int | None = None


def fit_columns(columns: Sequence[Column], room: int, padding: int = 1) -> dict[str, int]:
    """The columns that fit in `room` cells and their widths, in table order. Columns go by rank
    (highest `keep` first) until the rest fit, shrunk if need be; a column shrinks only when that
    saves one from going."""
    shown = list(columns)

    def need(cols: Sequence[Column], shrunk: bool) -> int:
        return sum((col.min_width if shrunk and col.min_width else col.width) + 2 * padding for col in cols)

    while need(shown, False) > room and need(shown, True) > room:
        droppable = [col for col in shown if col.keep]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda col: col.keep))
    widths = {col.key: col.width for col in shown}
    excess = need(shown, False) - room
    for col in sorted(shown, key=lambda col: -col.keep):
        if excess <= 0:
            break
        if col.min_width is not None:
            cut = min(excess, col.width - col.min_width)
            widths[col.key] -= cut
            excess -= cut
    return widths


def overview_columns(jobs: Iterable[JobView]) -> list[Column]:
    """The jobs table's columns, each as wide as what it holds (a repo column of short names is
    narrow at any terminal width). C0–C5, state and # never go; then, as the terminal narrows, try,
    host:GPU, tokens, cost, elapsed, agent and last repo go."""
    jobs = list(jobs)

    def widest(values: Iterable[str], low: int, high: int) -> int:
        return max(low, min(high, max((len(value) for value in values), default=low)))

    repo = widest((job.repo for job in jobs), 4, 40)
    agent = widest((job.agent for job in jobs), 5, 24)
    return [
        Column("id", "#", widest((str(job.id) for job in jobs), 1, 6)),
        Column("repo", "repo", repo, keep=1, min_width=min(repo, 12)),
        Column("agent", "agent", agent, keep=2, min_width=min(agent, 8)),
        Column("where", "host:GPU", widest((job.where for job in jobs), 8, 16), keep=6),
        Column("state", "state", 11),
        Column("tiers", TIER_HEADER, 17),
        Column("attempt", "try", 3, keep=7),
        Column("tokens", "tokens", 6, keep=5),
        Column("cost", "cost", 8, keep=4),
        Column("elapsed", "elapsed", 7, keep=3),
    ]


class FitTable(DataTable):
    """A DataTable that lays its columns out for its width (see `fit_columns`): columns go by rank
    when it is narrow, and the `fill` column (if any) takes the cells the others leave.

    It keeps every cell of every row, shown or not, so a column that comes back on a wider terminal
    has its values, and `update_cell`/`get_cell` work for any column the table was given."""

    def __init__(self, *args: Any, columns: Sequence[Column] = (), fill: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.specs: tuple[Column, ...] = tuple(columns)
        self.fill = fill
        self._cells: dict[str, dict[str, Any]] = {}

    @property
    def shown(self) -> tuple[str, ...]:
        """The keys of the columns on screen, in order."""
        return tuple(str(key.value) for key in self.columns)

    def set_columns(self, columns: Sequence[Column]) -> None:
        """New column specs (e.g. content widths changed): lay the table out again."""
        if tuple(columns) != self.specs:
            self.specs = tuple(columns)
            self.fit()

    def _on_resize(self, event: events.Resize) -> None:
        super()._on_resize(event)
        self.fit()

    def fit(self) -> None:
        """Lay the columns out for the current width; rows are re-added when the shown set changes."""
        if not self.specs:
            return
        room = (self.size.width or 200) - 2  # 2: the vertical scrollbar
        widths = fit_columns(self.specs, room, self.cell_padding)
        if self.fill in widths:
            used = sum(width + 2 * self.cell_padding for width in widths.values())
            widths[self.fill] += max(0, room - used)
        if tuple(widths) != self.shown:
            self._relayout(widths)
            return
        changed = False
        for key, width in widths.items():
            column = self.columns[ColumnKey(key)]
            if column.width != width or column.auto_width:
                column.width, column.auto_width, changed = width, False, True
        if changed:
            self._clear_caches()
            self._require_update_dimensions = True
            self.refresh()

    def _relayout(self, widths: dict[str, int]) -> None:
        order = [str(row.key.value) for row in self.ordered_rows]
        cursor = self.cursor_row
        cells = self._cells
        super().clear(columns=True)
        self._cells = {}
        for spec in self.specs:
            if spec.key in widths:
                self.add_column(spec.label, key=spec.key, width=widths[spec.key])
        self.add_keyed_rows((key, cells[key]) for key in order)
        if order:
            self.move_cursor(row=min(cursor, len(order) - 1), animate=False)

    def clear(self, columns: bool = False) -> FitTable:
        self._cells = {}
        super().clear(columns)
        return self

    def add_keyed_rows(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """`add_row(*cells, key=key)` for many one-line rows given as {column key: cell}, with the
        per-row bookkeeping done once (10,000 rows take tens of milliseconds instead of seconds)."""
        columns = [column.key for column in self.ordered_columns]
        names = [str(column.value) for column in columns]  # a row's cells keyed by these plain strings
        locations, data, row_map, new_rows, kept = self._row_locations, self._data, self.rows, self._new_rows, self._cells
        # DataTable renders and measures every cell of every new row once (on idle) to size its
        # auto-width columns and labels; a fitted table has neither (fixed widths, one-line rows
        # without labels), so its new rows skip that pass: a 10,000-row table is sized by its row
        # count alone, and only the rows on screen are ever rendered.
        measured = any(column.auto_width for column in self.ordered_columns)
        was_empty = not row_map
        index = len(row_map)
        for key, cells in rows:
            row_key = RowKey(key)
            if row_key in locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            kept[key] = cells  # the table's own from now on: update_cell changes it
            locations[row_key] = index
            index += 1
            # str keys: a ColumnKey hashes and compares as its string, so DataTable finds every cell by
            # its ColumnKey, and building the row hashes in C instead of calling ColumnKey.__hash__
            data[row_key] = dict(zip(names, map(cells.get, names)))
            row_map[row_key] = Row(row_key, 1, None, False)
            if measured:
                new_rows.add(row_key)
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if was_empty and row_map and columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self._update_count += 1
        self.check_idle()

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Any, *,  # type: ignore[override]
                    update_width: bool = False) -> None:
        """Any column the table was given: a column not on screen keeps the value for later."""
        row, column = str(getattr(row_key, "value", row_key)), str(getattr(column_key, "value", column_key))
        self._cells.setdefault(row, {})[column] = value
        if column in self.shown:
            super().update_cell(row_key, column_key, value, update_width=update_width)

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> Any:
        row, column = str(getattr(row_key, "value", row_key)), str(getattr(column_key, "value", column_key))
        if column in self.shown:
            return super().get_cell(row_key, column_key)
        return self._cells[row][column]

    def action_scroll_home(self) -> None:
        """Home: the first row (DataTable scrolls to the first column, which a fitted table shows)."""
        if self.cursor_type == "row" and self.row_count:
            self.move_cursor(row=0, animate=False)
        else:
            super().action_scroll_home()

    def action_scroll_end(self) -> None:
        """End: the last row."""
        if self.cursor_type == "row" and self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)
        else:
            super().action_scroll_end()

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """With fixed column widths and one-line rows there is nothing to measure: skip DataTable's
        per-cell measuring of every new row (seconds for 10,000 rows) and only size the table."""
        if (any(column.auto_width for column in self.columns.values()) or self._labelled_row_exists
                or any(self.rows[key].auto_height for key in new_rows if key in self.rows)):
            super()._update_dimensions(new_rows)
            return
        width = sum(column.get_render_width(self) for column in self.columns.values())
        header = self.header_height if self.show_header else 0
        self.virtual_size = Size(width + self._row_label_column_width, self._total_row_height + header)


# -- pyramids ---------------------------------------------------------------------------------
def errors_line(score: AgentScore, width: int) -> Text:
    """The agent's jobs that ended in error, by category (blank if none); the panel's title says the
    infrastructure ones are outside the rates."""
    if not score.errors:
        return Text(" " * width)
    return _fit(Text(f"! {errors_text(score.errors, say_outside=False)}", "bold red", no_wrap=True), width)


def agent_pyramid(score: AgentScore, width: int) -> list[Text]:
    """An agent's C0–C4 pass counts as bars over their denominators, C0 on top (every list of tiers
    in the dashboard runs C0 to C5 downwards), as lines exactly `width` cells wide.

    Each bar is as wide as its denominator (judged jobs) relative to the agent's jobs, centred, so
    the tiers narrow like a funnel; green is passed, red failed. Skips and errors are counted beside."""
    note_width = 9 if width < 34 else 17
    bar_width = max(4, width - 3 - 1 - note_width)
    halluc = sum(score.hallucinations.values())
    title = Text.assemble((score.agent, "bold"), (f" · {counted(score.jobs, 'job')}", "grey62"), no_wrap=True)
    lines = [_fit(title, width)]
    jobs = max(score.jobs, 1)
    for tier in PYRAMID:
        tally = score.tiers[tier]
        line = Text(f"{tier} ", "bold", no_wrap=True)
        if tally.denominator:
            size = max(1, round(bar_width * tally.denominator / jobs))
            passed = round(size * tally.passed / tally.denominator)
            if tally.passed and not passed:
                passed = 1
            pad = (bar_width - size) // 2
            line.append(" " * pad)
            line.append("█" * passed, "green")
            line.append("█" * (size - passed), "red")
            line.append(" " * (bar_width - size - pad))
        else:
            line.append(" " * (bar_width // 2) + "·" + " " * (bar_width - bar_width // 2 - 1), "grey42")
        rate = f"{100 * tally.rate:3.0f}%" if tally.rate is not None else "   –"
        line.append(f" {tally.passed:>2}/{tally.denominator:<2}{rate}" if tally.denominator else "    –    ",
                    "" if tally.denominator else "grey50")
        if note_width > 9:
            extra = []
            if tally.skipped:
                extra.append(f"{tally.skipped} skip")
            if tally.errors:
                extra.append(f"{tally.errors} err")
            line.append(" " + " ".join(extra), "grey50")
        lines.append(_fit(line, width))
    c5 = score.tiers["C5"]
    audit = Text("C5 ", "bold", no_wrap=True)
    audit.append(f"audit {c5.passed}/{c5.denominator}" if c5.denominator else "audit –", "grey70")
    audit.append(f" · {halluc} halluc.", "bold red" if halluc else "green")
    lines.append(_fit(audit, width))
    return lines


def count_panel(agents: Sequence[AgentScore], width: int) -> Text:
    """The pyramid panel where the pyramids do not fit side by side: per tier, each agent's
    passed/judged in a column; errors (outside every denominator) last."""
    column = max(6, (width - 3) // len(agents) - 1)
    lines = [Text("   ", no_wrap=True)]
    for score in agents:
        lines[0].append(_fit(Text(score.agent, "bold"), column))
        lines[0].append(" ")
    for tier in PYRAMID:
        line = Text(f"{tier} ", "bold", no_wrap=True)
        for score in agents:
            tally = score.tiers[tier]
            line.append(_fit(Text(f"{tally.passed}/{tally.denominator}" if tally.denominator else "–",
                                  "" if tally.denominator else "grey50"), column))
            line.append(" ")
        lines.append(line)
    c5 = Text("C5 ", "bold", no_wrap=True)
    for score in agents:
        halluc = sum(score.hallucinations.values())
        c5.append(_fit(Text(f"{halluc} hal.", "bold red" if halluc else "green"), column))
        c5.append(" ")
    lines.append(c5)
    if any(score.errors for score in agents):
        errors = Text("!  ", "bold red", no_wrap=True)
        for score in agents:
            count = sum(score.errors.values())
            errors.append(_fit(Text(f"{count} err" if count else "", "bold red"), column))
            errors.append(" ")
        lines.append(errors)
    return Text("\n").join(_fit(line, width) for line in lines)


def _fit(text: Text, width: int) -> Text:
    text = text.copy()
    text.truncate(width, overflow="ellipsis", pad=True)
    return text


def pyramid_panel(scores: RunScores | None, width: int = 60) -> Any:
    """Every agent's pyramid side by side within `width` cells (a table of counts where they do not
    fit side by side); under them, when any job ended in error, each agent's errors by category."""
    if scores is None:
        return Text("scoring…", "grey50")
    if not scores.agents:
        return Text("no jobs", "grey50")
    agents = list(scores.agents.values())
    gap = 3
    per = max(20, (width - gap * (len(agents) - 1)) // len(agents))
    if per * len(agents) + gap * (len(agents) - 1) > width:
        return count_panel(agents, width)
    errors = any(score.errors for score in agents)
    blocks = [agent_pyramid(score, per) + ([errors_line(score, per)] if errors else []) for score in agents]
    lines = []
    for row in range(max(len(block) for block in blocks)):
        line = Text(no_wrap=True)
        for index, block in enumerate(blocks):
            if index:
                line.append(" " * gap)
            line.append_text(block[row] if row < len(block) else Text(" " * per))
        lines.append(line)
    return Text("\n").join(lines)


TIER_BG = {"pass": "on dark_green", "fail": "on red3", "skip": "on grey30", "error": "on dark_orange3",
           "running": "on dodger_blue3", "pending": "on grey15", None: "on grey11"}


def job_pyramid(statuses: dict[str, str | None], selected_tier: str | None = None, width: int = 41) -> Text:
    """One job's tiers as a funnel `width` cells wide, C0 (widest) on top like the tiers table
    beside it, coloured by status; `◀` marks the selected tier."""
    text = Text(no_wrap=True)
    widest = width - 2  # 2: the marker
    for index, tier in enumerate(ALL_TIERS):
        status = statuses.get(tier)
        size = max(14, widest - 5 * index)
        label = f"{tier} {GLYPH.get(status, '?')} {status if status is not None else 'not scored'}"
        block = label.center(size)
        pad = (widest - size) // 2
        style = f"bold white {TIER_BG.get(status, 'on grey11')}"
        if tier == selected_tier:
            style += " underline"
        text.append(" " * pad)
        text.append(block, style)
        text.append(" ◀" if tier == selected_tier else "  ", "bold")
        text.append(" " * (widest - size - pad))
        if index < len(ALL_TIERS) - 1:
            text.append("\n")
    return text


# -- sparklines -------------------------------------------------------------------------------
BLOCKS = " ▁▂▃▄▅▆▇█"


def spark_text(values: Sequence[float | None], width: int, lo: float = 0.0, hi: float = 100.0,
               style: str = "green") -> Text:
    """The last `width` values as block characters on a FIXED lo..hi scale (0 % is a blank cell,
    anything above lo at least one eighth); None (no sample) is a dim dot."""
    shown = list(values)[-width:]
    text = Text(no_wrap=True)
    text.append(" " * (width - len(shown)))
    span = (hi - lo) or 1.0
    for value in shown:
        if value is None:
            text.append("·", "grey35")
            continue
        level = min(8, max(0, math.ceil((value - lo) / span * 8)))
        colour = style
        if style == "util":
            colour = "green" if level <= 5 else ("yellow" if level <= 7 else "bold red")
        text.append(BLOCKS[level] if level else "▁", colour if level else "grey30")
    return text


class FixedSparkline(Widget):
    """A sparkline on a fixed scale (Textual's Sparkline rescales to its data's min/max, so a GPU at
    3 % would draw as tall as one at 100 %). One cell per sample, newest on the right."""

    DEFAULT_CSS = "FixedSparkline { height: 1; width: 1fr; }"
    data: reactive[tuple[float | None, ...]] = reactive((), layout=False)

    def __init__(self, lo: float = 0.0, hi: float = 100.0, style: str = "util", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lo = lo
        self.hi = hi
        self.style_name = style

    def set(self, values: Iterable[float | None], hi: float | None = None) -> None:
        if hi is not None:
            self.hi = hi
        self.data = tuple(values)

    def render(self) -> Text:
        return spark_text(self.data, max(1, self.size.width), self.lo, self.hi, self.style_name)


def gpu_line(host: HostView, gpu: int, samples: Sequence[Sample], now: float, spark_width: int = 16) -> Text:
    """One GPU in one line: sparkline (fixed 0–100 %), utilisation, memory, power; or stale."""
    name = Text(f"{host.name}:{gpu}".ljust(10), "bold", no_wrap=True)
    if not samples:
        return name + Text(" no samples yet", "grey50")
    last = samples[-1]
    age = now - last.ts
    if age > STALE_SAMPLE_S:
        return name + Text(f" stale · last sample {duration(age)} ago", "grey50 italic")
    line = name + Text(" ") + spark_text([s.util for s in samples], spark_width, style="util")
    util = f"{last.util:3.0f}%" if last.util is not None else "  —"
    mem = (f"{(last.mem_used or 0) / 1024:5.1f}/{(last.mem_total or 0) / 1024:.0f}G"
           if last.mem_total else "    —")
    power = f"{last.power:4.0f}W" if last.power is not None else "   —"
    line.append(f" {util} {mem} {power}")
    return line


def host_strip(hosts: dict[str, HostView], gpu: dict[tuple[str, int], Any], now: float | None = None,
               spark_width: int = 16) -> Group:
    now = now or time.time()
    lines: list[Text] = []
    for host in hosts.values():
        ids = sorted(set(host.gpu_ids) | {g for (h, g) in gpu if h == host.name})
        if not ids:
            cpus = host.inventory.get("cpus")
            lines.append(Text.assemble((host.name.ljust(10), "bold"), (" no GPU", "grey62"),
                                       (f" · {cpus} CPUs" if cpus else "", "grey50"),
                                       (f" · {host.state}", "green" if host.state == "up" else "red")))
            continue
        for index in ids:
            lines.append(gpu_line(host, index, list(gpu.get((host.name, index), ())), now, spark_width))
    if not lines:
        lines.append(Text("no hosts recorded for this run yet", "grey50"))
    return Group(*lines)


# -- logs -------------------------------------------------------------------------------------
class FollowLog(Log):
    """A Log that follows its tail and leaves it at once on a key. Textual animates Home, PageUp
    and ↑; on a live transcript the next batch of lines (several a second) landed while the view was
    still at the end and scrolled it back there, so Home seemed to do nothing."""

    def _leave_tail(self, y: float, x: float | None = None) -> None:
        self.scroll_to(x=x, y=max(0.0, y), animate=False, immediate=True)

    def action_scroll_home(self) -> None:
        self._leave_tail(0, x=0 if self.scroll_y == 0 else None)

    def action_page_up(self) -> None:
        self._leave_tail(self.scroll_y - self.scrollable_content_region.height)

    def action_scroll_up(self) -> None:
        self._leave_tail(self.scroll_y - 1)


# -- transcript highlighting ------------------------------------------------------------------
class TranscriptHighlighter(Highlighter):
    """Colours transcript lines by the marker they start with (see engine/results/eventtext.py `format_event`)."""

    RULES: tuple[tuple[re.Pattern[str], Style], ...] = (
        (re.compile(r"^── .*"), Style(color="cyan", bold=True)),
        (re.compile(r"^══ .*"), Style(color="magenta", bold=True)),
        (re.compile(r"^› .*"), Style(color="bright_white", bold=True)),
        (re.compile(r"^\$ .*"), Style(color="yellow")),
        (re.compile(r"^▶ .*"), Style(color="dodger_blue1")),
        (re.compile(r"^(↳|■) exit 0\b.*"), Style(color="green")),
        (re.compile(r"^(↳|■) exit (-?[1-9]\d*|None)\b.*"), Style(color="red", bold=True)),
        (re.compile(r"^(↳|■) .*"), Style(color="green")),
        (re.compile(r"^  │ .*"), Style(color="grey62")),
        (re.compile(r"^  … .*"), Style(color="grey50", italic=True)),
        (re.compile(r"^◆ \S+ pass.*"), Style(color="green", bold=True)),
        (re.compile(r"^◆ \S+ skip.*"), Style(color="grey58")),
        (re.compile(r"^◆ \S+ error.*"), Style(color="yellow", bold=True)),
        (re.compile(r"^◆ .*"), Style(color="red", bold=True)),
        (re.compile(r"^! .*"), Style(color="bright_red", bold=True)),
        (re.compile(r"^∑ .*"), Style(color="magenta")),
        (re.compile(r"^● .*"), Style(color="cyan")),
        (re.compile(r"^⚠ .*"), Style(color="yellow", bold=True)),
        (re.compile(r"^  · .*"), Style(color="grey58")),
        (re.compile(r"TIMED OUT|Traceback \(most recent call last\)|\bError\b[:\w]*"), Style(color="red", bold=True)),
    )

    def highlight(self, text: Text) -> None:
        plain = text.plain
        first = True
        for pattern, style in self.RULES:
            if pattern.pattern.startswith("^"):
                if not first:
                    continue
                match = pattern.match(plain)
                if match:
                    text.stylize(style, match.start(), match.end())
                    first = False
            else:
                for match in pattern.finditer(plain):
                    text.stylize(style, match.start(), match.end())
