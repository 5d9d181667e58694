"""The agent's self-report (``report.json``): its schema and a loader that is safe on hostile input.

The agent writes ``report.json`` in its work dir when it stops; the C5 audit (``resenv.probes.audit``)
checks its claims against what the probes observed. The file is written by the agent, so it is read as
untrusted input:

* it must resolve, through every path component, inside ``sandbox_root`` - a ``report.json`` that is a
  symlink to ``/etc/passwd`` (or sits under a directory symlinked outside) is *invalid* and is never
  opened;
* only a regular file is opened: a fifo, directory, socket or device is *invalid* and is never opened
  (opening a fifo would block); the open itself uses ``O_NOFOLLOW | O_NONBLOCK`` relative to directory
  fds that were each opened with ``O_NOFOLLOW``, and the opened fd is ``fstat``-ed again, so a component
  swapped for a symlink or fifo between the checks and the open is caught (no TOCTOU window);
* the size is checked with ``lstat``/``fstat`` before reading, and at most ``max_bytes + 1`` bytes are
  ever read (a file growing after the ``fstat`` is still caught);
* the bytes must be UTF-8 (a leading BOM is tolerated), the text one JSON document (no ``NaN`` /
  ``Infinity``, no duplicate keys, which would let one report carry two claims) whose top level is an
  object that satisfies :data:`REPORT_SCHEMA`. All schema violations are listed, sorted by JSON path.

Claims: EVERY key may be absent or ``null``, at every level (``python_path``, ``notes``,
``framework.name`` included): that is *no claim* (honest uncertainty), never an invalid report, and the
audit never counts it. A report without ``python_path`` is valid; it just names no interpreter, so the
probe tiers fail as ``no_interpreter`` (engine/tiers.py) while C5 still audits the other claims.
Unknown top-level keys are allowed (agents may add notes), but the known keys are typed: a value of
the wrong type (``"gpu_count": "two"``) makes the report invalid.

Two formats are read, and may be mixed:

* resenv's own: ``python_path``, ``python_version``, ``framework: {name, version}``,
  ``cuda_available``, ``gpu_count``, ``ddp_expected_ok``, ``packages``, ``notes``;
* ResearchEnvBench's nine keys: ``python_path``, ``python_version``, ``torch_version``,
  ``cuda_available``, ``gpu_count``, ``ddp_expected_ok``, ``env_tool``, ``env_name``, ``notes``.

Mapping: the shared keys mean the same in both. ``torch_version: X`` is the claim
``framework: {name: torch, version: X}`` (claim path ``torch_version``); when a report gives both
``framework`` and ``torch_version``, both are claims and both are audited. ``env_tool``,
``env_name``, ``notes``, any unknown key (and unknown keys inside ``framework``) are kept as written
and listed by the audit as ``not_scored``: never a claim, never dropped, and of any type (a key that
is not scored cannot make the report invalid).

Error strings each start with the JSON path they are about (``$`` for the document as a whole), e.g.
``gpu_count: expected integer or null, got "two"``.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DEFAULT_MAX_BYTES = 1 << 20

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://resenv.dev/schemas/report.json",
    "title": "resenv agent self-report",
    "description": (
        "Written by the agent as report.json in its work dir. Every key is optional, and an absent "
        "key or null is no claim. Unknown top-level keys are allowed."
    ),
    "type": "object",
    "additionalProperties": True,
    "properties": {
        "python_path": {
            "description": "Absolute path of the interpreter the environment uses (without it, no tier "
                           "can run the environment).",
            "type": ["string", "null"],
            "pattern": "^/[^\\x00]*$",
        },
        "python_version": {
            "description": "Python version of that interpreter, e.g. 3.11.7 (a prefix such as 3.11 claims less).",
            "type": ["string", "null"],
        },
        "framework": {
            "description": "The deep-learning framework the repo runs on.",
            "type": ["object", "null"],
            "additionalProperties": True,
            "properties": {
                "name": {
                    "description": "torch, jax, tensorflow, or another framework's import name.",
                    "type": ["string", "null"],
                    "minLength": 1,
                    "examples": ["torch", "jax", "tensorflow"],
                },
                "version": {
                    "description": "Installed version, e.g. 2.3.1 or 2.3.1+cu121 (+label: the build).",
                    "type": ["string", "null"],
                },
            },
        },
        "torch_version": {
            "description": "ResearchEnvBench's format: the installed torch version; audited as a framework "
                           "claim {name: torch, version: ...} (beside framework, when both are given).",
            "type": ["string", "null"],
        },
        "cuda_available": {
            "description": "Whether the framework sees a CUDA device in this environment.",
            "type": ["boolean", "null"],
        },
        "gpu_count": {
            "description": "Number of GPUs the framework sees.",
            "type": ["integer", "null"],
            "minimum": 0,
        },
        "ddp_expected_ok": {
            "description": "Whether the multi-GPU (DDP / NCCL) entrypoint is expected to run.",
            "type": ["boolean", "null"],
        },
        "packages": {
            "description": "Installed distributions, name -> version.",
            "type": ["object", "null"],
            "additionalProperties": {"type": ["string", "null"]},
        },
        "notes": {
            "description": "Free text for humans.",
            "type": ["string", "null"],
        },
        "env_tool": {
            "description": "ResearchEnvBench's format: the tool that built the environment (conda, venv, uv); "
                           "kept and shown, not scored.",
        },
        "env_name": {
            "description": "ResearchEnvBench's format: the environment's name; kept and shown, not scored.",
        },
    },
}
"""JSON Schema (draft 2020-12) of ``report.json``."""



@functools.cache
def _validator() -> Any:
    """The schema's validator, built on first use: jsonschema and what it loads add a tenth of a
    second to every process start, and most `resenv` commands never validate a report."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(REPORT_SCHEMA)

_PATTERN_HINTS = {"^/[^\\x00]*$": "an absolute path"}


@dataclass(frozen=True)
class ReportLoad:
    """Outcome of :func:`load_report`.

    ``status`` is ``"ok"`` (``report`` is the validated dict), ``"missing"`` (no file) or ``"invalid"``
    (``errors`` says why; ``report`` is None). ``category`` is the failure category for the classifier:
    None when ok, else ``"missing_report"`` / ``"invalid_report"``.
    """

    status: Literal["ok", "missing", "invalid"]
    report: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    category: Literal["missing_report", "invalid_report"] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _missing(message: str) -> ReportLoad:
    return ReportLoad(status="missing", report=None, errors=[message], category="missing_report")


def _invalid(errors: list[str]) -> ReportLoad:
    return ReportLoad(status="invalid", report=None, errors=errors, category="invalid_report")


# ------------------------------------------------------------------------------------------------
# formatting helpers


def json_path(parts: Any) -> str:
    """``("framework", "version")`` -> ``framework.version``; ``()`` -> ``$``; odd keys are quoted."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and part.replace("_", "a").isalnum() and part.isascii() and not part[0].isdigit():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out or "$"


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # pragma: no cover - values come from json.loads
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TYPE_WORDS = {"object": "object", "array": "array", "string": "string", "integer": "integer",
               "number": "number", "boolean": "boolean", "null": "null"}


def _format_error(err: Any) -> list[tuple[tuple, str]]:
    """One jsonschema ValidationError -> [(sort key path, message)]."""
    path = tuple(err.absolute_path)
    where = json_path(path)
    v = err.validator
    if v == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        want = " or ".join(_TYPE_WORDS.get(str(t), str(t)) for t in types)
        return [(path, f"{where}: expected {want}, got {_show(err.instance)}")]
    if v == "required":
        inst = err.instance if isinstance(err.instance, dict) else {}
        return [(path + (p,), f"{json_path(path + (p,))}: required property is missing")
                for p in err.validator_value if p not in inst]
    if v == "pattern":
        hint = _PATTERN_HINTS.get(err.validator_value, f"a string matching {err.validator_value!r}")
        return [(path, f"{where}: expected {hint}, got {_show(err.instance)}")]
    if v == "minimum":
        return [(path, f"{where}: expected a value >= {err.validator_value}, got {_show(err.instance)}")]
    if v == "minLength":
        return [(path, f"{where}: expected a non-empty string, got {_show(err.instance)}")]
    return [(path, f"{where}: {err.message}")]


def _path_key(path: tuple) -> tuple:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path)


def validate_report(doc: Any) -> list[str]:
    """Every schema violation of a parsed report, sorted by JSON path; empty when valid."""
    if not isinstance(doc, dict):
        return [f"$: expected a JSON object at top level, got {_json_kind(doc)}"]
    found: set[tuple[tuple, str]] = set()
    for err in _validator().iter_errors(doc):
        found.update(_format_error(err))
    return [msg for _, msg in sorted(found, key=lambda pm: (_path_key(pm[0]), pm[1]))]


def _json_kind(doc: Any) -> str:
    if doc is None:
        return "null"
    if isinstance(doc, bool):
        return "boolean"
    if isinstance(doc, (int, float)):
        return "number"
    if isinstance(doc, str):
        return "string"
    if isinstance(doc, list):
        return "array"
    return type(doc).__name__  # pragma: no cover


# ------------------------------------------------------------------------------------------------
# parsing


class _Obj(dict):
    """A parsed JSON object that remembers keys given more than once."""

    dups: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj()
    dups: list[str] = []
    for k, v in pairs:
        if k in obj and k not in dups:
            dups.append(k)
        obj[k] = v
    obj.dups = dups
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _plain(doc: Any) -> tuple[Any, list[str]]:
    """Turn _Obj trees into plain dicts (iteratively: depth is bounded only by the parser) and list
    duplicate keys by JSON path."""
    errors: list[str] = []

    def conv(node: Any) -> Any:
        return dict(node) if isinstance(node, dict) else list(node) if isinstance(node, list) else node

    root = conv(doc)
    stack: list[tuple[Any, Any, tuple]] = [(doc, root, ())]
    while stack:
        src, dst, path = stack.pop()
        if isinstance(src, _Obj):
            for k in src.dups:
                errors.append(f"{json_path(path + (k,))}: key given more than once")
        items = src.items() if isinstance(src, dict) else enumerate(src) if isinstance(src, list) else ()
        for k, v in items:
            if isinstance(v, (dict, list)):
                new = conv(v)
                dst[k] = new
                stack.append((v, new, path + (k,)))
    return root, sorted(errors)


def parse_report_bytes(data: bytes) -> ReportLoad:
    """Decode, parse and validate the bytes of a report (no size or file checks)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        return _invalid([f"$: not valid UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} (line {line})"])
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        doc = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        return _invalid([f"$: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"])
    except RecursionError:
        return _invalid(["$: invalid JSON: nested too deeply"])
    except ValueError as e:  # NaN / Infinity, integers with too many digits
        return _invalid([f"$: invalid JSON: {e}"])
    if not isinstance(doc, dict):
        return _invalid([f"$: expected a JSON object at top level, got {_json_kind(doc)}"])
    doc, dup_errors = _plain(doc)
    errors = dup_errors + validate_report(doc)
    if errors:
        return _invalid(errors)
    return ReportLoad(status="ok", report=doc, errors=[], category=None)


# ------------------------------------------------------------------------------------------------
# safe file access

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def load_report(path: Path, *, sandbox_root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ReportLoad:
    """Read and validate the report at ``path``, which must resolve inside ``sandbox_root``.

    A relative ``path`` is taken relative to ``sandbox_root``. A dangling symlink is *invalid*, not
    *missing* (something was written there).

    Never raises for anything about the file itself; never opens a non-regular file or anything outside
    the sandbox; never reads more than ``max_bytes + 1`` bytes.
    """
    root = os.path.realpath(sandbox_root)
    if not os.path.isdir(root):
        return _missing(f"$: sandbox root {sandbox_root} does not exist")
    path = Path(path) if Path(path).is_absolute() else Path(sandbox_root) / path
    # Resolve without opening anything (realpath only lstat()s and readlink()s), then check containment.
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        return _invalid([f"$: {path} resolves to {real}, outside the sandbox {root}; not read"])
    rel = os.path.relpath(real, root)
    parts = [] if rel == "." else rel.split(os.sep)
    if not parts:
        return _invalid([f"$: {path} is the sandbox root itself, a directory"])

    # Walk down from the root with O_NOFOLLOW on every component: a symlink planted after realpath()
    # makes an open fail (ELOOP / ENOTDIR) instead of leading outside.
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(root, _O_DIR))
            for name in parts[:-1]:
                fds.append(os.open(name, _O_DIR, dir_fd=fds[-1]))
        except FileNotFoundError:
            return _missing_or_dangling(path)
        except OSError as e:
            return _invalid([f"$: cannot open directory on the way to {path}: {_oserror(e)}"])
        name, dfd = parts[-1], fds[-1]
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return _missing_or_dangling(path)
        except OSError as e:
            return _invalid([f"$: cannot stat {path}: {_oserror(e)}"])
        if not stat.S_ISREG(st.st_mode):
            return _invalid([f"$: {path} is {_kind(st.st_mode)}, not a regular file; not read"])
        if st.st_size > max_bytes:
            return _invalid([f"$: {path} is {st.st_size} bytes, over the {max_bytes}-byte limit; not read"])
        try:
            fd = os.open(name, _O_FILE, dir_fd=dfd)
        except FileNotFoundError:
            return _missing_or_dangling(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                return _invalid([f"$: {path} was replaced by a symlink while being checked; not read"])
            return _invalid([f"$: cannot open {path}: {_oserror(e)}"])
        fds.append(fd)
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            return _invalid([f"$: {path} changed while being checked (now {_kind(fst.st_mode)}); not read"])
        if fst.st_size > max_bytes:
            return _invalid([f"$: {path} is {fst.st_size} bytes, over the {max_bytes}-byte limit; not read"])
        chunks: list[bytes] = []
        got = 0
        try:
            while got <= max_bytes:
                chunk = os.read(fd, max_bytes + 1 - got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as e:
            return _invalid([f"$: cannot read {path}: {_oserror(e)}"])
        if got > max_bytes:
            return _invalid([f"$: {path} grew past the {max_bytes}-byte limit while being read"])
    finally:
        for fd in reversed(fds):
            os.close(fd)
    return parse_report_bytes(b"".join(chunks))


def _missing_or_dangling(path: Path) -> ReportLoad:
    if os.path.islink(path):
        return _invalid([f"$: {path} is a dangling symlink"])
    return _missing(f"$: {path} does not exist")


def _oserror(e: OSError) -> str:
    return e.strerror or str(e)
