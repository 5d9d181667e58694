"""The spec's `agents:` section: command agents, the built-in baseline, and the LLM CLIs (Claude Code,
Codex) with their secrets and prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Strict, Tag, ValidationInfo, field_validator

from .fields import (
    Env,
    EnvName,
    PositiveInt,
    PromptText,
    Runnable,
    Seconds,
    SpecModel,
    StrictText,
    TemplateText,
    Text,
    _kind_tag,
    render,
)


# --------------------------------------------------------------------------- LLM agents: secrets, prompt, claude-code and codex


class AgentExtras(SpecModel):
    """Secrets (passed to the agent process only, redacted from everything stored) and the prompt."""

    env_from: tuple[EnvName, ...] = ()
    env_file: Text | None = None
    prompt: PromptText | None = None

    @field_validator("env_file")
    @classmethod
    def _env_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Kept absolute (a snapshot must not depend on the cwd); must exist when loaded."""
        if value is None:
            return value
        context = info.context or {}
        base_dir = context.get("base_dir")
        where = Path(value) if base_dir is None else Path(base_dir) / value
        if base_dir is not None and context.get("check_paths", True) and not where.is_file():
            raise ValueError(f"env_file {value!r} is not a file (looked at {where})")
        return str(where.absolute()) if base_dir is not None else value


class CliAgentSpec(AgentExtras):
    """What the coding-agent CLIs share (see engine/agents/claude_code.py and codex.py)."""

    executable: Text
    model: Text | None = None
    args: tuple[TemplateText, ...] = ()
    env: Env = Field(default_factory=dict)
    completion_grace_s: Seconds = 30.0

    def render_env(self, values: Mapping[str, str]) -> dict[str, str]:
        return {name: render(value, values) for name, value in self.env.items()}


class ClaudeCodeAgent(CliAgentSpec):
    """Claude Code in print mode (`claude -p --output-format stream-json --verbose`)."""

    kind: Literal["claude-code"]
    executable: Text = "claude"
    permission_mode: Literal["bypassPermissions", "acceptEdits", "default", "dontAsk", "plan"] = "bypassPermissions"
    max_turns: PositiveInt | None = None


CodexConfigValue = Union[TemplateText, Annotated[bool, Strict()], Annotated[int, Strict()], Annotated[float, Strict()]]


class CodexAgent(CliAgentSpec):
    """OpenAI Codex in exec mode (`codex exec --json -`); `config` entries become `-c key=value`."""

    kind: Literal["codex"]
    executable: Text = "codex"
    sandbox: Literal["none", "read-only", "workspace-write", "danger-full-access"] = "none"
    config: dict[StrictText, CodexConfigValue] = Field(default_factory=dict)


class CommandAgent(Runnable, AgentExtras):
    """Any CLI: runs `command` in the job's work dir, then reads the report it wrote."""

    kind: Literal["command"]
    output: Literal["text", "jsonl"] = "text"


class BaselineAgent(SpecModel):
    """The built-in rule-based baseline (no LLM): `engine/agents/baseline_agent.py` reads the repo's
    dependency metadata statically, builds a venv in {env}, installs, scans imports for what is
    still missing, verifies with the new interpreter and reports only what it measured."""

    kind: Literal["baseline"]
    offline: Annotated[bool, Strict()] = False
    python: Text | None = None
    driver: Text | None = None  # the interpreter that runs the script (default: see engine/agents/baseline.py)
    installer: Literal["auto", "uv", "pip"] = "auto"


Agent = Annotated[
    Union[
        Annotated[CommandAgent, Tag("kind=command")],
        Annotated[BaselineAgent, Tag("kind=baseline")],
        Annotated[ClaudeCodeAgent, Tag("kind=claude-code")],
        Annotated[CodexAgent, Tag("kind=codex")],
    ],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known agent kinds: command, baseline, claude-code, codex"),
]
