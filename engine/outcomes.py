"""How a job that ended in `error` is counted and shown: the one place that says which error
categories are infrastructure failures.

An attempt ends `done`, `cancelled` or `error` with a category (`AttemptOutcome` in
engine/run/lifecycle.py). An infrastructure failure (`INFRA_CATEGORIES`: the harness, a host, a
checkout, the model's API) says nothing about the agent: the scheduler retries it
(`defaults.retries.infra`), and a job that still ends in `error` stands outside every denominator.
A job that ends in `error` for any other reason (a phase timeout an agent's environment can provoke,
say) keeps whatever was judged (engine/results/scoring.py): an agent cannot leave the denominators by making
its own job fail. Since such jobs may lack verdicts, every view — `resenv show`,
`resenv report` in every format, the dashboard — counts those jobs per agent by category
(`errors_text`) and shows each one's category (`state_text`: ``error/model_api``) and reason, so they
never vanish silently from the pass rates. The category list is open-ended: whatever the store
holds is shown as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

INFRA_CATEGORIES = frozenset({"infra", "model_api", "host_setup"})
"""Error categories that are infrastructure failures: outside every denominator."""

RETRIED_CATEGORIES = frozenset({"infra", "model_api"})
"""The infrastructure failures that trying again can mend (a lost connection, a model API outage), so
the scheduler retries them (`defaults.retries.infra`, with backoff). `host_setup` is not among them:
a host whose key is wrong, whose user is refused, or whose data dir that user cannot create fails
the same way every time, so its jobs end at once with the cause and the fix."""


def is_infra(category: str | None) -> bool:
    return category in INFRA_CATEGORIES


def is_retried(category: str | None) -> bool:
    return category in RETRIED_CATEGORIES


def state_text(state: str, category: str | None) -> str:
    """A job's state with its error category: ``error/model_api``; other states as they are."""
    return f"{state}/{category}" if state == "error" and category else state


OUTSIDE = "outside every denominator"


def errors_text(categories: Mapping[str | None, int], *, say_outside: bool = True) -> str:
    """Jobs that ended in `error`, by category: ``2 infra errors (1 model_api), outside every
    denominator`` (unless a title already says so: `say_outside`), then the others (``1 other error
    (timeout)``: their judged tiers count); "" when there are none."""
    infra = {category: n for category, n in categories.items() if n and is_infra(category)}
    other = {category: n for category, n in categories.items() if n and not is_infra(category)}
    parts = []
    for label, group in (("infra", infra), ("other", other)):
        total = sum(group.values())
        if not total:
            continue
        detail = ", ".join(f"{n} {category or 'uncategorized'}" for category, n in sorted(
            group.items(), key=lambda item: (-item[1], str(item[0]))) if category != "infra")
        parts.append(f"{total} {label} error{'s' if total != 1 else ''}" + (f" ({detail})" if detail else "")
                     + (f", {OUTSIDE}" if label == "infra" and say_outside else ""))
    return "; ".join(parts)


