"""The pyramid figure: C0–C4 pass rates per agent as a funnel, the way a paper would show it."""

from __future__ import annotations

from pathlib import Path

from .scoring import PYRAMID, RunScores


def write_pyramid_figure(scores: RunScores, path: Path) -> Path:
    """Grouped bars per tier (one colour per agent), each labelled with passed/judged; an agent's jobs
    that ended in error (a model-API outage, say) are named in its legend entry, never in a rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = list(scores.agents.values())
    width = 0.8 / max(1, len(agents))
    fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(PYRAMID), 4.2), dpi=150)
    for index, score in enumerate(agents):
        xs = [tier_index + (index - (len(agents) - 1) / 2) * width for tier_index in range(len(PYRAMID))]
        rates = [100 * (score.tiers[tier].rate or 0.0) for tier in PYRAMID]
        errors = score.errors_text
        label = score.agent + (f" ({errors})" if errors else "")
        bars = ax.bar(xs, rates, width=width * 0.92, label=label)
        for bar, tier in zip(bars, PYRAMID):
            tally = score.tiers[tier]
            if tally.denominator:
                label = tally.text()
            elif tally.insufficient_hardware:
                label = f"n/a: {tally.insufficient_hardware} without GPUs"
            else:
                label = "n/a"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(PYRAMID)), [f"{tier}\n{name}" for tier, name in zip(PYRAMID, (
        "imports", "CPU run", "CUDA", "1 GPU", "multi-GPU"))])
    ax.set_ylim(0, 110)
    ax.set_ylabel("pass rate (% of judged jobs)")
    title = f"Verification pyramid · run {scores.run['id']}"
    if scores.scoring is not None:
        title += f"\n{scores.scoring.describe()}"
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
