"""report.json loading: schema, and safety against hostile files (symlinks, fifos, huge files)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from resenv.probes import report as report_mod
from resenv.probes.report import REPORT_SCHEMA, ReportLoad, load_report

FULL = {
    "python_path": "/opt/env/bin/python",
    "python_version": "3.11.7",
    "framework": {"name": "torch", "version": "2.3.1+cu121"},
    "cuda_available": True,
    "gpu_count": 2,
    "ddp_expected_ok": True,
    "packages": {"torch": "2.3.1", "numpy": "1.26.4"},
    "notes": "installed with uv",
    "agent_extra": {"anything": [1, 2, 3]},
}


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "sandbox"
    (root / "work").mkdir(parents=True)
    return root


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def load(sandbox: Path, name: str = "work/report.json", **kw: object) -> ReportLoad:
    return load_report(sandbox / name, sandbox_root=sandbox, **kw)


def call_with_deadline(fn, *, unblock_fifo: Path | None = None, seconds: float = 5.0) -> Any:
    """Run fn in a thread; fail (and release a reader stuck on unblock_fifo) if it does not return."""
    box: dict[str, object] = {}
    th = threading.Thread(target=lambda: box.setdefault("r", fn()), daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        if unblock_fifo is not None:
            fd = os.open(unblock_fifo, os.O_WRONLY | os.O_NONBLOCK)  # lets the blocked open() return
            os.close(fd)
            th.join(5)
        pytest.fail("load_report blocked (it opened a fifo)")
    return box["r"]


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(REPORT_SCHEMA)
    assert REPORT_SCHEMA["additionalProperties"] is True
    assert REPORT_SCHEMA.get("required", []) == []  # every field may be absent: no claim


def test_every_field_may_be_null_or_absent(sandbox: Path) -> None:
    """null or absent is no claim, never an invalid report: not even for python_path or notes."""
    for doc in ({}, {"notes": None}, {"python_path": None}, {"framework": {}},
                {"framework": {"name": None, "version": None}},
                {key: None for key in REPORT_SCHEMA["properties"]}):
        write(sandbox / "work/report.json", doc)
        r = load(sandbox)
        assert (r.status, r.category, r.errors) == ("ok", None, []), doc
        assert r.report == doc
    nested = {"python_path": "/p/bin/python", "framework": {"name": "torch", "version": None},
              "packages": {"torch": None}, "notes": None}
    write(sandbox / "work/report.json", nested)
    assert load(sandbox).status == "ok"


def test_minimal_report_is_ok(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {"python_path": "/usr/bin/python3"})
    r = load(sandbox)
    assert (r.status, r.category, r.errors) == ("ok", None, [])
    assert r.report == {"python_path": "/usr/bin/python3"}


def test_full_report_with_extra_keys_and_nulls_is_ok(sandbox: Path) -> None:
    write(sandbox / "work/report.json", FULL)
    r = load(sandbox)
    assert r.status == "ok", r.errors
    assert r.report == FULL
    nulls = {"python_path": "/p/bin/python", "python_version": None, "framework": None,
             "cuda_available": None, "gpu_count": None, "ddp_expected_ok": None, "packages": None}
    write(sandbox / "work/report.json", nulls)
    assert load(sandbox).status == "ok"


PAPER = {  # ResearchEnvBench's own report format: nine keys
    "python_path": "/opt/env/bin/python", "python_version": "3.10.14", "torch_version": "2.1.2+cu118",
    "cuda_available": True, "gpu_count": 1, "ddp_expected_ok": False, "env_tool": "conda", "env_name": "repo-env",
    "notes": "built with conda",
}


def test_the_papers_report_format_is_read_as_it_is(sandbox: Path) -> None:
    write(sandbox / "work/report.json", PAPER)
    r = load(sandbox)
    assert r.status == "ok", r.errors
    assert r.report == PAPER  # nothing dropped: env_tool and env_name are kept (not scored)
    for key in PAPER:
        assert key in REPORT_SCHEMA["properties"], key


def test_torch_version_is_a_typed_claim_and_env_keys_are_free(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {"torch_version": 2.1})
    assert load(sandbox).errors == ["torch_version: expected string or null, got 2.1"]
    # env_tool / env_name are not scored, so no value of theirs can invalidate the report
    write(sandbox / "work/report.json", {"env_tool": {"name": "conda"}, "env_name": 3, "torch_version": None})
    assert load(sandbox).status == "ok"


def test_relative_path_is_taken_relative_to_the_sandbox(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {"python_path": "/x"})
    assert load_report(Path("work/report.json"), sandbox_root=sandbox).status == "ok"


def test_missing(sandbox: Path) -> None:
    r = load(sandbox)
    assert (r.status, r.category, r.report) == ("missing", "missing_report", None)
    assert load(sandbox, "nodir/report.json").status == "missing"


def test_symlink_inside_the_sandbox_is_followed(sandbox: Path) -> None:
    write(sandbox / "real.json", {"python_path": "/x"})
    (sandbox / "work/report.json").symlink_to("../real.json")
    assert load(sandbox).status == "ok"


def test_symlink_to_etc_passwd_is_invalid_and_never_opened(sandbox: Path, monkeypatch) -> None:
    opened: list[str] = []
    real_open = os.open

    def spy(p, *a, **kw):
        opened.append(os.fsdecode(p))
        return real_open(p, *a, **kw)

    monkeypatch.setattr(report_mod.os, "open", spy)
    (sandbox / "work/report.json").symlink_to("/etc/passwd")
    r = load(sandbox)
    assert (r.status, r.category) == ("invalid", "invalid_report")
    assert "outside the sandbox" in r.errors[0]
    assert not any("passwd" in p for p in opened)


def test_symlink_to_fifo_outside_is_invalid_without_blocking(tmp_path: Path, sandbox: Path) -> None:
    fifo = tmp_path / "outside.fifo"
    os.mkfifo(fifo)
    (sandbox / "work/report.json").symlink_to(fifo)
    r = call_with_deadline(lambda: load(sandbox), unblock_fifo=fifo)
    assert r.status == "invalid" and "outside the sandbox" in r.errors[0]


def test_directory_component_symlinked_outside_is_invalid(tmp_path: Path, sandbox: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside / "report.json", {"python_path": "/x"})
    (sandbox / "link").symlink_to(outside, target_is_directory=True)
    r = load(sandbox, "link/report.json")
    assert r.status == "invalid" and "outside the sandbox" in r.errors[0]


def test_dotdot_escape_is_invalid(tmp_path: Path, sandbox: Path) -> None:
    write(tmp_path / "report.json", {"python_path": "/x"})
    r = load(sandbox, "work/../../report.json")
    assert r.status == "invalid"


def test_dangling_symlink_is_invalid(sandbox: Path) -> None:
    (sandbox / "work/report.json").symlink_to("nowhere.json")
    r = load(sandbox)
    assert r.status == "invalid" and "dangling" in r.errors[0]


def test_fifo_inside_sandbox_is_invalid_without_blocking(sandbox: Path) -> None:
    fifo = sandbox / "work/report.json"
    os.mkfifo(fifo)
    r = call_with_deadline(lambda: load(sandbox), unblock_fifo=fifo)
    assert r.status == "invalid" and "fifo" in r.errors[0]


def test_directory_is_invalid(sandbox: Path) -> None:
    (sandbox / "work/report.json").mkdir()
    r = load(sandbox)
    assert r.status == "invalid" and "directory" in r.errors[0]


def test_50mb_file_is_invalid_quickly_and_not_read(sandbox: Path, monkeypatch) -> None:
    big = sandbox / "work/report.json"
    with open(big, "wb") as f:
        f.write(b'{"python_path": "/x", "notes": "')
        f.truncate(50 * 1024 * 1024)
    read_bytes: list[int] = []
    real_read = os.read
    monkeypatch.setattr(report_mod.os, "read", lambda fd, n: read_bytes.append(n) or real_read(fd, n))
    t0 = time.monotonic()
    r = load(sandbox)
    assert time.monotonic() - t0 < 1.0
    assert r.status == "invalid" and "52428800 bytes" in r.errors[0]
    assert read_bytes == []


def test_reads_at_most_max_bytes_plus_one(sandbox: Path, monkeypatch) -> None:
    write(sandbox / "work/report.json", {"python_path": "/x", "notes": "y" * 200})
    assert load(sandbox, max_bytes=100).status == "invalid"
    # a file that grows after fstat: reads stop at max_bytes + 1
    write(sandbox / "work/report.json", {"python_path": "/x"})
    real_read = os.read
    asked: list[int] = []

    def growing_read(fd: int, n: int) -> bytes:
        asked.append(n)
        return b"x" * n  # never at EOF

    monkeypatch.setattr(report_mod.os, "read", growing_read)
    r = load(sandbox, max_bytes=100)
    assert r.status == "invalid" and "grew" in r.errors[0]
    assert sum(asked) == 101
    monkeypatch.setattr(report_mod.os, "read", real_read)


def test_non_utf8_is_invalid(sandbox: Path) -> None:
    (sandbox / "work/report.json").write_bytes(b'{"python_path": "/x\xff"}')
    r = load(sandbox)
    assert r.status == "invalid" and "UTF-8" in r.errors[0] and "0xff" in r.errors[0]


def test_utf8_bom_is_tolerated(sandbox: Path) -> None:
    (sandbox / "work/report.json").write_bytes(b'\xef\xbb\xbf{"python_path": "/x"}')
    assert load(sandbox).status == "ok"


def test_bad_json_reports_line_and_column(sandbox: Path) -> None:
    write(sandbox / "work/report.json", '{\n  "python_path": "/x",\n  "gpu_count": 2,,\n}')
    r = load(sandbox)
    assert r.status == "invalid"
    assert "line 3 column" in r.errors[0]


@pytest.mark.parametrize("text", [
    '{"python_path": "/x", "gpu_count": NaN}',
    '{"python_path": "/x", "gpu_count": Infinity}',
    "[" * 100000,
    '{"python_path": "/x", "gpu_count": ' + "9" * 5000 + "}",
    "",
])
def test_non_json_oddities_are_invalid(sandbox: Path, text: str) -> None:
    write(sandbox / "work/report.json", text)
    r = load(sandbox)
    assert r.status == "invalid" and r.errors[0].startswith("$: ")


@pytest.mark.parametrize(("doc", "kind"), [([], "array"), ("str", "string"), (3, "number"), (None, "null")])
def test_top_level_must_be_an_object(sandbox: Path, doc: object, kind: str) -> None:
    write(sandbox / "work/report.json", json.dumps(doc))
    r = load(sandbox)
    assert r.status == "invalid"
    assert r.errors == [f"$: expected a JSON object at top level, got {kind}"]


def test_wrong_types_are_all_listed_sorted_by_path(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {
        "python_path": 3, "gpu_count": "two", "cuda_available": "yes", "notes": "fine",
        "framework": {"version": 2}, "packages": {"torch": 2.1},
    })
    r = load(sandbox)
    assert r.status == "invalid" and r.report is None
    assert r.errors == [
        'cuda_available: expected boolean or null, got "yes"',
        "framework.version: expected string or null, got 2",
        'gpu_count: expected integer or null, got "two"',
        "packages.torch: expected string or null, got 2.1",
        "python_path: expected string or null, got 3",
    ]


def test_other_constraints(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {"python_path": "bin/python", "gpu_count": -1, "ddp_expected_ok": 1,
                                         "framework": {"name": ""}})
    assert load(sandbox).errors == [
        "ddp_expected_ok: expected boolean or null, got 1",
        'framework.name: expected a non-empty string, got ""',
        "gpu_count: expected a value >= 0, got -1",
        'python_path: expected an absolute path, got "bin/python"',
    ]
    write(sandbox / "work/report.json", {"gpu_count": True, "notes": 3, "python_path": 7})
    assert load(sandbox).errors == ["gpu_count: expected integer or null, got true",
                                    "notes: expected string or null, got 3",
                                    "python_path: expected string or null, got 7"]


def test_duplicate_keys_are_invalid(sandbox: Path) -> None:
    write(sandbox / "work/report.json", '{"python_path": "/x", "gpu_count": 8, "gpu_count": 1}')
    assert load(sandbox).errors == ["gpu_count: key given more than once"]


def test_odd_keys_are_quoted_in_paths(sandbox: Path) -> None:
    write(sandbox / "work/report.json", {"python_path": "/x", "packages": {"zope.interface": 5}})
    assert load(sandbox).errors == ['packages["zope.interface"]: expected string or null, got 5']
