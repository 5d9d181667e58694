"""The hosts screen: each host's state (up, down or broken, since when and why), its slots and
leases, and its GPUs' utilisation and memory over time.
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Static

from .. import data, queries
from ..commands import bindings_for
from ..data import RunFeed
from ..views import Changes, HostView, Sample
from ..widgets import FixedSparkline, duration
from .base import DashScreen, run_state


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

    def show(self, samples: list[Sample], lease: dict[str, Any] | None, now: float) -> None:
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

    def _gpus(self, host: HostView) -> tuple[int, ...]:
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

    def _show_state(self, host: HostView) -> None:
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
        leases = queries.leases(self.feed.db_path, self.feed.run_id)
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
        state, style = run_state(self.feed)
        self.query_one("#hosts-header", Static).update(Text.assemble(
            ("Hosts", "bold"), (f" · run {self.feed.run_id} ", "grey62"), ("● ", style), (state, style),
            ("   one cell per sample · fixed scales: util 0–100 %, memory 0–total", "grey50")))
