"""The `command` agent: any CLI given as a template over the job's paths.

``output: text`` keeps every line as ``output`` (its first 16 KiB; ``truncated`` and ``nbytes`` tell a
longer line). ``output: jsonl`` reads stdout as resenv's own
transcript schema (see `transcript`): a JSON object whose ``type`` is one of `JSONL_TYPES` is kept
as it is (``usage`` lines are counted: ``scope: delta`` by default, ``cumulative`` for running
totals; ``completion`` marks the run complete); a JSON line of any other type — or not an object —
is kept verbatim as ``unknown``; a line that is not JSON is ``output``. Nothing is dropped and
nothing is fatal; long strings are capped (`transcript.cap_fields`), the raw log keeps them whole.

The task prompt (`prompt.py`) reaches the CLI as the ``RESENV_PROMPT`` environment variable; its
secrets (``env_from``, ``env_file``) are added to its environment only.
"""

from __future__ import annotations

from typing import Any

from ..sandbox.base import OutputLine
from .base import AgentCommand, JobPaths
from .llm import SpecAgent
from .prompt import render_prompt
from .transcript import cap_fields, load_line, output, safe_keys, unknown

# Event types an agent in `output: jsonl` mode may emit in resenv's own schema.
JSONL_TYPES = {"message", "thinking", "tool_call", "tool_result", "usage", "completion", "error", "output",
               "session", "status"}


class CommandAgent(SpecAgent):
    """Any CLI given as a template over the job's paths (see the module docstring)."""

    def command(self, paths: JobPaths, prompt: str | None = None) -> AgentCommand:
        values = paths.template_values()
        env = self.spec.render_env(values)
        if prompt is None:
            prompt, _ = render_prompt(getattr(self.spec, "prompt", None), values)
        env.setdefault("RESENV_PROMPT", prompt)
        return AgentCommand(argv=self.spec.argv(values), env=env)

    @property
    def full_lines(self) -> bool:
        """Only JSON lines need their whole text back (session.py); plain text keeps the sandbox's cut."""
        return self.spec.output == "jsonl"

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        if self.spec.output == "jsonl" and line.stream == "stdout":
            return [self._parse_jsonl(line)]
        event = output(line.stream, line.text)
        if line.truncated:
            event |= {"truncated": True, "nbytes": line.nbytes}
        return [event]

    def _parse_jsonl(self, line: OutputLine) -> dict[str, Any]:
        event, why = load_line(line.text)
        if event is None:
            if why in ("empty", "not json") and not line.truncated:
                return output(line.stream, line.text)
            return unknown(line.text, why if not line.truncated else f"line cut at {len(line.text)} bytes")
        if isinstance(event, dict) and event.get("type") in JSONL_TYPES:
            return cap_fields(safe_keys(event))
        return unknown(line.text, f"type {event.get('type')!r}" if isinstance(event, dict) else "not an object")
