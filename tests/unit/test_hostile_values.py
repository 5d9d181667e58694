"""Every value an interpreter or a host answers with is typed before use: a wrong type is a
refusal or a problem to report, never an exception the engine did not expect."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from resenv.engine.assets import missing_indexes
from resenv.engine.gpuwatch import parse_probe_processes
from resenv.engine.hosts.check import parse_facts
from resenv.engine.run.recovery import replay_attempt_logs
from resenv.engine.hosts.slurm.client import parse_squeue_json
from resenv.engine.hosts.telemetry import parse_remote_processes, parse_smi_line
from resenv.probes.census import Census
from resenv.probes.integrity import bytecode_paths, judge_hooks, judge_tree, scan_problems
from resenv.probes.mirror import build_mirror

GOOD_FACTS = {"version": "3.11.9", "version_info": [3, 11, 9, "final", 0], "path": ["/usr/lib/python3.11"],
              "prefix": "/usr", "repo": "/r", "entries": 3, "truncated": False}


def import_map(facts: object) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = json.dumps(facts).encode()
        info = tarfile.TarInfo("importmap.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("facts", [
    42, None, [], "text",
    GOOD_FACTS | {"path": "/usr/lib"}, GOOD_FACTS | {"path": [1]}, GOOD_FACTS | {"version": 3},
    GOOD_FACTS | {"version_info": {"major": 3}}, GOOD_FACTS | {"prefix": None}, GOOD_FACTS | {"repo": ["/r"]},
    GOOD_FACTS | {"entries": "many"}, GOOD_FACTS | {"truncated": "no"},
])
def test_an_import_map_of_the_wrong_types_is_refused_as_malformed(tmp_path: Path, facts: object) -> None:
    with pytest.raises(ValueError, match="malformed"):
        build_mirror(import_map(facts), tmp_path / "mirror")


def test_an_import_map_of_the_right_types_builds(tmp_path: Path) -> None:
    mirror = build_mirror(import_map(GOOD_FACTS), tmp_path / "mirror")
    assert mirror.repo == tmp_path / "mirror" / "root" / "r" and mirror.python.is_file()


HOSTILE_SCANS = [
    {"changed": 42, "untracked": "x", "bytecode": None, "hooks": {"path": "/a"}},
    {"changed": [42, None, {"path": 7}, {"change": "missing"}], "untracked": [[1], {"path": None}],
     "bytecode": ["a.pyc", 3], "hooks": ["sitecustomize.py", {"path": {"x": 1}, "ctime": "now"}]},
]


@pytest.mark.parametrize("scan", HOSTILE_SCANS)
def test_scans_of_the_wrong_types_give_problems_and_no_finding(scan: dict) -> None:
    assert scan_problems(scan)
    assert judge_tree(scan, Census()) == []
    assert bytecode_paths(scan) == []
    assert judge_hooks(scan, since=0.0, owned=["/"]) == []
    assert scan_problems(42) == ["the scan answered int, not an object"]


def test_good_entries_beside_bad_ones_are_still_judged() -> None:
    scan = {"changed": [{"path": "main.py", "change": "modified"}, 42],
            "hooks": [{"path": "/w/env/site-packages/x.pth", "ctime": True}, {"path": "/w/h.pth", "ctime": 5.0}],
            "bytecode": [{"path": "__pycache__"}, "x"]}
    assert [f.path for f in judge_tree(scan, Census())] == ["main.py"]
    assert bytecode_paths(scan) == ["__pycache__"]
    # a ctime of `true` is no time: only the hook in the job's own dirs counts
    assert [f.path for f in judge_hooks(scan, since=100.0, owned=["/w/env"])] == ["/w/env/site-packages/x.pth"]
    assert scan_problems(scan) == ["changed: 1 entry not an object with a string path",
                                   "bytecode: 1 entry not an object with a string path"]


SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no


def test_host_facts_with_digits_int_cannot_read_are_skipped() -> None:
    text = "\n".join([f"cpus={SUPERSCRIPT_TWO}", f"mem_kib=1{SUPERSCRIPT_TWO}", f"disk_free_kib={SUPERSCRIPT_TWO}",
                      "nvidia_smi=/usr/bin/nvidia-smi", f"gpu={SUPERSCRIPT_TWO}, GPU-1, H200, 143771, 570.1"])
    facts = parse_facts("h", "ssh", text)
    assert (facts.cpus, facts.mem_gib, facts.disk_free_gib, facts.gpus) == (None, None, None, [])


def test_gpu_rows_with_digits_int_cannot_read_are_skipped() -> None:
    assert parse_smi_line(f"{SUPERSCRIPT_TWO}, GPU-1, 1, 2, 3, 4, 5", "h") is None
    assert parse_remote_processes(f"GPU-1|{SUPERSCRIPT_TWO}|10|||\n", "h", {"GPU-1": 0}, None) == []
    found = parse_probe_processes(f"GPU-1|12|10||/w\nlineage|{SUPERSCRIPT_TWO}|1:2\nlineage|12|{SUPERSCRIPT_TWO}:3 7:8\n",
                                  "h", {"GPU-1": 0}, root=7, container_id=None)
    assert [process.pid for process in found["ours"]] == [12]


@pytest.mark.parametrize("text", ["42", "[]", "null", '"x"'])
def test_squeue_json_that_is_not_an_object_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_squeue_json(text)


def test_squeue_json_entries_of_the_wrong_shape_are_no_jobs() -> None:
    text = json.dumps({"jobs": [42, None, {"job_id": 7, "job_state": [1, "RUNNING"], "nodes": 3, "name": ["n"],
                                           "state_reason": {"x": 1}, "comment": None}, {"job_state": "PENDING"}]})
    jobs = parse_squeue_json(text)
    assert list(jobs) == ["7"]
    assert (jobs["7"].state, jobs["7"].nodes, jobs["7"].name, jobs["7"].reason) == ("RUNNING", "", "", "")
    assert parse_squeue_json(json.dumps({"jobs": 42})) == {}


def test_missing_asset_indexes_name_only_assets_that_were_asked_about() -> None:
    output = f"missing 0\nmissing 5\nmissing {SUPERSCRIPT_TWO}\nmissing\nmissing -1\n"
    assert missing_indexes(output, 2) == [0]
    assert missing_indexes(output) == [0, 5]


class RaisingAdapter:
    def parse(self, line):
        if "boom" in line.text:
            raise KeyError("boom")
        if "odd" in line.text:
            return 42
        return [{"type": "output", "text": line.text}]


class Sink:
    """An EventSink without a store: what the output budget needs of one."""

    writer = None

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def emit(self, kind: str, data: dict) -> int:
        self.events.append((kind, data))
        return len(repr(data))


def test_a_replayed_line_the_parser_cannot_read_is_kept_as_unknown(tmp_path: Path) -> None:
    (tmp_path / "agent.stdout").write_text("fine\nboom\nodd\n")
    sink = Sink()
    added = replay_attempt_logs(tmp_path, 1, {"agent"}, {}, sink, RaisingAdapter())  # type: ignore[arg-type]
    assert added == 3
    kinds = [(data["type"], data.get("reason", "")) for _, data in sink.events]
    assert kinds[0] == ("output", "") and kinds[1][0] == kinds[2][0] == "unknown"
    assert "KeyError" in kinds[1][1] and "int" in kinds[2][1]
