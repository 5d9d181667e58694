"""Reading a spec: from a file, from text or from a run's snapshot, with every problem reported as
``file:line: field.path: message``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .yamlsource import Positions, SpecError, SpecIssue, format_path, load_yaml, load_yaml_file
from .benchmark import Benchmark


# --------------------------------------------------------------------------- loading


def load_benchmark(path: Path) -> Benchmark:
    """Read and validate a benchmark.yaml; raise `SpecError` listing every problem."""
    path = Path(path)
    data, positions = load_yaml_file(path)
    context = {"base_dir": path.absolute().parent, "source_path": path.absolute()}
    return _validate(data, positions, str(path), context)


def loads_benchmark(text: str, base_dir: Path, file: str = "<string>") -> Benchmark:
    """`load_benchmark` for YAML text; relative source paths are resolved from `base_dir`."""
    data, positions = load_yaml(text, file)
    return _validate(data, positions, file, {"base_dir": Path(base_dir).absolute()})


def benchmark_from_snapshot(data: Mapping[str, Any], base_dir: Path) -> Benchmark:
    """Rebuild the spec a run was created with (`Benchmark.snapshot()`).

    Local source folders are not required to exist any more: the run keeps its own pristine
    copies, and a resumed run must not fail because the catalog moved on.
    """
    context = {"base_dir": Path(base_dir).absolute(), "check_paths": False}
    return _validate(dict(data), None, "<snapshot>", context)


def _validate(data: Any, positions: Positions | None, file: str,
              context: dict[str, Any]) -> Benchmark:
    if data is None:
        raise SpecError([SpecIssue(file, None, "", "the file is empty; expected a mapping "
                                   "with at least `version` and `suites`")])
    try:
        return Benchmark.model_validate(data, context=context)
    except ValidationError as exc:
        raise SpecError(issues_from_validation(exc, data, positions, file)) from None


def issues_from_validation(
    exc: ValidationError, data: Any, positions: Positions | None, file: str
) -> list[SpecIssue]:
    """Map pydantic's errors onto the data: a real field path, its line, a plain message."""
    located = []
    for error in exc.errors():
        path = _data_path(error["loc"], data, error["type"])
        located.append((path, error))
    issues = []
    for path, error in located:
        if error["type"] == "too_short" and any(
            other[: len(path)] == path and other != path for other, _ in located
        ):
            continue  # "0 items" after its items failed: the item errors say it better
        line = positions.line(path) if positions is not None else None
        issues.append(SpecIssue(file, line, format_path(path), _message(error, data, path)))
    return issues


def _data_path(loc: Sequence[Any], data: Any, error_type: str) -> tuple[Any, ...]:
    """Keep the loc entries that are real keys/indexes of `data`; drop pydantic's bookkeeping
    (union tags, "[key]", validator names). A missing field keeps its name at the end."""
    path: list[Any] = []
    node = data
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            path.append(part)
        elif position == len(loc) - 1 and error_type == "missing":
            path.append(part)
    if error_type == "unknown_kind" and isinstance(node, dict) and "kind" in node:
        path.append("kind")
    return tuple(path)


_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: Mapping[str, Any], data: Any, path: tuple[Any, ...]) -> str:
    """Pydantic's message, reworded for a YAML author and with the offending value."""
    kind, message, value = error["type"], error["msg"], error.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, got {_show(value)}"
    if kind == "literal_error":
        return f"{message.replace('Input should be', 'expected', 1)}, got {_show(value)}"
    if kind == "unknown_kind":
        given = value.get("kind") if isinstance(value, dict) else None
        return f"unknown kind {_show(given)}; {message}" if given else f"missing `kind`; {message}"
    if kind in ("value_error", "assertion_error"):
        return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    short = re.match(r"^\w+ should have at least (\d+) items? after validation, not (\d+)$",
                     message)
    if kind == "too_short" and short:
        return f"expected at least {short[1]} item(s), got {short[2]}"
    return message
