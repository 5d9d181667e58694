"""Token normalization, pricing, the usage ledger's rules, and the task prompt."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from resenv.engine.agents.prompt import DEFAULT_PROMPT, render_prompt, schema_text
from resenv.engine.agents.usage import (
    Usage,
    UsageLedger,
    find_price,
    from_anthropic,
    from_claude_model_usage,
    from_openai,
    price_usage,
)
from resenv.engine.spec import Price, SpecError, loads_benchmark
from resenv.probes.report import REPORT_SCHEMA

P = Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0, date=datetime.date(2025, 9, 29))


def test_vendor_shapes() -> None:
    assert from_anthropic({"input_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 30,
                           "output_tokens": 40, "output_tokens_details": {"thinking_tokens": 5}}) == Usage(10, 20, 30, 40, 5)
    assert from_claude_model_usage({"inputTokens": 1, "cacheReadInputTokens": 2, "cacheCreationInputTokens": 3,
                                    "outputTokens": 4}) == Usage(1, 2, 3, 4, 0)
    # Codex exec names: cached (and cache writes) are INSIDE input; reasoning inside output
    assert from_openai({"input_tokens": 100, "cached_input_tokens": 60, "cache_write_input_tokens": 10,
                        "output_tokens": 50, "reasoning_output_tokens": 20}) == Usage(30, 60, 10, 50, 20)
    # Responses API names; absent fields count 0; garbage is 0
    assert from_openai({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40},
                        "output_tokens_details": {"reasoning_tokens": 7}}) == Usage(60, 40, 0, 0, 7)
    assert from_openai({"input_tokens": "lots", "output_tokens": -3}) == Usage()
    assert Usage(1, 2, 3, 4, 5).tokens == 10  # reasoning is inside output


def test_prices() -> None:
    prices = {"claude-sonnet-4-5": P, "claude": P, "gpt-5": P}
    assert find_price("claude-sonnet-4-5-20250929", prices)[0] == "claude-sonnet-4-5"
    assert find_price("gpt-5", prices)[0] == "gpt-5"
    assert find_price("o3", prices) is None and find_price(None, prices) is None
    assert price_usage(Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000, 999), P) == pytest.approx(22.05)


def test_ledger_counts_each_message_once_at_its_largest() -> None:
    ledger = UsageLedger(default_model="m", prices={"m": P})
    assert ledger.message("a", None, Usage(100, 0, 0, 1)) is True
    assert ledger.message("a", None, Usage(100, 0, 0, 1)) is False  # a repeat changes nothing
    ledger.message("a", None, Usage(100, 0, 0, 25))  # the placeholder grew
    ledger.message("b", "m", Usage(10, 5, 0, 2))
    assert ledger.totals()["usage"] == Usage(110, 5, 0, 27)


def test_a_snapshot_supersedes_the_estimates_before_it() -> None:
    ledger = UsageLedger(default_model="claude-x", prices={})
    ledger.message("a", "claude-x-20250101", Usage(100, 0, 0, 1))  # another spelling of the model
    ledger.cumulative({"claude-x": Usage(100, 0, 0, 40)}, {"claude-x": 0.5})
    ledger.message("a", "claude-x-20250101", Usage(100, 0, 0, 1))  # a late repeat: already covered
    totals = ledger.totals()
    assert totals["usage"] == Usage(100, 0, 0, 40) and totals["cost_usd"] == 0.5
    ledger.message("c", None, Usage(7, 0, 0, 1))  # after the snapshot: added on top
    assert ledger.totals()["usage"] == Usage(107, 0, 0, 41)


def test_default_prompt_covers_the_report_schema() -> None:
    values = {"repo": "/w/repo", "env": "/w/env", "report": "/w/report.json", "workdir": "/w", "gpus": "0,1",
              "ngpus": "2", "job": "r/a", "run": "run1", "python": ""}
    text, source = render_prompt(None, values)
    assert source == "default"
    for name in REPORT_SCHEMA["properties"]:
        assert f"- {name} (" in text
    assert "/w/report.json" in text and "/w/repo" in text and "null" in text
    assert "{" not in DEFAULT_PROMPT.replace("{repo}", "").replace("{env}", "").replace("{report}", "") \
        .replace("{workdir}", "").replace("{gpus}", "").replace("{ngpus}", "").replace("{schema}", "")
    custom, source = render_prompt("Fix {repo}. {{literal}} {schema}", values)
    assert source == "benchmark" and custom.startswith("Fix /w/repo. {literal} - python_path")
    assert "python_path" in schema_text()


BENCH = """
version: 1
defaults: {{suite: s, agent: a{defaults}}}
agents:
  a: {agent}
suites: {{s: {{repos: [{{id: r, source: {{path: .}}, entrypoints: {{cpu: {{command: 'true'}}}},
                      not_applicable: {{single_gpu: x, multi_gpu: y}}}}]}}}}
"""


def load(agent: str, defaults: str = "") -> object:
    return loads_benchmark(BENCH.format(agent=agent, defaults=defaults), Path("."))


def test_agent_specs() -> None:
    bench = load("{kind: claude-code, model: claude-sonnet-4-5, max_turns: 3, env_from: [ANTHROPIC_API_KEY]}",
                 ", prompt: 'Go {repo} {schema}'")
    agent = bench.agent("a")
    assert (agent.executable, agent.permission_mode, agent.max_turns) == ("claude", "bypassPermissions", 3)
    assert bench.defaults.prompt == "Go {repo} {schema}"
    codex = load("{kind: codex, config: {model_provider: x, 'model_providers.x.request_max_retries': 2, "
                 "'model_providers.x.base_url': 'http://127.0.0.1:1/v1'}}").agent("a")
    assert codex.sandbox == "none" and codex.config["model_providers.x.request_max_retries"] == 2
    with pytest.raises(SpecError) as error:
        load("{kind: claude-code, prompt: 'use {secret}', permission_mode: yolo, env_from: ['not valid']}")
    text = str(error.value)
    assert "unknown placeholder {secret} in prompt" in text and "permission_mode" in text and "not valid" in text


def test_env_file_is_kept_absolute(tmp_path: Path) -> None:
    (tmp_path / "keys.env").write_text("A=b\n")
    bench = loads_benchmark(BENCH.format(agent="{kind: codex, env_file: keys.env}", defaults=""), tmp_path)
    assert bench.agent("a").env_file == str(tmp_path / "keys.env")
    with pytest.raises(SpecError):
        loads_benchmark(BENCH.format(agent="{kind: codex, env_file: other.env}", defaults=""), tmp_path)
