"""The pyramid figure a paper would print: one funnel per agent (C0–C4 with their denominators) and
C5's hallucinations as a panel of their own, titled with the suite, the agents and the run's date.

The numbers are the report's own: `figure_data` reads `scoring.to_json` (what `resenv report
--format json` prints) and formats rates with the tables' formatter, so the figure can never show a
value that no table shows. Drawing (`write_pyramid_figure`) only lays those numbers out; the format
follows the file's suffix (FORMATS).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..outcomes import errors_text
from .scoring import HALLUCINATION_KINDS, PYRAMID, RunScores, _pct, c0_text, state_note, to_json
from ..wording import counted

FORMATS = (".png", ".svg", ".pdf")
TIER_NAMES = {"C0": "imports resolved", "C1": "CPU run", "C2": "CUDA aligned", "C3": "1 GPU", "C4": "multi-GPU"}
# Greys that stay apart when printed in black and white; the hatches tell C5's kinds apart without colour.
FUNNEL_SHADES = ("#1b1b1b", "#3d3d3d", "#5f5f5f", "#818181", "#a3a3a3")
LEGEND = "C0: imports resolved / all imports; C1–C4: passed / judged jobs (skips and infrastructure errors outside)."
KIND_STYLE = {"path": ("#2b2b2b", ""), "version": ("#8a8a8a", "////"), "capability": ("#d4d4d4", "....")}


@dataclass(frozen=True)
class FunnelBar:
    """One tier of one agent's funnel. C0 counts imports (the report's `C0 paper` ratio), C1–C4 judged jobs."""

    tier: str
    passed: int
    denominator: int
    rate: float | None  # None: nothing judged (the bar is drawn empty and says why)
    text: str  # `6/7 (85.7%)`: the rate as the report's tables print it
    note: str = ""  # why a tier has no bar, or what stayed outside its denominator


@dataclass(frozen=True)
class AgentFunnel:
    agent: str
    jobs: int
    bars: tuple[FunnelBar, ...]
    hallucinations: dict[str, int] | None  # C5 claims contradicted by the probes, by kind; None: not scored
    report_problems: int  # C5: jobs with a missing or invalid report
    errors: str  # jobs that ended in error, by category as show and report say it ("" when none)


@dataclass(frozen=True)
class FigureData:
    title: str
    subtitle: str  # the scoring the numbers come from
    agents: tuple[AgentFunnel, ...]


def figure_data(scores: RunScores) -> FigureData:
    """What the figure shows, taken from the report's JSON: never a number of its own."""
    report = to_json(scores)
    agents = tuple(_funnel(name, entry) for name, entry in report["agents"].items())
    run = report["run"]
    started = scores.run.get("started_at") or scores.run["created_at"]
    day = datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%d")
    names = ", ".join(agent.agent for agent in agents) or "no agents"
    title = f"suite {run['suite']} · {names} · {day} · run {run['id']}{state_note(run)}"
    subtitle = report["scoring"]["header"] if report["scoring"] else ""
    return FigureData(title=title, subtitle=subtitle, agents=agents)


def _funnel(agent: str, entry: dict[str, Any]) -> AgentFunnel:
    c0 = entry["c0"]
    bars = [FunnelBar("C0", c0["total"] - c0["missing"], c0["total"], c0["paper_ratio"],
                      c0_text(c0["total"] - c0["missing"], c0["total"]),
                      "" if c0["total"] else "no import census")]
    for tier in PYRAMID[1:]:
        tally = entry["tiers"][tier]
        notes = []
        if tally["insufficient_hardware"]:
            notes.append(f"{counted(tally['insufficient_hardware'], 'job')} without GPUs")
        if tally["errors"]:
            notes.append(f"{counted(tally['errors'], 'infrastructure error')}")
        if not tally["denominator"] and not notes:
            notes.append("not judged")
        bars.append(FunnelBar(tier, tally["passed"], tally["denominator"], tally["rate"],
                              f"{tally['passed']}/{tally['denominator']} ({_pct(tally['rate'])})", ", ".join(notes)))
    return AgentFunnel(
        agent=agent, jobs=entry["jobs"], bars=tuple(bars),
        hallucinations=entry["hallucinations"],
        report_problems=sum(entry["report_problems"].values()), errors=errors_text(entry["errors"]["by_category"], say_outside=False),
    )


def write_pyramid_figure(scores: RunScores, path: Path) -> Path:
    """Draw `figure_data(scores)` into `path` (.png, .svg or .pdf, by its suffix), whose directory
    exists (the CLI checks it with `paths.writable_file` before printing the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = figure_data(scores)
    columns = max(1, len(data.agents))
    with matplotlib.rc_context({"font.size": 8, "pdf.fonttype": 42, "svg.fonttype": "none",
                                "hatch.color": "#555555", "hatch.linewidth": 0.6}):
        fig, axes = plt.subplots(1, columns + 1, figsize=(3.3 * columns + 3.2, 3.0), dpi=200,
                                 gridspec_kw={"width_ratios": [1.0] * columns + [0.95]}, squeeze=False)
        for index, (ax, funnel) in enumerate(zip(axes[0], data.agents)):
            _draw_funnel(ax, funnel, tier_labels=index == 0)
        for ax in axes[0][len(data.agents):columns]:  # a run without jobs: an empty panel, said so
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=ax.transAxes)
        _draw_hallucinations(axes[0][-1], data.agents)
        fig.suptitle(f"Verification pyramid · {data.title}", fontsize=9, fontweight="bold")
        footer = f"{data.subtitle}.  {LEGEND}" if data.subtitle else LEGEND
        fig.text(0.5, 0.005, footer, ha="center", va="bottom", fontsize=6.5, color="#444444")
        fig.tight_layout(rect=(0, 0.04, 1, 0.97))
        fig.savefig(path, format=path.suffix.lower().lstrip("."))
        plt.close(fig)
    return path


def _draw_funnel(ax: Any, funnel: AgentFunnel, *, tier_labels: bool) -> None:
    """Centred bars, widest at C0: each is its tier's pass rate inside a faint frame of 100%; the tiers
    are named beside the first funnel only, the others line up with it."""
    rows = range(len(funnel.bars))
    for row, bar, shade in zip(rows, funnel.bars, FUNNEL_SHADES):
        ax.barh(row, 100, left=0, height=0.78, color="#f1f1f1", edgecolor="#bbbbbb", linewidth=0.5)
        if bar.rate:  # none drawn for 0% or nothing judged: the label says which
            width = 100 * bar.rate
            ax.barh(row, width, left=(100 - width) / 2, height=0.78, color=shade, edgecolor="black", linewidth=0.5)
        label = bar.text if bar.denominator else "n/a"
        if bar.note:
            label += f"\n{bar.note}"
        ax.text(50, row, label, ha="center", va="center", fontsize=7, linespacing=0.95,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.8, "alpha": 0.85})
    ax.set_yticks(list(rows), [f"{bar.tier} {TIER_NAMES[bar.tier]}" for bar in funnel.bars] if tier_labels else [])
    ax.invert_yaxis()  # C0 on top: the funnel narrows downwards
    ax.set_xlim(0, 100)
    ax.set_xticks([])
    ax.spines[["top", "right", "bottom", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    title = f"{funnel.agent} · {counted(funnel.jobs, 'job')}"
    if funnel.errors:  # "2 infra errors (2 model_api)": the legend says they are outside the bars
        title += f"\n{funnel.errors}"
    ax.set_title(title, fontsize=8.5)


def _draw_hallucinations(ax: Any, funnels: tuple[AgentFunnel, ...]) -> None:
    """C5: contradicted claims per agent, one hatched bar per kind, each named with its count."""
    height = 0.8 / len(HALLUCINATION_KINDS)
    top = max([1, *(n for funnel in funnels for n in (funnel.hallucinations or {}).values())])
    for row, funnel in enumerate(funnels):
        if funnel.hallucinations is None:  # C5 judged none of its jobs: no counts, not zeros
            ax.text(top * 0.02, row, "not scored: C5 judged no job", va="center", fontsize=7, color="#444444")
            continue
        for index, kind in enumerate(HALLUCINATION_KINDS):
            y = row + (index - (len(HALLUCINATION_KINDS) - 1) / 2) * height
            count = funnel.hallucinations[kind]
            colour, hatch = KIND_STYLE[kind]
            ax.barh(y, count, height=height * 0.92, color=colour, hatch=hatch, edgecolor="black", linewidth=0.5)
            ax.text(count + top * 0.02, y, f"{count} {kind}", va="center", fontsize=7)
    ax.set_yticks(range(len(funnels)), [
        funnel.agent + (f"\n{counted(funnel.report_problems, 'report')} missing/invalid"
                        if funnel.report_problems else "") for funnel in funnels])
    ax.set_ylim(len(funnels) - 0.5, -0.5)  # the first agent on top, each row centred (bars or not)
    ax.set_xlim(0, top * 1.45)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("claims contradicted by the probes")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("C5 self-report hallucinations", fontsize=8.5)
