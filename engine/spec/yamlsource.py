"""Load YAML together with where every value came from, so errors can name a line.

`yaml.safe_load` throws the positions away, so a schema error could only say *what* is wrong.
Here the document is composed into PyYAML's node tree (SafeLoader rules) and walked once to build
both the plain Python data and a `Positions` map from data paths, such as
``("suites", "starter", "repos", 2, "entrypoints", "cpu", "timeout")``, to 1-based line numbers.

The walk is also stricter than `safe_load`: a duplicate mapping key is an error (PyYAML silently
keeps the last one), and so are non-scalar keys and recursive aliases. Merge keys (``<<: *base``)
are honoured; keys written next to the merge override the merged ones.

A hostile file is bounded, each with one issue at the line and field where the bound is crossed:
nesting deeper than `MAX_DEPTH` levels (in the text, or once aliases are expanded; PyYAML's
composer is recursive and would die of a RecursionError), and more than `MAX_VALUES` values or
`MAX_TEXT` characters of scalar text once aliases are expanded (a "billion laughs": ten anchors
that each repeat the previous one ten times are 10^10 values from a few hundred bytes).

This module also defines the error types shared by every layer that reports problems in a
source file: `SpecIssue` (one problem, with file, line and data path) and `SpecError` (all of them).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Key = Hashable
DataPath = tuple[Key, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

MAX_DEPTH = 64
"""Levels of nesting a document may have (the shipped catalog has 8)."""
MAX_VALUES = 200_000
"""Values a document may build, aliases expanded (the shipped catalog has under 1,000)."""
MAX_TEXT = 64 << 20
"""Characters of scalar text a document may build, aliases expanded."""


# --------------------------------------------------------------------------- issues and errors


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a source file, located by line (when known) and data path."""

    file: str
    line: int | None
    path: str
    message: str
    column: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


def _file_order(issue: SpecIssue) -> tuple[Any, ...]:
    """File order; issues without a line (whole-file problems) come first."""
    return (issue.file, issue.line or 0, issue.column or 0, issue.path, issue.message)


def format_issues(issues: Iterable[SpecIssue]) -> str:
    """One issue per line, in file order."""
    return "\n".join(str(issue) for issue in sorted(issues, key=_file_order))


class SpecError(Exception):
    """A source file is invalid; `issues` lists every problem found (in file order)."""

    def __init__(self, issues: Sequence[SpecIssue]):
        self.issues: list[SpecIssue] = sorted(set(issues), key=_file_order)
        super().__init__(format_issues(self.issues))

    def __str__(self) -> str:
        return format_issues(self.issues)


def format_path(path: Sequence[Key]) -> str:
    """``("suites", "s", "repos", 2, "id")`` -> ``suites.s.repos[2].id``; odd keys are quoted."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


# --------------------------------------------------------------------------- positions


@dataclass
class Positions:
    """Line numbers (1-based) of the nodes of one document, keyed by data path.

    `values` holds where each value node starts; `keys` holds where the key of each mapping
    entry is written (the line a reader calls "the line of that field").
    """

    values: dict[DataPath, int] = field(default_factory=dict)
    keys: dict[DataPath, int] = field(default_factory=dict)

    def line(self, path: Sequence[Key]) -> int | None:
        """The line of `path`, or of its nearest existing ancestor (e.g. for a missing field).

        Mapping entries are located by their key, sequence items by their first line.
        """
        path = tuple(path)
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            line = self.keys.get(prefix) or self.values.get(prefix)
            if line is not None:
                return line
        return None


# --------------------------------------------------------------------------- loading


def load_yaml(text: str, file: str = "<string>") -> tuple[Any, Positions]:
    """Parse one YAML document into plain data plus its `Positions`.

    Raises `SpecError` for syntax errors (with line and column), duplicate keys and other
    structural problems; all structural problems of the document are reported together.
    """
    try:
        root = yaml.compose(text, Loader=_BoundedLoader)
    except yaml.MarkedYAMLError as exc:
        raise SpecError([_syntax_issue(exc, file)]) from None
    except yaml.YAMLError as exc:  # errors without a mark (rare: e.g. bad stream encoding)
        raise SpecError([SpecIssue(file, None, "", f"YAML error: {exc}")]) from None
    except _TooDeep as exc:
        raise SpecError([SpecIssue(file, exc.mark.line + 1, _shown_path(exc.path), _too_deep(),
                                   column=exc.mark.column + 1)]) from None
    walker = _Walker(file)
    try:
        data = walker.build(root, ()) if root is not None else None
    except _OverLimit as exc:
        raise SpecError([exc.issue]) from None
    if walker.issues:
        raise SpecError(walker.issues)
    return data, walker.positions


def load_yaml_file(path: Path, file: str | None = None) -> tuple[Any, Positions]:
    """`load_yaml` on a file; `file` is the name used in issues (default: `path` as given)."""
    name = str(path) if file is None else file
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([SpecIssue(name, None, "", f"not UTF-8 text (byte {exc.start})")]) from None
    except OSError as exc:
        raise SpecError([SpecIssue(name, None, "", _unreadable(exc))]) from None
    return load_yaml(text, name)


def _unreadable(error: OSError) -> str:
    """Why a file cannot be read, in words (`no such file`), without Python's `[Errno 2] …` repr."""
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, IsADirectoryError):
        return "is a directory, not a file"
    return f"cannot read: {(error.strerror or str(error)).lower()}"


def _syntax_issue(exc: yaml.MarkedYAMLError, file: str) -> SpecIssue:
    """Turn PyYAML's marked error into an issue at the problem's line and column."""
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or "invalid YAML"
    if exc.context:
        problem = f"{problem} ({exc.context}"
        if exc.context_mark is not None and exc.context_mark is not mark:
            problem += f" at line {exc.context_mark.line + 1}"
        problem += ")"
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return SpecIssue(file, line, "", f"YAML syntax error: {problem}", column=column)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _too_deep(aliases: bool = False) -> str:
    how = " once its aliases are expanded" if aliases else ""
    return f"nested deeper than {MAX_DEPTH} levels{how}; a benchmark needs far fewer"


def _shown_path(path: Sequence[Key], most: int = 12) -> str:
    """The data path, its first `most` parts only when it is deeper (so the issue stays one line)."""
    if len(path) <= most:
        return format_path(path)
    return f"{format_path(path[:most])}…({len(path)} levels)"


class _TooDeep(Exception):
    """The composer reached `MAX_DEPTH`: where (the mark of the node it was about to build) and the
    data path to it."""

    def __init__(self, mark: yaml.Mark, path: DataPath) -> None:
        super().__init__("too deep")
        self.mark = mark
        self.path = path


class _OverLimit(Exception):
    """The walk crossed a bound: `issue` says where; nothing more is built."""

    def __init__(self, issue: SpecIssue) -> None:
        super().__init__(str(issue))
        self.issue = issue


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose (recursive) composer stops at `MAX_DEPTH`, before Python's recursion limit."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._where: list[Key] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        # a mapping's value comes with its key node, a sequence item with its position; a key or the
        # document's root with None
        step = index.value if isinstance(index, yaml.ScalarNode) else index
        if index is not None:
            self._where.append(step)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH + 1:  # the root is depth 1 and path ()
                raise _TooDeep(self.peek_event().start_mark, tuple(self._where))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if index is not None:
                self._where.pop()


class _Walker:
    """One pass over a composed node tree: builds data, records positions, collects issues."""

    def __init__(self, file: str):
        self.file = file
        self.positions = Positions()
        self.issues: list[SpecIssue] = []
        self._scalars = yaml.SafeLoader("")  # only used to construct scalar values by tag
        self._active: set[int] = set()  # ids of collection nodes being built (catches recursion)
        self._values = 0  # values built so far, aliases expanded
        self._text = 0  # characters of scalar text built so far, aliases expanded

    def issue(self, node: yaml.Node, path: DataPath, message: str) -> None:
        self.issues.append(SpecIssue(self.file, _line(node), format_path(path), message))

    def over(self, node: yaml.Node, path: DataPath, message: str) -> _OverLimit:
        return _OverLimit(SpecIssue(self.file, _line(node), _shown_path(path), message))

    def build(self, node: yaml.Node, path: DataPath) -> Any:
        if len(path) > MAX_DEPTH:  # only aliases can get here: the composer bounds the text
            raise self.over(node, path, _too_deep(aliases=True))
        self._values += 1
        if isinstance(node, yaml.ScalarNode):
            self._text += len(node.value)
        if self._values > MAX_VALUES or self._text > MAX_TEXT:
            what = f"{MAX_VALUES} values" if self._values > MAX_VALUES else f"{MAX_TEXT >> 20} MiB of text"
            raise self.over(node, path, f"the document expands to more than {what} once its aliases are "
                                        "expanded (anchors repeating each other multiply: a YAML bomb?)")
        self.positions.values.setdefault(path, _line(node))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if id(node) in self._active:
            self.issue(node, path, "recursive alias: a value may not contain itself")
            return None
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            return self.mapping(node, path)
        finally:
            self._active.discard(id(node))

    def scalar(self, node: yaml.ScalarNode, path: DataPath) -> Any:
        try:
            return self._scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            self.issue(node, path, f"cannot read value: {problem}")
            return None

    def mapping(self, node: yaml.MappingNode, path: DataPath) -> dict[Any, Any]:
        """Build a mapping: explicit entries first, then merged ones that are not overridden."""
        result: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            key = self.key(key_node, path)
            if key is None:
                continue
            if key in first_line:
                self.issue(key_node, (*path, key),
                           f"duplicate key {key!r} (first defined on line {first_line[key]})")
                continue
            first_line[key] = _line(key_node)
            self.positions.keys.setdefault((*path, key), _line(key_node))
            result[key] = self.build(value_node, (*path, key))
        for source in self.merge_sources(merges, path):
            merged = self.build(source, path)  # positions: explicit entries were recorded first
            for key, value in (merged or {}).items():
                result.setdefault(key, value)
        return result

    def key(self, node: yaml.Node, path: DataPath) -> Any:
        """A mapping key: must be a scalar whose value is hashable; None after an issue."""
        if not isinstance(node, yaml.ScalarNode):
            self.issue(node, path, "mapping keys must be plain values, not lists or mappings")
            return None
        key = self.scalar(node, path)
        try:
            hash(key)
        except TypeError:
            self.issue(node, path, f"mapping key {node.value!r} is not a plain value")
            return None
        return key

    def merge_sources(self, merges: list[yaml.Node], path: DataPath) -> list[yaml.MappingNode]:
        """The mappings named by ``<<`` entries, earliest (highest priority) first."""
        sources: list[yaml.MappingNode] = []
        for merge in merges:
            items = merge.value if isinstance(merge, yaml.SequenceNode) else [merge]
            for item in items:
                if isinstance(item, yaml.MappingNode):
                    sources.append(item)
                else:
                    self.issue(item, path, "'<<' merges only mappings (or a list of mappings)")
        return sources
