"""The `command` agent: any CLI given as a template over the job's paths."""

from __future__ import annotations

import json
from typing import Any

from ..sandbox.base import OutputLine
from .base import AgentCommand, JobPaths

# Event types an agent in `output: jsonl` mode may emit in resenv's own schema.
JSONL_TYPES = {"message", "thinking", "tool_call", "tool_result", "usage", "error", "output"}


class CommandAgent:
    def __init__(self, name: str, spec: Any) -> None:
        self.name = name
        self.spec = spec

    def command(self, paths: JobPaths) -> AgentCommand:
        values = paths.template_values()
        return AgentCommand(argv=self.spec.argv(values), env=self.spec.render_env(values))

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        if self.spec.output == "jsonl" and line.stream == "stdout":
            return [self._parse_jsonl(line)]
        return [{"type": "output", "stream": line.stream, "text": line.text}]

    def _parse_jsonl(self, line: OutputLine) -> dict[str, Any]:
        try:
            event = json.loads(line.text)
        except ValueError:
            return {"type": "output", "stream": line.stream, "text": line.text}
        if isinstance(event, dict) and event.get("type") in JSONL_TYPES:
            return event
        return {"type": "unknown", "raw": line.text}
