"""The real engine on several hosts: GPU leases from the `leases` table, proven against the hosts' shapes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import yaml

from ..conftest import resenv, write_benchmark
from .test_engine_run import db_rows

MAIN = "print('ok')\n"

# The agent prints the GPU ids it was given, then sleeps so that jobs overlap.
SLEEPER = """\
a:
  kind: command
  command: "echo gpus={gpus} ngpus={ngpus}; sleep 0.8"
"""

ENTRYPOINTS = {
    0: ({"cpu": {"command": "{python} main.py"}},
        {"single_gpu": "no GPU code", "multi_gpu": "no GPU code"}),
    1: ({"cpu": {"command": "{python} main.py"}, "single_gpu": {"command": "{python} main.py", "gpus": 1}},
        {"multi_gpu": "no distributed code"}),
    2: ({"cpu": {"command": "{python} main.py"}, "single_gpu": {"command": "{python} main.py", "gpus": 1},
         "multi_gpu": {"command": "torchrun --nproc-per-node {ngpus} main.py", "gpus": 2}}, {}),
}


def gpu_benchmark(root: Path, needs: dict[str, int], hosts: str) -> Path:
    """write_benchmark, then give each repo the entrypoints that make it need `needs[repo]` GPUs."""
    bench = write_benchmark(root, {repo: {"main.py": MAIN} for repo in needs}, SLEEPER, hosts=hosts)
    data = yaml.safe_load(bench.read_text())
    for repo in data["suites"]["s"]["repos"]:
        entrypoints, not_applicable = ENTRYPOINTS[needs[repo["id"]]]
        repo["entrypoints"] = entrypoints
        if not_applicable:
            repo["not_applicable"] = not_applicable
        else:
            repo.pop("not_applicable")
    bench.write_text(yaml.safe_dump(data, sort_keys=False))
    return bench


def lease_rows(db: Path) -> list[dict]:
    return db_rows(db, "SELECT l.*, j.repo_id, j.gpus_needed FROM leases l JOIN jobs j ON j.id = l.job_id ORDER BY l.id")


def overlaps(a: dict, b: dict) -> bool:
    return a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]


def max_concurrency(intervals: list[dict]) -> int:
    """The most intervals open at one instant (an end at t comes before a start at t)."""
    edges = sorted([(row["started_at"], 1) for row in intervals] + [(row["ended_at"], -1) for row in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    best = current = 0
    for _, delta in edges:
        current += delta
        best = max(best, current)
    return best


def gpu_ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part != ""]


def assert_no_gpu_shared(leases: list[dict]) -> None:
    by_gpu: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in leases:
        for gpu in gpu_ids(row["gpus"]):
            by_gpu[(row["host"], gpu)].append(row)
    for (host_name, gpu), rows in by_gpu.items():
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                assert not overlaps(a, b), f"GPU {gpu} of {host_name} leased to jobs {a['job_id']} and {b['job_id']} at once"


def assert_agents_saw_their_lease(db: Path, leases: list[dict]) -> None:
    for row in leases:
        texts = [json.loads(r["data"]).get("text") for r in db_rows(
            db, "SELECT data FROM events WHERE attempt_id = ? AND kind = 'transcript'", (row["attempt_id"],))]
        ids = gpu_ids(row["gpus"])
        assert f"gpus={','.join(map(str, ids))} ngpus={len(ids)}" in texts, (row, texts)


# C3 and C4 are the tiers that make a job lease GPUs (C2 would give every job one). The agent writes no
# report, so they fail at once (missing_report): these tests are about the lease, not the scores.
GPU_TIERS = ("--tiers", "C3,C4")

HOSTS = """\
  big: {kind: local, slots: 2, gpus: [0, 1]}
  one: {kind: local, slots: 1, gpus: 1}
  cpu: {kind: local, slots: 2, gpus: 0}
"""
SHAPES = {"big": ({0, 1}, 2), "one": ({0}, 1), "cpu": (set(), 2)}


def test_jobs_lease_what_they_need_on_hosts_that_have_it(tmp_path, cli_env):
    needs = {"m1": 2, "m2": 2, "g1": 1, "g2": 1, "g3": 1, "c1": 0, "c2": 0, "c3": 0}
    bench = gpu_benchmark(tmp_path, needs, HOSTS)
    out = resenv("run", str(bench), "--host", "big", "--host", "one", "--host", "cpu", "--jobs", "8",
                 "--display", "none", *GPU_TIERS, env=cli_env, cwd=tmp_path, timeout=90)
    assert out.returncode == 0, out.stderr
    db = Path(cli_env["RESENV_DB"])

    jobs = db_rows(db, "SELECT repo_id, gpus_needed, state, attempts FROM jobs ORDER BY repo_id")
    assert {j["repo_id"]: j["gpus_needed"] for j in jobs} == needs
    assert all(j["state"] == "done" and j["attempts"] == 1 for j in jobs), jobs
    hosts = db_rows(db, "SELECT name, inventory_json FROM hosts")
    assert {h["name"]: json.loads(h["inventory_json"])["gpus"] for h in hosts} == {"big": [0, 1], "one": [0], "cpu": []}

    leases = lease_rows(db)
    assert len(leases) == len(needs)
    for row in leases:
        assert row["ended_at"] is not None and row["ended_at"] >= row["started_at"]
        available, _ = SHAPES[row["host"]]
        got = gpu_ids(row["gpus"])
        # exactly what it needed (every need here is met by some host), all on one host that has them
        assert len(got) == len(set(got)) == row["gpus_needed"], row
        assert set(got) <= available, row
        if row["gpus_needed"]:
            assert row["host"] != "cpu", f"GPU job {row['repo_id']} ran on the GPU-less host"
        if row["gpus_needed"] == 2:
            assert row["host"] == "big"
    assert_no_gpu_shared(leases)
    for name, (_, slots) in SHAPES.items():
        mine = [row for row in leases if row["host"] == name]
        assert max_concurrency(mine) <= slots, f"host {name} ran more than {slots} jobs at once"
    # the run really was concurrent (or the overlap checks above prove nothing)
    assert max_concurrency(leases) >= 3
    assert_agents_saw_their_lease(db, leases)
    # the job rows say where each ran, as the leases do
    placed = {r["repo_id"]: (r["host"], r["gpus"]) for r in db_rows(db, "SELECT repo_id, host, gpus FROM jobs")}
    assert placed == {row["repo_id"]: (row["host"], row["gpus"]) for row in leases}


def test_a_job_needing_more_gpus_than_any_host_has_gets_the_biggest_host(tmp_path, cli_env):
    hosts = """\
  one: {kind: local, slots: 2, gpus: [3]}
  cpu: {kind: local, slots: 2, gpus: 0}
"""
    needs = {"m1": 2, "m2": 2, "c1": 0}
    bench = gpu_benchmark(tmp_path, needs, hosts)
    out = resenv("run", str(bench), "--host", "cpu", "--host", "one", "--jobs", "4", "--display", "none",
                 *GPU_TIERS, env=cli_env, cwd=tmp_path, timeout=90)
    assert out.returncode == 0, out.stderr
    db = Path(cli_env["RESENV_DB"])
    assert {j["state"] for j in db_rows(db, "SELECT state FROM jobs")} == {"done"}
    leases = lease_rows(db)
    by_repo = {row["repo_id"]: row for row in leases}
    assert set(by_repo) == set(needs) and len(leases) == 3
    for repo in ("m1", "m2"):
        assert (by_repo[repo]["host"], by_repo[repo]["gpus"]) == ("one", "3")
    assert (by_repo["c1"]["host"], by_repo["c1"]["gpus"]) == ("cpu", "")
    # both multi-GPU jobs wanted the single GPU 3: they ran one after the other although `one` had 2 slots
    assert not overlaps(by_repo["m1"], by_repo["m2"])
    assert_no_gpu_shared(leases)
    assert_agents_saw_their_lease(db, leases)
