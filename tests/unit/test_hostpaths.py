"""The map between the engine's run folder and its place on an SSH host (engine/sandbox/hostpaths.py)."""

from __future__ import annotations

from resenv.engine.sandbox.hostpaths import PathMap

MAP = PathMap("/root/.local/share/resenv/runs/r1", "/home/alice/.local/share/resenv/runs/r1")


def test_paths_under_the_run_folder_move_and_others_stay():
    assert MAP.to_host("/root/.local/share/resenv/runs/r1/jobs/x/work") == "/home/alice/.local/share/resenv/runs/r1/jobs/x/work"
    assert MAP.to_host("/root/.local/share/resenv/runs/r1") == "/home/alice/.local/share/resenv/runs/r1"
    assert MAP.to_host("/root/.local/share/resenv/runs/r10/jobs") == "/root/.local/share/resenv/runs/r10/jobs"
    assert MAP.to_host("/usr/bin/python3") == "/usr/bin/python3"
    assert MAP.to_engine("/home/alice/.local/share/resenv/runs/r1/jobs/x/work/env/bin/python") \
        == "/root/.local/share/resenv/runs/r1/jobs/x/work/env/bin/python"
    assert MAP.to_engine("/home/alice/other") == "/home/alice/other"


def test_outbound_text_rewrites_each_path_of_the_run_folder_only():
    line = ("cd /root/.local/share/resenv/runs/r1/jobs/x/work/repo && "
            "'/root/.local/share/resenv/runs/r1/jobs/x/work/env/bin/python' -V; ls /root/.local/share/resenv/runs/r10")
    assert MAP.outbound(line) == (
        "cd /home/alice/.local/share/resenv/runs/r1/jobs/x/work/repo && "
        "'/home/alice/.local/share/resenv/runs/r1/jobs/x/work/env/bin/python' -V; ls /root/.local/share/resenv/runs/r10")
    assert MAP.outbound("PATH=/root/.local/share/resenv/runs/r1/e/bin:/usr/bin") == "PATH=/home/alice/.local/share/resenv/runs/r1/e/bin:/usr/bin"
    assert MAP.outbound_bytes(b"report at /root/.local/share/resenv/runs/r1/w/report.json.") \
        == b"report at /home/alice/.local/share/resenv/runs/r1/w/report.json."


def test_the_identity_map_changes_nothing():
    same = PathMap.identity("/srv/data/r1")
    assert same.mirrored and same.outbound("/srv/data/r1/x") == "/srv/data/r1/x"
    assert same.to_host("/srv/data/r1/x") == same.to_engine("/srv/data/r1/x") == "/srv/data/r1/x"
