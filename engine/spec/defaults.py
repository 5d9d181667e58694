"""The spec's `defaults:` section: timeouts, budgets, retries, output limits and model prices."""

from __future__ import annotations

from pydantic import Field

from .fields import (
    Name,
    NonNegativeInt,
    NonNegativeNumber,
    PositiveInt,
    PositiveNumber,
    PriceDate,
    PromptText,
    Seconds,
    SpecModel,
    StrictText,
)


# --------------------------------------------------------------------------- defaults


class Timeouts(SpecModel):
    """Per job phase, in seconds."""

    provision: Seconds = 300
    checkout: Seconds = 600
    agent: Seconds = 3600
    probes: Seconds = 3600
    audit: Seconds = 120
    teardown: Seconds = 300


class TierTimeouts(SpecModel):
    """Per tier, in seconds; C1/C3/C4 apply when an entrypoint sets no timeout."""

    C0: Seconds = 600
    C1: Seconds = 600
    C2: Seconds = 180
    C3: Seconds = 900
    C4: Seconds = 1200


class Budgets(SpecModel):
    """Agent limits per job (run_dollars: for the whole run); None means no limit."""

    wall_clock_s: Seconds | None = 3600
    tokens: PositiveInt | None = None
    dollars: PositiveNumber | None = None
    run_dollars: PositiveNumber | None = None


class Retries(SpecModel):
    """Infrastructure retries per job (agent failures are results, never retried)."""

    infra: NonNegativeInt = 2
    backoff_s: Seconds = 5.0


class OutputLimits(SpecModel):
    """How much of an attempt's command output the store keeps as events (the raw logs keep all)."""

    head_bytes: NonNegativeInt = 4 * 2**20
    tail_bytes: NonNegativeInt = 256 * 2**10


class Price(SpecModel):
    """USD per million tokens for one model, and the date the price was read."""

    input: NonNegativeNumber
    cached_input: NonNegativeNumber
    cache_write: NonNegativeNumber
    output: NonNegativeNumber
    date: PriceDate


class Defaults(SpecModel):
    suite: Name = "starter"
    agent: Name = "venv-pip"
    host: Name = "local"
    concurrency: PositiveInt = 4
    timeouts: Timeouts = Field(default_factory=Timeouts)
    tier_timeouts: TierTimeouts = Field(default_factory=TierTimeouts)
    budgets: Budgets = Field(default_factory=Budgets)
    retries: Retries = Field(default_factory=Retries)
    output: OutputLimits = Field(default_factory=OutputLimits)
    prices: dict[StrictText, Price] = Field(default_factory=dict)
    prompt: PromptText | None = None  # the task prompt of LLM/command agents (None: engine/agents/prompt.py's)
