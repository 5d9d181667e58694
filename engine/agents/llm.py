"""What the CLI coding agents (`claude-code`, `codex`) share: secrets, env, prompt, version.

Adapters are built once per run (shared by every job of that agent) and are stateless: `parse`
maps one line to events and nothing else, so a crash replay can re-parse a raw log at any point.
Everything stateful about one attempt (usage, budgets, completion) lives in `session.AgentSession`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..secrets import AgentSecrets, load_secrets, register
from .base import AgentCommand, JobPaths
from .prompt import render_prompt


def agent_secrets(spec: Any) -> AgentSecrets:
    """Load an agent's secrets (env_from, env_file) and register them for redaction at once."""
    secrets = load_secrets(getattr(spec, "env_from", ()) or (), getattr(spec, "env_file", None))
    register(secrets.env)
    return secrets


class SpecAgent:
    """An agent run from its spec, given the task prompt; its secrets are registered when it is built."""

    uses_prompt = True

    def __init__(self, name: str, spec: Any) -> None:
        self.name = name
        self.spec = spec
        self.secrets = agent_secrets(spec)

    @property
    def model(self) -> str | None:
        return getattr(self.spec, "model", None)


class CliAgent(SpecAgent, ABC):
    """Base of the CLI adapters; subclasses give `argv(paths)`, `default_env()` and `parse`."""

    kind = "cli"

    @property
    def completion_grace_s(self) -> float:
        return float(getattr(self.spec, "completion_grace_s", 30.0))

    def version_argv(self) -> list[str]:
        return [self.spec.executable, "--version"]

    def default_env(self) -> dict[str, str]:
        return {}

    @abstractmethod
    def argv(self, paths: JobPaths) -> list[str]:
        """The CLI's argv for one job (each CLI has its own flags)."""

    def command(self, paths: JobPaths, prompt: str | None = None) -> AgentCommand:
        """The CLI's argv and env (secrets excluded: the session adds them) with the prompt on stdin."""
        values = paths.template_values()
        if prompt is None:
            prompt, _ = render_prompt(getattr(self.spec, "prompt", None), values)
        env = {**self.default_env(), **self.spec.render_env(values)}
        return AgentCommand(argv=self.argv(paths), env=env, stdin=prompt.encode())
