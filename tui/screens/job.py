"""The job screen: one job's tiers, transcript, report vs probes, integrity findings, files and
controls.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, DirectoryTree, Footer, Log, OptionList, Static, TabPane, TabbedContent
from textual.widgets.option_list import Option

from ...engine.results.eventtext import gpu_use_text
from .. import queries
from ..commands import bindings_for
from ..data import RunFeed
from ..views import ALL_TIERS, Changes, JobView
from ..widgets import (
    FollowLog,
    GLYPH,
    GLYPH_STYLE,
    TranscriptHighlighter,
    duration,
    job_pyramid,
    state_text,
    tokens_text,
)
from .base import DashScreen
from .report import TierTable, integrity_text, report_table, tier_columns


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
            detail = queries.job_detail(self.feed.db_path, self.job_id)
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
        lines, offset = queries.read_tail(path)
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
        text, offset = queries.read_more(self._raw_path, self._raw_offset)
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
