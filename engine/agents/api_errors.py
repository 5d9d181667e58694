"""Model-API failures: how an agent CLI says its hosted model failed, in one vocabulary.

A model API that refuses the key, has no quota left, answers 5xx or cannot be reached is an
infrastructure failure, not the agent's: the attempt ends as ``error`` with category ``model_api``,
is retried like any infrastructure failure and never enters a denominator. The CLIs report these
failures in their own shapes (recorded in ``tests/fixtures/streams``):

* Claude Code: ``system/api_retry`` lines (``error_status``, ``error``: ``authentication_failed``,
  ``server_error``, ``rate_limit``, ``unknown``...), then a ``<synthetic>`` assistant message with
  ``is_api_error_message`` (``api_error_status``, ``error``, ``api_error``: ``connection_failed``),
  then ``result`` with ``terminal_reason: api_error``.
* Codex: top-level ``error`` lines whose text is all there is — ``Reconnecting... n/m (<why>)``
  while it retries, then the final ``<why>`` and ``turn.failed``. The why is ``unexpected status 401
  Unauthorized: ...``, ``Quota exceeded...``, ``We're currently experiencing high demand...`` (its
  words for a 5xx), ``stream disconnected before completion...`` or a connection error.

Every such event carries ``api_kind`` (one of `KINDS`), ``status`` (the HTTP status when known),
``retry`` (the CLI retries by itself) and ``fatal`` (the CLI gave up), and a category: ``model_api``
for the kinds the hosted side causes (`INFRA_KINDS`: a refused key, no quota, rate limits, 5xx, no
connection), ``model_request`` for a request the API rejected as malformed or too long (a 400: the
agent's own doing, e.g. a prompt that outgrew the context; never a free retry).
"""

from __future__ import annotations

import re
from typing import Any

KINDS = ("auth", "quota", "rate_limit", "server", "connection", "bad_request", "other")
INFRA_KINDS = frozenset({"auth", "quota", "rate_limit", "server", "connection"})
HOPELESS_STATUSES = frozenset({401, 403})
"""Statuses no retry can cure: the session stops the agent at the first one instead of waiting out
the CLI's own retries (Claude Code retries a 401 for minutes)."""

_STATUS = re.compile(r"\b(?:unexpected )?status(?: code)?:? (\d{3})\b", re.IGNORECASE)
_CODEX_PATTERNS: tuple[tuple[re.Pattern[str], str, int | None], ...] = (
    (re.compile(r"quota exceeded|insufficient_quota|usage limit|billing|credit balance", re.IGNORECASE), "quota", 429),
    (re.compile(r"rate limit|too many requests", re.IGNORECASE), "rate_limit", 429),
    (re.compile(r"high demand|internal server error|service unavailable|bad gateway|overloaded", re.IGNORECASE),
     "server", None),
    (re.compile(r"stream disconnected|error sending request|connection (?:refused|reset|closed)|"
                r"timed out|dns error|failed to connect|network", re.IGNORECASE), "connection", None),
    (re.compile(r"unauthorized|invalid api key|authentication|forbidden", re.IGNORECASE), "auth", None),
)
_CLAUDE_ERRORS = {
    "authentication_failed": "auth", "permission_error": "auth", "billing_error": "quota",
    "rate_limit": "rate_limit", "server_error": "server", "overloaded": "server", "api_error": "server",
    "invalid_request": "bad_request", "connection_failed": "connection", "unknown": "connection",
}


def kind_of_status(status: int | None) -> str | None:
    """The failure kind an HTTP status means, or None for a status that says nothing."""
    if status in HOPELESS_STATUSES:
        return "auth"
    if status == 402:
        return "quota"
    if status == 429:
        return "rate_limit"
    if status is not None and (status >= 500 or status == 408):
        return "server"
    if status is not None and 400 <= status < 500:
        return "bad_request"
    return None


def claude_kind(status: int | None, *names: Any, message: str = "") -> str:
    """Claude Code's error names (``error``, ``api_error``) and status as one kind (a 400 whose text
    says the credit balance is spent is quota)."""
    if status == 400 and re.search(r"credit balance|billing", message, re.IGNORECASE):
        return "quota"
    for name in names:
        if isinstance(name, str) and name in _CLAUDE_ERRORS:
            by_name = _CLAUDE_ERRORS[name]
            if by_name != "connection" or status is None:
                return kind_of_status(status) or by_name
    return kind_of_status(status) or "other"


def codex_failure(message: str) -> tuple[str, int | None] | None:
    """(kind, status) when a Codex error text is a model-API failure, else None."""
    match = _STATUS.search(message)
    status = int(match.group(1)) if match else None
    if status == 400 and re.search(r"credit balance|billing|quota", message, re.IGNORECASE):
        return "quota", status
    if status is not None:
        return kind_of_status(status) or "other", status
    for pattern, kind, implied in _CODEX_PATTERNS:
        if pattern.search(message):
            return kind, implied
    return None


def category_of(kind: str) -> str:
    """``model_api`` for what the hosted side causes, ``model_request`` for the agent's own request."""
    return "model_api" if kind in INFRA_KINDS else "model_request"


def api_error(kind: str, status: int | None, message: str, *, retry: bool, fatal: bool, **extra: Any) -> dict[str, Any]:
    """A normalized ``error`` event for a model-API failure (see the module doc for its category)."""
    return {"type": "error", "category": category_of(kind), "api_kind": kind, "status": status, "retry": retry,
            "fatal": fatal, "message": message[:2000], **extra}


def completion_failure(kind: str, status: int | None, message: str) -> dict[str, Any]:
    """The ``api_error`` a completion carries when the agent ended on a model-API failure."""
    return {"api_kind": kind, "status": status, "message": message[:2000], "category": category_of(kind)}


def hopeless(event: dict[str, Any]) -> bool:
    """A model-API error that no retry can cure (the key is refused)."""
    return event.get("category") == "model_api" and event.get("api_kind") == "auth" and (
        event.get("status") in HOPELESS_STATUSES or bool(event.get("fatal")))


def describe(event: dict[str, Any]) -> str:
    """One line for an attempt's reason: ``model API: 401 auth: <message>``."""
    status = event.get("status")
    kind = event.get("api_kind") or "error"
    message = " ".join(str(event.get("message") or "").split())[:300]
    return f"model API {kind}" + (f" (HTTP {status})" if status else "") + (f": {message}" if message else "")


__all__ = ["HOPELESS_STATUSES", "INFRA_KINDS", "KINDS", "api_error", "category_of", "claude_kind", "codex_failure",
           "completion_failure", "describe", "hopeless", "kind_of_status"]
