"""The plain display's wording: heartbeat lines cut to the terminal at a word, times as people read them."""

from __future__ import annotations

import pytest

from resenv.engine.cli.display import HEARTBEAT_S, heartbeat_interval, readable, shorten
from resenv.engine.wording import duration

LINE = "Collecting torch==2.1.0 from the pinned requirements of this repository"


def test_a_long_line_is_cut_at_a_word_with_an_ellipsis() -> None:
    assert shorten(LINE, 30) == "Collecting torch==2.1.0 from…"
    assert shorten(LINE, len(LINE)) == LINE
    assert len(shorten(LINE, 30)) <= 30


def test_a_word_that_ends_exactly_at_the_edge_is_kept_whole() -> None:
    assert shorten("alpha beta gamma", 11) == "alpha beta…"


def test_one_long_word_is_cut_at_a_character() -> None:
    assert shorten("/very/long/path/without/any/spaces/at/all", 12) == "/very/long/…"


def test_whitespace_and_control_lines_become_one_line() -> None:
    assert shorten("  a\tb\r\nc  ", 20) == "a b c"


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.9, "59s"), (95, "1m35s"), (485, "8m05s"),
                                               (7380, "2h03m")])
def test_durations(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_heartbeat_interval_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("RESENV_HEARTBEAT_S", raising=False)
    assert heartbeat_interval() == (HEARTBEAT_S, None)
    monkeypatch.setenv("RESENV_HEARTBEAT_S", "0.5")
    assert heartbeat_interval() == (0.5, None)


@pytest.mark.parametrize("value", ["nonsense", "0", "-3", "inf", "nan"])
def test_a_bad_heartbeat_interval_is_named_in_one_line(monkeypatch, value: str) -> None:
    monkeypatch.setenv("RESENV_HEARTBEAT_S", value)
    seconds, problem = heartbeat_interval()
    assert seconds == HEARTBEAT_S
    assert problem == f"RESENV_HEARTBEAT_S={value!r} is not a positive number of seconds: heartbeats every 30 s"


def test_the_last_output_line_reads_as_the_dashboard_shows_it() -> None:
    assert readable("output", {"log": "C1-3", "stream": "stdout", "text": "loss 0.09"}) == "loss 0.09"
    assert readable("transcript", {"log": "agent", "text": "tick 3"}) == "tick 3"
    call = {"type": "tool_call", "name": "shell", "command": ["pip", "install", "numpy"]}
    assert readable("transcript", call) == "$ pip install numpy"
    message = {"type": "message", "step": "verify", "text": "importing the repo's packages"}
    assert readable("transcript", message) == "› [verify] importing the repo's packages"


def test_a_probes_json_answer_is_not_a_line_a_person_reads_its_command_is() -> None:
    assert readable("output", {"log": "probe-importmap-14", "text": '{"entries": 49547, "truncated": false}'}) is None
    assert readable("output", {"log": "C1-3", "text": "{not json} at all"}) == "{not json} at all"
    started = {"phase": "probes", "argv": ["/opt/node/bin/node", "/x/pyright/index.js", "--outputjson"], "log": "C0-16"}
    assert readable("command", started) == "$ node /x/pyright/index.js --outputjson"
    assert readable("command", {"argv": []}) is None
