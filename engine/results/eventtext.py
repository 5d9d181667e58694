"""Stored events as the lines a person reads: one readable line per event of every known type.

The dashboard's transcript and `resenv run`'s plain display both show what the store holds, so the
wording lives here, beside the engine that writes the events, and neither view imports the other.
"""

from __future__ import annotations

import json
from typing import Any

from ..money import usd
from .omitted import omitted_text
from ..outcomes import is_infra, state_text
from ..wording import counted


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = text.replace("\r", "").replace("\n", " ⏎ ")
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if text[limit - 1] != " " and space >= limit // 2:  # at a word's end (a path stays whole), unless the word is most of it
        cut = cut[:space]
    return cut.rstrip() + "…"


def _argv_text(argv: Any) -> str:
    if isinstance(argv, list):
        return " ".join(str(part) if " " not in str(part) else repr(str(part)) for part in argv)
    return str(argv)


def _num(value: Any, unit: str = "") -> str:
    """A count as `1,234`, a float as `1.5`; anything else as it is."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}" if value >= 1 or value == 0 else f"{value:.3g}{unit}"
    return f"{value}{unit}"


NOISE_KEYS = frozenset({"type", "subtype", "log", "stream", "line_no", "replayed", "message_id", "model", "usage",
                        "session_id", "tool_use_id", "id", "uuid", "parent_tool_use_id", "accounting_error"})


def _fields(data: dict[str, Any], skip: frozenset[str] | set[str] = frozenset(), limit: int = 4) -> str:
    """A few scalar fields of an event as `key value`: what a line shows of a shape it has no rule for."""
    parts = []
    for key, value in data.items():
        if key in NOISE_KEYS or key in skip or value is None or value == "" or isinstance(value, (dict, list)):
            continue
        parts.append(f"{key} {_short(value, 120) if isinstance(value, str) else _num(value)}")
        if len(parts) == limit:
            break
    return " · ".join(parts)


def error_line(data: dict[str, Any], what: str = "") -> str:
    """`! model API auth 401: Failed to authenticate · fatal`: an error's category (a model-API
    failure's kind), HTTP status, message, and
    whether it is retried (by the agent, or the attempt by the engine) or fatal."""
    category = data.get("category") or "error"
    infra = data.get("infra") or is_infra(category)
    status = data.get("status") if data.get("status") is not None else data.get("status_code")
    if category == "model_api" and data.get("api_kind"):
        category = f"model API {data['api_kind']}"
    head_text = f"! {what}{category}" + (f" {status}" if status is not None else "")
    if data.get("phase"):
        head_text += f" ({data['phase']})"
    message = data.get("message") or data.get("text") or data.get("error") or ""
    tags = []
    if data.get("retry"):
        attempt, most = data.get("attempt"), data.get("max_retries")
        tags.append(f"will retry {attempt}/{most}" if attempt is not None and most is not None else "will retry")
    if data.get("fatal"):
        tags.append("fatal")
    if infra:
        tags.append("infrastructure: not the agent's failure")
    return head_text + (f": {_short(message, 600)}" if message else "") + "".join(f" · {tag}" for tag in tags)


def _usage_line(data: dict[str, Any]) -> str:
    counts = []
    for label, keys in (("in", ("input", "input_tokens")), ("cached", ("cached_input", "cached_input_tokens")),
                        ("cache write", ("cache_write", "cache_write_tokens")), ("out", ("output", "output_tokens")),
                        ("reasoning", ("reasoning", "reasoning_tokens"))):
        value = next((data[key] for key in keys if isinstance(data.get(key), (int, float))), None)
        if value or label in ("in", "out"):
            counts.append(f"{label} {_num(value or 0)}")
    scope = f" ({data['scope']})" if data.get("scope") else ""
    text = f"∑ usage{scope} · " + " · ".join(counts)
    if isinstance(data.get("tokens"), int):
        text += f" · {data['tokens']:,} tokens"
    if data.get("model"):
        text += f" · {data['model']}"
    cost = data.get("cost_usd")
    return text + (f" · {usd(cost)}" if isinstance(cost, (int, float)) else "")


def _session_line(data: dict[str, Any]) -> str:
    parts = [f"model {data['model']}"] if data.get("model") else []
    tools = data.get("tools")
    if isinstance(tools, list):
        parts.append(f"{len(tools)} tools")
    if data.get("version"):
        parts.append(f"v{data['version']}")
    if data.get("permission_mode"):
        parts.append(str(data["permission_mode"]))
    if data.get("cwd"):
        parts.append(f"cwd {data['cwd']}")
    if not parts and data.get("session_id"):
        parts.append(f"id {data['session_id']}")
    return "● session" + (" · " + " · ".join(parts) if parts else "")


def _completion_line(data: dict[str, Any]) -> str:
    status = data.get("status") or "?"
    failed = status != "success" or data.get("is_error")
    why_ended = [str(data[key]) for key in (("subtype", "terminal_reason") if failed else ("subtype",)) if data.get(key)
                 and data[key] != status and not (failed and data[key] == "success")][:1]
    parts = [f"{status}" + (f" ({why_ended[0]})" if why_ended else "")]
    if data.get("num_turns") is not None:
        parts.append(f"{_num(data['num_turns'])} turn{'' if data['num_turns'] == 1 else 's'}")
    if isinstance(data.get("duration_s"), (int, float)):
        parts.append(f"{data['duration_s']:.1f}s")
    if isinstance(data.get("cost_usd"), (int, float)):
        parts.append(usd(data["cost_usd"]))
    if data.get("api_error_status") is not None:
        parts.append(f"API status {data['api_error_status']}")
    if data.get("permission_denials"):
        parts.append(f"{_num(data['permission_denials'])} permission denials")
    why = data.get("errors") if isinstance(data.get("errors"), list) and data.get("errors") else None
    if failed and (why or data.get("result")):
        parts.append(_short("; ".join(map(str, why)) if why else data["result"], 300))
    return ("! agent ended: " if failed else "■ agent done: ") + " · ".join(parts)


def _status_line(data: dict[str, Any]) -> str:
    subtype = str(data.get("subtype") or "status")
    if subtype == "task_started":
        detail = f": {_short(data['description'], 200)}" if data.get("description") else ""
        return f"  · task started{detail}" + (f" ({data['task_type']})" if data.get("task_type") else "")
    if subtype == "task_notification":
        return f"  · task {data.get('status') or 'update'}: {_short(data.get('summary') or '', 200)}"
    if subtype == "status" and data.get("status") == "requesting":
        return "  · requesting the model"
    if subtype == "thinking_tokens":
        return f"  · thinking ~{_num(data.get('estimated_tokens'))} tokens"
    if subtype == "todo_list":
        return f"  · todo list: {_num(data.get('completed'))}/{_num(data.get('items'))} done"
    if subtype == "user_text" or ("text" in data and isinstance(data["text"], str)):
        return f"  · {subtype.replace('_', ' ')}: {_short(data.get('text', ''), 400)}"
    fields = _fields(data)
    return f"  · {subtype.replace('_', ' ')}" + (f" · {fields}" if fields else "")


def _budget_line(data: dict[str, Any]) -> str:
    name = str(data.get("name") or "budget")
    what = name.removeprefix("budget:")

    def amount(value: Any) -> str:
        if value is None:
            return "—"
        if "dollars" in what:
            return usd(value)
        if "clock" in what or what.endswith("_s"):
            return f"{_num(value)} s"
        return _num(value)

    text = f"! budget {what}: used {amount(data.get('used'))} of {amount(data.get('limit'))}"
    if data.get("when") == "before start":
        return text + " before the agent started: it did not start"
    if data.get("stopped") is False:
        return text + f" · {data.get('when') or 'not stopped'}: the agent had finished, its result stands"
    return text + " · the agent was stopped"


def format_event(kind: str, data: dict[str, Any]) -> list[str]:
    """Transcript lines for one event, one readable line per event of every known type (never the
    event's JSON; only a type nothing knows shows as compact `type: key value` fields, or `? raw`).
    Markers at the start of a line drive the highlighter: `›` agent message, `$` tool call, `│`
    output, `↳` tool result, `▶` harness command, `■` exit or the agent done, `──` phase, `◆` tier,
    `!` timeout, error, budget or an agent that ended badly, `⚠` warning, `∑` usage, `●` session,
    `·` progress."""
    if kind == "transcript":
        kind_of = data.get("type")
        if kind_of == "message":
            step = f"[{data['step']}] " if data.get("step") else ""
            return [f"› {step}{_short(data.get('text', ''), 2000)}"]
        if kind_of == "thinking":
            return [f"  … {_short(data.get('text', ''), 600)}" if data.get("text") or not data.get("redacted")
                    else "  … (redacted thinking)"]
        if kind_of == "tool_call":
            command = data.get("command") or data.get("input") or data.get("arguments") or data.get("query") or ""
            name = data.get("name") or "tool"
            if not command and isinstance(data.get("changes"), list):
                command = ", ".join(str(change) for change in data["changes"][:5])
            text = _argv_text(command) if isinstance(command, list) else _short(command, 1000)
            return [f"$ {text}" if name in ("shell", "bash", "Bash", "exec") else f"$ {name}: {text}"]
        if kind_of == "tool_result":
            code = data.get("exit_code")
            seconds = data.get("seconds")
            parts = [f"exit {code}" if code is not None else "done"]
            if data.get("name") and data.get("name") not in ("shell", "Bash"):
                parts.append(str(data["name"]))
            if seconds is not None:
                parts.append(f"{seconds:.1f}s" if isinstance(seconds, (int, float)) else str(seconds))
            if data.get("denied"):
                parts.append("DENIED")
            if data.get("timed_out"):
                parts.append("TIMED OUT")
            lines = [f"↳ {' · '.join(parts)}"]
            tail = data.get("output_tail") or data.get("output") or ""
            if isinstance(tail, str) and tail.strip():
                lines += [f"  │ {line}" for line in tail.rstrip().splitlines()[-8:]]
            return lines
        if kind_of == "usage":
            return [_usage_line(data)]
        if kind_of == "session":
            return [_session_line(data)]
        if kind_of == "completion":
            return [_completion_line(data)]
        if kind_of == "status":
            return [_status_line(data)]
        if kind_of == "error":
            if data.get("category") == "warning":
                return [f"⚠ {_short(data.get('message') or '', 600)}"]
            return [error_line(data)]
        if kind_of == "output":
            return [f"  │ {_short(data.get('text', ''), 2000)}"]
        if kind_of == "unknown" or "raw" in data:
            reason = f"({data['reason']}) " if data.get("reason") else ""
            return [f"  ? {reason}{_short(data.get('raw', ''), 600)}"]
        if "text" in data:
            return [f"  │ {_short(data['text'], 2000)}"]
        fields = _fields(data, limit=6)
        return [f"  {kind_of or '?'}: {fields}" if fields else f"  ? {_short(data.get('raw', data), 600)}"]
    if kind == "command":
        return [f"▶ [{data.get('phase', '')}] {_short(_argv_text(data.get('argv')), 1000)}"]
    if kind == "exit":
        extra = " · TIMED OUT" if data.get("timed_out") else ""
        extra += " · killed" if data.get("killed") else ""
        return [f"■ exit {data.get('returncode')} · {data.get('log', '')} · {data.get('seconds', 0):.1f}s{extra}"]
    if kind == "phase":
        if data.get("status") == "started":
            return [f"── {data.get('phase')} ──"]
        reason = f" ({data['reason']})" if data.get("reason") else ""
        return [f"── {data.get('phase')} {data.get('status')} · {data.get('seconds', 0):.1f}s{reason} ──"]
    if kind == "timeout":
        return [f"! timeout {data.get('name')} after {data.get('seconds')} s"]
    if kind == "tier":
        category = f" ({data['category']})" if data.get("category") else ""
        return [f"◆ {data.get('tier')} {data.get('status')}{category}"]
    if kind == "agent_finished":
        return [f"■ agent finished · exit {data.get('returncode')} · {data.get('seconds', 0):.1f}s"
                + (" · TIMED OUT" if data.get("timed_out") else "")]
    if kind == "interrupted":
        return [f"! interrupted: {data.get('reason')} ({counted(int(data.get('replayed_lines') or 0), 'line')} replayed)"]
    if kind == "error":
        return [error_line(data, "error ")]
    if kind == "budget":
        return [_budget_line(data)]
    if kind == "warning":
        return [f"⚠ {_short(data.get('message') or _fields(data), 600)}"]
    if kind == "redacted":
        files = data.get("files") or 0
        when = " (on resume)" if data.get("when") == "resume" else ""
        return [f"  redacted secrets from {_num(files)} file{'s' if files != 1 else ''}{when}"]
    if kind == "agent_hung":
        return [f"! agent hung: {_short(data.get('message') or '', 400)}"]
    if kind == "agent_stopped":
        status = f" (HTTP {data['status']})" if data.get("status") else ""
        return [f"! agent stopped{status}: {_short(data.get('message') or str(data.get('reason') or ''), 400)}"]
    if kind == "agent_version":
        if data.get("version"):
            return [f"  agent {data.get('agent') or ''} version {_short(data['version'], 200)}"]
        why = data.get("error") or (f"exit {data['returncode']}" if data.get("returncode") is not None else "")
        return [f"⚠ agent {data.get('agent') or ''} version unknown" + (f": {_short(why, 300)}" if why else "")]
    if kind == "agent_prompt":
        where = f", from {data['from']}" if data.get("from") else ""
        text = data.get("text") if isinstance(data.get("text"), str) else ""
        return [f"  prompt ({data.get('source') or 'default'}{where}, {len(text):,} chars): {_short(text, 160)}"]
    if kind == "integrity":
        summary = data.get("summary") or "clean"
        moved = data.get("bytecode_caches_moved")
        extra = f" · {_num(len(moved) if isinstance(moved, list) else moved)} bytecode caches moved" if moved else ""
        return [("  integrity: clean" if summary == "clean" else f"! integrity: {summary}") + extra]
    if kind == "usage":
        return [_usage_line(data)]
    if kind == "job_state":
        reason = f": {_short(data['reason'], 1000)}" if data.get("reason") else ""
        if data.get("state") == "queued" and data.get("attempt_state") == "error":  # an attempt failed, another follows
            failed = state_text("error", data.get("category"))
            return [f"■ attempt {failed}{reason} · retrying (infrastructure, not the agent's failure)"]
        state = state_text(str(data.get("state")), data.get("category"))
        return [f"■ job {state}{reason}"]
    if kind == "checkout":
        return [f"  checkout {str(data.get('commit', ''))[:12]}"]
    if kind == "census":
        return [f"  import census of {str(data.get('commit', ''))[:12]}: {_num(data.get('files'))} files,"
                f" {_num(data.get('modules'))} modules ({data.get('seconds')} s)"]
    if kind == "tier_retry":
        return [f"── re-run of tier {data.get('tier')} on the state attempt {data.get('kept_attempt')} left ──"]
    if kind == "rescore":
        return [f"── {data.get('scoring')} (rules {data.get('rules_version')}): tiers {', '.join(data.get('tiers') or [])}"
                f" judged again on the state attempt {data.get('kept_attempt')} left ──"]
    if kind == "leftover_killed":
        return [f"! killed leftover process group {data.get('pgid')}"]
    if kind == "slurm":  # a command's Slurm job changed state
        return [slurm_line(data)]
    if kind == "omitted":  # the output budget left these lines to the raw log (engine/output.py)
        where = f"{data.get('log', '')}.{data.get('stream', '')}"
        text = omitted_text(int(data.get("lines") or 0), int(data.get("bytes") or 0), f"the raw log {where}")
        return [f"  │ {text}" + ("" if data.get("final") else " (so far)")]
    fields = _fields(data, limit=6)
    return [f"  {kind}: {fields}" if fields else f"  {kind}: {_short(data, 400)}"]


def gpu_use_text(evidence: dict[str, Any]) -> str | None:
    """One line of a C3/C4 result's GPU-use evidence: what the driver showed of the entrypoint."""
    use = evidence.get("gpu_use")
    if not isinstance(use, dict):
        return None
    if use.get("unobservable"):
        return f"GPU use not observable: {_short(use['unobservable'], 200)}"
    parts = []
    for gpu in use.get("per_gpu") or []:
        if gpu.get("pids"):
            peak = f", peak {gpu['peak_mib']:.0f} MiB" if gpu.get("peak_mib") is not None else ""
            parts.append(f"GPU {gpu['gpu']}: pid {', '.join(map(str, gpu['pids'][:4]))}{peak}")
        elif gpu.get("unseen_pids"):
            unseen = ", ".join(map(str, gpu["unseen_pids"][:4]))
            parts.append(f"GPU {gpu['gpu']}: only pids outside this machine's view ({unseen})")
        else:
            parts.append(f"GPU {gpu['gpu']}: no process of the entrypoint")
    return (f"GPU use ({use.get('source')}, {counted(int(use.get('samples') or 0), 'sample')} every {use.get('interval_s')} s): "
            + "; ".join(parts))


def queue_text(data: dict[str, Any]) -> str | None:
    """What the jobs table shows while a command's Slurm job is not running (None once it runs)."""
    state = str(data.get("state") or "")
    if state in ("SUBMITTED", "PENDING", "CONFIGURING", "REQUEUED"):
        reason = data.get("reason")
        return f"slurm PD {reason}" if reason else "slurm PD"
    if state == "SUSPENDED":
        return "slurm S"
    return None


def slurm_line(data: dict[str, Any]) -> str:
    """One Slurm job state change of a command, for the transcript."""
    where = f" on {data['nodes']}" if data.get("nodes") else ""
    reason = f" ({data['reason']})" if data.get("reason") else ""
    gpus = f" · {data['gpus']} GPU(s)" if data.get("gpus") else ""
    return f"⧗ slurm job {data.get('job_id')} [{data.get('log', '')}] {data.get('state')}{reason}{where}{gpus}"
