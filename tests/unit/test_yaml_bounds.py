"""Bounds of the YAML loader (engine/spec/yamlsource.py): depth, values and text once aliases are
expanded; each crossing is one issue at a line and field, never a RecursionError or a hang."""

from __future__ import annotations

import pytest

from resenv.engine.spec import yamlsource
from resenv.engine.spec.yamlsource import MAX_DEPTH, SpecError, load_yaml


def nested(levels: int) -> str:
    return "top: " + "[" * levels + "1" + "]" * levels + "\n"


def only_issue(text: str) -> yamlsource.SpecIssue:
    with pytest.raises(SpecError) as caught:
        load_yaml(text, "b.yaml")
    [issue] = caught.value.issues
    return issue


def test_nesting_up_to_the_bound_loads_and_one_more_level_is_an_issue():
    data, _ = load_yaml(nested(MAX_DEPTH - 1))  # `top` is one level
    value, depth = data["top"], 1
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert (value, depth) == (1, MAX_DEPTH)
    issue = only_issue(nested(MAX_DEPTH))
    assert (issue.line, issue.column) == (1, 5 + MAX_DEPTH + 1)
    assert issue.path.startswith("top[0][0]") and "deeper than" in issue.message


@pytest.mark.parametrize("levels", [1000, 100_000])
def test_any_depth_is_one_issue(levels):
    issue = only_issue("a:\n  b: " + "{k: " * levels + "1" + "}" * levels + "\n")
    assert issue.line == 2 and issue.path.startswith("a.b.k.k") and "deeper than" in issue.message


def test_a_billion_laughs_stops_at_the_value_bound():
    text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
    for level in range(1, 10):
        text += f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]\n"
    issue = only_issue(text)
    assert issue.path.startswith("l") and "aliases" in issue.message and issue.line is not None


def test_a_long_text_repeated_by_aliases_stops_at_the_text_bound(monkeypatch):
    monkeypatch.setattr(yamlsource, "MAX_TEXT", 1 << 20)
    text = "big: &big " + "x" * 100_000 + "\nmany: [" + ", ".join(["*big"] * 20) + "]\n"
    issue = only_issue(text)
    assert issue.path.startswith("many[") and "MiB of text" in issue.message


def test_aliases_nesting_each_other_are_bounded_in_depth():
    text = "d0: &d0 1\n"
    for level in range(1, 11):
        text += f"d{level}: &d{level} " + "[" * 10 + f"*d{level - 1}" + "]" * 10 + "\n"
    issue = only_issue(text)
    assert issue.path.startswith("d") and "once its aliases are expanded" in issue.message


def test_ordinary_anchors_and_merges_still_load():
    data, positions = load_yaml("base: &b {x: 1, y: [1, 2]}\none: {<<: *b, y: 3}\ntwo: *b\n")
    assert data == {"base": {"x": 1, "y": [1, 2]}, "one": {"x": 1, "y": 3}, "two": {"x": 1, "y": [1, 2]}}
    assert positions.line(("one", "y")) == 2
