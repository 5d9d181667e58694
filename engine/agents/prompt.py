"""The task prompt every LLM agent gets: the goal, the rules, and the report contract.

One text for every agent, so agents are compared on the same task. A benchmark may replace it
(`defaults.prompt`, or an agent's own `prompt`); the text actually given to an agent is stored with
the attempt as an ``agent_prompt`` event (with its sha256 and where it came from).

Templates use the job placeholders of `spec.TEMPLATE_FIELDS` ({repo}, {env}, {report}, {workdir},
{gpus}, {ngpus}, {job}, {run}, {python}) plus {schema}: the report's fields, generated from
`probes.report.REPORT_SCHEMA` so the prompt can never drift from what the audit checks.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ...probes.report import REPORT_SCHEMA
from ..spec import PROMPT_FIELDS, render

__all__ = ["DEFAULT_PROMPT", "PROMPT_FIELDS", "prompt_event", "render_prompt", "schema_text"]

DEFAULT_PROMPT = """\
You are preparing a research code repository so that it actually runs.

GOAL
Make the repository checked out at {repo} runnable: create a Python environment for it (the
suggested location is {env}; any tool is fine: venv + pip, uv, conda), install what the code needs,
and check that it works by running it (import its packages, run its documented entry point or a
small smoke test). GPUs visible to you: "{gpus}" ({ngpus} in total; empty means none).

RULES
- Do not modify, delete or rename files that are tracked by git in {repo}. Add files outside the
  repository (in {workdir}) if you need helpers, and clone dependencies there too. Build artifacts
  the install itself creates are fine. Before judging, tracked files are restored and modules added
  inside the repository under the name of an import are moved out.
- Nobody will answer questions: work on your own, non-interactively, until you are done.
- Report only what you verified yourself by running a command in the environment you built. If you
  did not check something, or you are not sure, write null for it. A wrong claim counts against you;
  null never does.
- Before you stop, always write the report, even if the setup failed: then report what you verified
  and null for the rest.

REPORT
Write one JSON object to {report} (UTF-8, nothing else in the file). Fields:
{schema}
"""


def schema_text(schema: dict[str, Any] | None = None) -> str:
    """The report's fields as a short list, then an example (from REPORT_SCHEMA)."""
    schema = schema or REPORT_SCHEMA
    required = set(schema.get("required", []))
    lines = []
    for name, prop in schema.get("properties", {}).items():
        types = prop.get("type")
        kind = " or ".join(types) if isinstance(types, list) else str(types) if types else "any"
        need = "required" if name in required else "optional"
        lines.append(f"- {name} ({kind}, {need}): {prop.get('description', '').strip()}")
        for sub, subprop in (prop.get("properties") or {}).items():
            subtypes = subprop.get("type")
            subkind = " or ".join(subtypes) if isinstance(subtypes, list) else str(subtypes)
            lines.append(f"    - {name}.{sub} ({subkind}): {subprop.get('description', '').strip()}")
    example = {
        "python_path": "/absolute/path/to/env/bin/python",
        "python_version": "3.11.9",
        "framework": {"name": "torch", "version": "2.3.1+cu121"},
        "cuda_available": None,
        "gpu_count": None,
        "ddp_expected_ok": None,
        "packages": {"numpy": "1.26.4"},
        "notes": "what you did and what you could not verify",
    }
    lines.append("Unknown extra keys are allowed. Example:")
    lines.append(json.dumps(example, indent=2))
    return "\n".join(lines)


def render_prompt(template: str | None, values: dict[str, str]) -> tuple[str, str]:
    """(prompt text, source) for a job: `template` (a benchmark override) or the default."""
    source = "benchmark" if template is not None else "default"
    text = render(template if template is not None else DEFAULT_PROMPT, {**values, "schema": schema_text()})
    return text, source


def prompt_event(text: str, source: str, where: str | None) -> dict[str, Any]:
    return {"text": text, "sha256": hashlib.sha256(text.encode()).hexdigest(), "source": source,
            "from": where}
