"""Agent adapters: how to start an agent for a job and how to read what it prints."""

from __future__ import annotations

from typing import Any

from .base import AgentAdapter, AgentCommand, JobPaths
from .baseline import BaselineAgent
from .claude_code import ClaudeCodeAgent  # issue 6
from .codex import CodexAgent  # issue 6
from .command import CommandAgent


def adapter_for(name: str, spec: Any) -> AgentAdapter:
    """The adapter for one `agents:` entry of the benchmark."""
    if spec.kind == "command":
        return CommandAgent(name, spec)
    if spec.kind == "baseline":
        return BaselineAgent(name, spec)
    if spec.kind == "claude-code":  # issue 6
        return ClaudeCodeAgent(name, spec)
    if spec.kind == "codex":  # issue 6
        return CodexAgent(name, spec)
    raise ValueError(f"agent {name!r}: kind {spec.kind!r} has no adapter")


__all__ = ["AgentAdapter", "AgentCommand", "BaselineAgent", "ClaudeCodeAgent", "CodexAgent", "JobPaths", "CommandAgent",
           "adapter_for"]
