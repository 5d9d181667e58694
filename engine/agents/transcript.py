"""resenv's normalized transcript events, shared by every agent parser.

An adapter's ``parse(line)`` turns one line of an agent's output into a list of events (almost
always one), each a dict with a ``type``:

=============  ==================================================================================
type           fields (besides ``type``; every field is optional unless said)
=============  ==================================================================================
session        ``session_id``, ``model``, ``tools`` (names), ``version``, ``cwd``: the agent's
               own start-of-session record
message        ``text`` (capped head; ``text_chars`` is the full length), ``message_id``,
               ``model``: assistant text
thinking       ``text``, ``message_id``: reasoning the agent shows
tool_call      ``id``, ``name``, ``command`` (the shell command, when it is one), ``path`` (a
               file tool's target), ``input`` (the tool input as JSON, capped)
tool_result    ``id``, ``name``, ``exit_code`` (int or None when unknown), ``is_error``,
               ``output`` (capped tail; ``output_chars`` is the full length), ``denied``
usage          the token counts of `usage.Usage` (``input``, ``cached_input``, ``cache_write``,
               ``output``, ``reasoning``), ``model``, ``scope``: ``message`` (one API message,
               with ``message_id``; repeated per content block), ``delta`` (to add) or
               ``cumulative`` (running totals that replace earlier ones, by model in ``models``)
completion     ``status`` (``success`` | ``error``), ``subtype``, ``is_error``, ``result``
               (capped), ``num_turns``, ``duration_s``, ``cost_usd`` (as reported),
               ``permission_denials``, and cumulative ``usage``: the agent says it is done
error          ``category`` (``api_retry``, ``api_error``, ``permission_denied``, ``reconnect``,
               ``turn_failed``, ``agent``...), ``message``, ``status`` (HTTP), ``retry``
               (bool: the agent retries by itself), ``fatal`` (bool)
status         ``subtype`` and a few fields: progress records worth a line but nothing more
               (turn started, background task started, todo list updated)
output         ``stream``, ``text``: a line that is not JSON (plain text, a stderr line)
unknown        ``raw`` (the line verbatim, capped at `RAW_CAP` with ``raw_chars``), ``reason``:
               a JSON line of a shape the parser does not know — kept, never fatal
=============  ==================================================================================

Per-message usage rides on the content event of that message (``usage`` dict + ``message_id``),
so one line stays one event; the session's ledger counts each message id once.

Large values are capped so an event stays small in the store (the raw log keeps every byte).
"""

from __future__ import annotations

import json
from typing import Any

from ..sandbox.base import OutputLine

TEXT_CAP = 16_384  # characters of assistant text / thinking kept in an event (head)
OUTPUT_CAP = 4_000  # characters of tool output kept (tail: errors are at the end)
INPUT_CAP = 2_000  # characters of a tool input's JSON kept
RAW_CAP = 16_384  # characters of an unknown line kept verbatim

EVENT_TYPES = frozenset({
    "session", "message", "thinking", "tool_call", "tool_result", "usage", "completion", "error",
    "status", "output", "unknown",
})

# Keys the lifecycle adds to every transcript event; an agent's own keys never overwrite them.
RESERVED_KEYS = frozenset({"log", "stream", "line_no", "replayed"})


def head(text: Any, cap: int = TEXT_CAP) -> dict[str, Any]:
    """{"text": first `cap` chars} plus ``text_chars`` when it was cut."""
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    if len(text) <= cap:
        return {"text": text}
    return {"text": text[:cap], "text_chars": len(text)}


def tail(text: Any, cap: int = OUTPUT_CAP, key: str = "output") -> dict[str, Any]:
    """{key: last `cap` chars} plus ``<key>_chars`` when it was cut."""
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    if len(text) <= cap:
        return {key: text}
    return {key: text[-cap:], f"{key}_chars": len(text)}


def compact_json(value: Any, cap: int = INPUT_CAP) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= cap else text[: cap - 1] + "…"


def unknown(text: str, reason: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "unknown", "raw": text[:RAW_CAP]}
    if len(text) > RAW_CAP:
        event["raw_chars"] = len(text)
    if reason:
        event["reason"] = reason
    return event


def output(stream: str, text: str) -> dict[str, Any]:
    return {"type": "output", "stream": stream, **head(text)}


def load_line(text: str) -> tuple[Any, str | None]:
    """(decoded JSON, None) or (None, why not)."""
    stripped = text.strip()
    if not stripped:
        return None, "empty"
    if stripped[0] not in "{[":
        return None, "not json"
    try:
        return json.loads(stripped), None
    except ValueError as error:
        return None, f"invalid json: {error}"


def stdout_object(line: OutputLine) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A stream-json CLI's line as (its JSON object, []), or (None, the events that stand for it).

    stderr, blank and non-JSON lines are plain output; cut or malformed JSON and non-objects are
    ``unknown`` events, so nothing an agent printed is lost.
    """
    if line.stream != "stdout":
        return None, [output(line.stream, line.text)]
    data, why = load_line(line.text)
    if data is None:
        if why == "empty":
            return None, [output("stdout", line.text)]
        if line.truncated:
            return None, [unknown(line.text, f"line cut at {len(line.text)} of {line.nbytes} bytes")]
        return None, [output("stdout", line.text)] if why == "not json" else [unknown(line.text, why)]
    if not isinstance(data, dict):
        return None, [unknown(line.text, "not an object")]
    return data, []


def safe_keys(event: dict[str, Any]) -> dict[str, Any]:
    """Rename an agent's keys that would overwrite the lifecycle's (`RESERVED_KEYS`)."""
    if not RESERVED_KEYS.intersection(event):
        return event
    return {(f"agent_{key}" if key in RESERVED_KEYS else key): value for key, value in event.items()}


def cap_fields(event: dict[str, Any]) -> dict[str, Any]:
    """An agent's own event with long strings cut: ``output`` keeps its tail, any other string its
    head (`TEXT_CAP` chars), each with ``<key>_chars`` giving the full length; nested values that
    are large are replaced by their capped JSON."""
    out: dict[str, Any] = {}
    for key, value in event.items():
        if isinstance(value, str) and len(value) > TEXT_CAP:
            out.update(tail(value, OUTPUT_CAP, key) if key == "output" else
                       {key: value[:TEXT_CAP], f"{key}_chars": len(value)})
        elif isinstance(value, (dict, list)):
            text = compact_json(value, TEXT_CAP + 1)
            out[key] = value if len(text) <= TEXT_CAP else text[:TEXT_CAP]
        else:
            out[key] = value
    return out


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
