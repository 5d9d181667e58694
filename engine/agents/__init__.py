"""Agent adapters: how to start an agent for a job and how to read what it prints.

The adapters of the LLM CLIs and the baseline load when a benchmark names one (``adapter_for``, or
an attribute of this package): every `resenv` command imports this package, and most runs use one
kind, so the others' modules would only lengthen every process start."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .base import AgentAdapter, AgentCommand, JobPaths
from .command import CommandAgent

LAZY = {"BaselineAgent": ".baseline", "ClaudeCodeAgent": ".claude_code", "CodexAgent": ".codex"}
"""Adapter class -> the module that defines it, imported on first use."""

KINDS = {"baseline": "BaselineAgent", "claude-code": "ClaudeCodeAgent", "codex": "CodexAgent"}
"""`agents:` kind -> its adapter class, for the kinds loaded on first use."""


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(import_module(LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def adapter_for(name: str, spec: Any) -> AgentAdapter:
    """The adapter for one `agents:` entry of the benchmark."""
    if spec.kind == "command":
        return CommandAgent(name, spec)
    if spec.kind not in KINDS:
        raise ValueError(f"agent {name!r}: kind {spec.kind!r} has no adapter")
    adapter: AgentAdapter = __getattr__(KINDS[spec.kind])(name, spec)
    return adapter


__all__ = ["AgentAdapter", "AgentCommand", "BaselineAgent", "ClaudeCodeAgent", "CodexAgent", "JobPaths", "CommandAgent",
           "adapter_for"]
