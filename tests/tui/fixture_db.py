"""A deterministic store for the dashboard's snapshot tests and screenshots.

Everything is fixed: ids, names, timestamps (around NOW, which the tests freeze `time.time` to),
paths (under FIXTURE_ROOT, so paths shown on screen are the same on every machine), GPU samples,
token usage, transcripts and tier evidence. Three runs: a live one (engine heartbeat at NOW), a
finished one and an interrupted one, so history and compare have something to show.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

from resenv.engine.store.db import open_for_writing

NOW = 1767258000.0  # 2026-01-01 09:00:00 UTC
FIXTURE_ROOT = Path(tempfile.gettempdir()) / "resenv-tui-fixture"
LIVE_RUN = "20260101-080000-a1b2"
OLD_RUN = "20251231-180000-c3d4"
DEAD_RUN = "20251230-120000-e5f6"
TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")
REPOS = ("tiny-stdlib", "tiny-numpy", "undeclared-dep", "c-extension", "numpy-v1-api", "src-layout-extra",
         "torch-ddp", "nanoGPT")

# per (repo, agent): state, phase, tier statuses (None: not yet), tokens, cost
LIVE_JOBS = {
    ("tiny-stdlib", "claude-code"): ("done", None, "pppssp", 41_200, 0.38),
    ("tiny-numpy", "claude-code"): ("done", None, "pppssp", 63_900, 0.61),
    ("undeclared-dep", "claude-code"): ("done", None, "pfpssf", 88_100, 0.92),
    ("c-extension", "claude-code"): ("error", None, "", 12_000, 0.11),
    ("numpy-v1-api", "claude-code"): ("done", None, "pfsssf", 102_400, 1.07),
    ("src-layout-extra", "claude-code"): ("running", "probes", "pp", 55_000, 0.49),
    ("torch-ddp", "claude-code"): ("running", "agent", "", 131_000, 1.42),
    ("nanoGPT", "claude-code"): ("queued", None, "", 0, 0.0),
    ("tiny-stdlib", "baseline"): ("done", None, "pppssp", 0, 0.0),
    ("tiny-numpy", "baseline"): ("done", None, "pppssp", 0, 0.0),
    ("undeclared-dep", "baseline"): ("done", None, "ppsssp", 0, 0.0),
    ("c-extension", "baseline"): ("done", None, "ppsssp", 0, 0.0),
    ("numpy-v1-api", "baseline"): ("done", None, "pfsssp", 0, 0.0),
    ("src-layout-extra", "baseline"): ("paused", "agent", "", 0, 0.0),
    ("torch-ddp", "baseline"): ("queued", None, "", 0, 0.0),
    ("nanoGPT", "baseline"): ("queued", None, "", 0, 0.0),
}
STATUS = {"p": "pass", "f": "fail", "s": "skip", "e": "error"}
DETAIL_JOB = ("numpy-v1-api", "claude-code")


def _spec() -> str:
    return json.dumps({"fixture": True})


def build(root: Path = FIXTURE_ROOT) -> Path:
    """(Re)create the fixture store under `root`; returns the DB path."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    db = root / "store.db"
    conn = open_for_writing(db)
    conn.execute("BEGIN")
    _live_run(conn, root)
    _old_run(conn, root, OLD_RUN, "starter × baseline", NOW - 15 * 3600, "finished", "pppssp")
    _old_run(conn, root, DEAD_RUN, "starter × baseline-offline", NOW - 45 * 3600, "running", "pfsssf")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db


def _run_row(conn, run_id: str, name: str, state: str, started: float, finished: float | None, agents: list[str],
             root: Path, heartbeat: float | None, host: str = "ci-runner") -> None:
    conn.execute(
        "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
        " created_at, started_at, finished_at, engine_pid, engine_host, heartbeat_at)"
        " VALUES (?, ?, 'benchmark.yaml', '/bench', 'starter', ?, ?, ?, ?, ?, ?, ?, 4242, ?, ?)",
        (run_id, name, _spec(), json.dumps({"agents": agents, "hosts": ["gpu-box", "local"], "jobs": 4,
                                            "tiers": list(TIERS)}),
         str(root / "data" / run_id), state, started - 5, started, finished, host, heartbeat),
    )


def _live_run(conn, root: Path) -> None:
    started = NOW - 3723
    _run_row(conn, LIVE_RUN, "nightly × claude-code, baseline", "running", started, None,
             ["claude-code", "baseline"], root, NOW - 1)
    conn.execute("INSERT INTO hosts VALUES (?, 'gpu-box', 'ssh', 'up', ?, ?)", (LIVE_RUN, json.dumps({
        "kind": "ssh", "hostname": "gpu-box.lab", "os": "Linux 6.8.0", "cpus": 64, "slots": 4,
        "gpus": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"},
                 {"index": 2, "name": "NVIDIA H200"}]}), NOW - 2))
    conn.execute("INSERT INTO hosts VALUES (?, 'local', 'local', 'up', ?, ?)", (LIVE_RUN, json.dumps({
        "kind": "local", "hostname": "ci-runner", "os": "Linux 6.8.0", "cpus": 16, "slots": 2, "gpus": []}), NOW - 2))
    # GPU 0 and 1: busy with torch-ddp and src-layout-extra; GPU 2: no sample for a while (stale)
    for gpu in (0, 1):
        for index in range(120):
            ts = NOW - (119 - index) * 2.0
            util = 50 + 45 * math.sin(index / (6.0 + gpu * 3)) if index > 30 else 3.0 * (index % 3)
            util = max(0.0, min(100.0, util))
            mem = 20_000 + 50_000 * (index / 120) if gpu == 0 else 9_000 + 12_000 * (index % 40) / 40
            conn.execute("INSERT INTO gpu_samples (host, gpu, ts, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c)"
                         " VALUES ('gpu-box', ?, ?, ?, ?, 143771, ?, ?)",
                         (gpu, ts, round(util, 1), round(mem, 1), round(120 + 5 * util, 1), round(38 + util / 3, 1)))
    for index in range(20):
        conn.execute("INSERT INTO gpu_samples (host, gpu, ts, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c)"
                     " VALUES ('gpu-box', 2, ?, 0, 512, 143771, 75, 31)", (NOW - 600 - (20 - index) * 2.0,))
    gpu_of = {("torch-ddp", "claude-code"): "0,1", ("src-layout-extra", "claude-code"): "2"}
    for number, ((repo, agent), (state, phase, tiers, tokens, cost)) in enumerate(LIVE_JOBS.items()):
        _job(conn, root, LIVE_RUN, number, repo, agent, state, phase, tiers, tokens, cost,
                      started + 60 * number, gpu_of.get((repo, agent)))


def _job(conn, root: Path, run_id: str, number: int, repo: str, agent: str, state: str, phase: str | None,
         tiers: str, tokens: int, cost: float, start: float, gpus: str | None) -> int:
    host = "gpu-box" if gpus is not None else ("local" if state != "queued" else None)
    attempts = 0 if state == "queued" else (2 if state == "error" else 1)
    finished = None if state in ("running", "paused", "queued") else min(NOW - 30, start + 300 + 37 * number)
    cursor = conn.execute(
        "INSERT INTO jobs (run_id, key, suite, repo_id, agent, gpus_needed, state, attempts, host, gpus, reason,"
        " created_at, started_at, finished_at) VALUES (?, ?, 'starter', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, f"{repo}/{agent}", repo, agent, 2 if repo == "torch-ddp" else 0, state, attempts, host, gpus,
         "phase checkout: git clone exited 128 (infra)" if state == "error" else None, start - 60,
         None if state == "queued" else start, finished))
    job_id = int(cursor.lastrowid)
    if not attempts:
        return job_id
    base = root / "data" / run_id / "jobs" / f"{repo}--{agent}" / f"attempt-{attempts}"
    work = base / "work"
    (work / "repo").mkdir(parents=True)
    (work / "env" / "bin").mkdir(parents=True)
    (work / "repo" / "main.py").write_text("import numpy as np\nprint(np.float_(1.0))\n")
    (work / "repo" / "requirements.txt").write_text("numpy\n")
    (work / "report.json").write_text(json.dumps({"python_path": str(work / "env/bin/python")}, indent=2))
    (base / "logs").mkdir(parents=True)
    attempt_state = "running" if state in ("running", "paused") else ("error" if state == "error" else "done")
    cursor = conn.execute(
        "INSERT INTO attempts (run_id, job_id, number, state, phase, host, gpus, workdir, category, reason, started_at,"
        " finished_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, job_id, attempts, attempt_state, phase, host, gpus or "", str(work),
         "infra" if state == "error" else None, None, start, finished, NOW - 1))
    attempt_id = int(cursor.lastrowid)
    if gpus is not None and attempt_state == "running":
        conn.execute("INSERT INTO leases (run_id, job_id, attempt_id, host, gpus, started_at) VALUES (?, ?, ?, ?, ?, ?)",
                     (run_id, job_id, attempt_id, host, gpus, start))
    for phase_name, offset, length in (("provision", 0, 1), ("checkout", 1, 2), ("agent", 3, 180), ("probes", 183, 60),
                                       ("audit", 243, 1)):
        if attempt_state == "running" and phase_name == phase:
            conn.execute("INSERT INTO phases (attempt_id, name, status, started_at) VALUES (?, ?, 'running', ?)",
                         (attempt_id, phase_name, start + offset))
            break
        conn.execute("INSERT INTO phases (attempt_id, name, status, started_at, finished_at) VALUES (?, ?, 'done', ?, ?)",
                     (attempt_id, phase_name, start + offset, start + offset + length))
    seq = 0

    def event(kind: str, data: dict, ts: float) -> None:
        nonlocal seq
        seq += 1
        conn.execute("INSERT INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (run_id, job_id, attempt_id, seq, ts, kind, json.dumps(data)))

    event("job_state", {"state": "running", "attempt": attempts, "host": host, "gpus": []}, start)
    for index, (kind, data) in enumerate(_transcript(repo, work)):
        event(kind, data, start + 3 + index)
    for index, code in enumerate(tiers):
        tier = TIERS[index]
        status = STATUS[code]
        category, evidence = _evidence(tier, status, repo, agent, work)
        conn.execute(
            "INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, category, evidence_json, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (run_id, job_id, attempt_id, tier, status, category,
                                                json.dumps(evidence), start + 200 + index))
        event("tier", {"tier": tier, "status": status, "category": category}, start + 200 + index)
    if tokens:
        for part in range(4):
            conn.execute(
                "INSERT INTO usage (run_id, job_id, attempt_id, ts, model, input_tokens, cached_input_tokens,"
                " cache_write_tokens, output_tokens, reasoning_tokens, cost_usd) VALUES (?, ?, ?, ?, 'claude-sonnet',"
                " ?, ?, 0, ?, 0, ?)",
                (run_id, job_id, attempt_id, start + 10 * part, tokens * 6 // 40, tokens * 3 // 40, tokens // 40,
                 cost / 4))
    for name, text in (("agent", "\n".join(line for _, data in _transcript(repo, work)
                                               for line in [json.dumps(data)]) + "\n"),
                       ("C1-6", "Traceback (most recent call last):\n  File \"main.py\", line 2, in <module>\n"
                                "AttributeError: `np.float_` was removed in the NumPy 2.0 release.\n")):
        stdout = base / "logs" / f"{name}.stdout"
        stdout.write_text(text if name == "agent" else "")
        stderr = base / "logs" / f"{name}.stderr"
        stderr.write_text("" if name == "agent" else text)
        for stream, path in (("stdout", stdout), ("stderr", stderr)):
            body = path.read_text()
            conn.execute(
                "INSERT INTO logs (run_id, job_id, attempt_id, name, stream, path, nbytes, nlines, head, tail, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?)",
                (run_id, job_id, attempt_id, name, stream, str(path), len(body), body.count("\n"), body, start + 250))
    if state in ("done", "error"):
        conn.execute("INSERT INTO events (run_id, job_id, attempt_id, seq, ts, kind, data) VALUES (?, ?, NULL, NULL, ?,"
                     " 'job_state', ?)", (run_id, job_id, finished, json.dumps({"state": state})))
    return job_id


def _transcript(repo: str, work: Path) -> list[tuple[str, dict]]:
    env = work / "env"
    return [
        ("phase", {"phase": "agent", "status": "started"}),
        ("command", {"phase": "agent", "argv": ["claude", "-p", "--output-format", "stream-json"], "log": "agent"}),
        ("transcript", {"type": "message", "text": f"I'll set up an environment for {repo}: reading its metadata first."}),
        ("transcript", {"type": "tool_call", "id": "t1", "name": "shell", "command": ["cat", "requirements.txt"]}),
        ("transcript", {"type": "tool_result", "id": "t1", "exit_code": 0, "seconds": 0.02, "output_tail": "numpy"}),
        ("transcript", {"type": "tool_call", "id": "t2", "name": "shell",
                        "command": ["python3", "-m", "venv", str(env)]}),
        ("transcript", {"type": "tool_result", "id": "t2", "exit_code": 0, "seconds": 2.9, "output_tail": ""}),
        ("transcript", {"type": "tool_call", "id": "t3", "name": "shell",
                        "command": [str(env / "bin/pip"), "install", "numpy"]}),
        ("transcript", {"type": "output", "text": "Collecting numpy"}),
        ("transcript", {"type": "output", "text": "Successfully installed numpy-2.4.6"}),
        ("transcript", {"type": "tool_result", "id": "t3", "exit_code": 0, "seconds": 7.4}),
        ("transcript", {"type": "tool_call", "id": "t4", "name": "shell", "command": [str(env / "bin/python"), "main.py"]}),
        ("transcript", {"type": "tool_result", "id": "t4", "exit_code": 1, "seconds": 0.3,
                        "output_tail": "AttributeError: `np.float_` was removed in the NumPy 2.0 release."}),
        ("transcript", {"type": "message", "text": "The entrypoint fails on NumPy 2; the environment is otherwise "
                                                   "complete. Writing report.json (torch 2.3.1, CUDA available)."}),
        ("transcript", {"type": "usage", "input_tokens": 61_440, "output_tokens": 2_560, "cost_usd": 0.27}),
        ("exit", {"phase": "agent", "log": "agent", "returncode": 0, "timed_out": False, "killed": False,
                  "seconds": 180.2}),
        ("phase", {"phase": "agent", "status": "done", "seconds": 180.2}),
        ("phase", {"phase": "probes", "status": "started"}),
        ("command", {"phase": "probes", "argv": ["sh", "-c", f"{env}/bin/python main.py"], "log": "C1-6"}),
        ("exit", {"phase": "probes", "log": "C1-6", "returncode": 1, "timed_out": False, "killed": False,
                  "seconds": 0.3}),
    ]


def _evidence(tier: str, status: str, repo: str, agent: str, work: Path) -> tuple[str | None, dict]:
    env = work / "env" / "bin" / "python"
    if status == "skip":
        if tier == "C2":
            return "insufficient_hardware", {"reason": "needs 1 GPU(s), host gave 0", "needed": 1, "leased": 0}
        return "not_applicable", {"reason": "no GPU code path"}
    if tier == "C0":
        return (None if status == "pass" else "deps_missing"), {
            "command": ["pyright", "--outputjson", "--pythonpath", str(env)], "exit_code": 0, "duration_s": 4.4,
            "missing": [] if status == "pass" else ["numpy"],
            "log_tail": "pyright 1.1.414: exit 0, 2 files analyzed in 3.466s; missing: none"}
    if tier in ("C1", "C3", "C4"):
        if status == "pass":
            return None, {"command": ["sh", "-c", f"{env} main.py"], "exit_code": 0, "duration_s": 1.6,
                          "log_tail": "OK: 664579 primes below 10000000"}
        return "runtime", {
            "command": ["sh", "-c", f"{env} main.py"], "exit_code": 1, "duration_s": 0.3, "signature": "AttributeError",
            "evidence_line": "AttributeError: `np.float_` was removed in the NumPy 2.0 release.",
            "log_tail": "Traceback (most recent call last):\n  File \"main.py\", line 2, in <module>\n"
                        "    print(np.float_(1.0))\nAttributeError: `np.float_` was removed in the NumPy 2.0 release."}
    if tier == "C2":
        return None, {"framework": {"framework": "torch", "version": "2.3.1", "cuda_build": "12.1"},
                      "driver": {"driver_version": "550.54", "cuda_version": "12.4"}}
    # C5
    claims = {"python_path": str(env), "python_version": "3.11", "framework": {"name": "torch", "version": "2.3.1"},
              "cuda_available": True, "gpu_count": 1, "ddp_expected_ok": None,
              "packages": {"numpy": "2.4.6", "torch": "2.3.1"}, "notes": "entrypoint fails on NumPy 2"}
    observed = {"python_path": str(env), "python_exists": True, "python_executable": True, "python_runs": True,
                "python_version": "3.11.7", "framework": "none", "framework_version": None, "cuda_available": None,
                "gpu_count": None, "ddp_ok": None}
    hallucinations = []
    checked = ["python_path", "python_version"]
    unverifiable = ["packages"]
    if status == "fail":
        hallucinations = [{"claim": "framework.name", "kind": "capability", "claimed": "torch", "observed": "none",
                           "message": "claims torch, but no framework imports"}]
        checked.append("framework.name")
        unverifiable += ["framework.version", "cuda_available", "gpu_count"]
    else:
        claims = {"python_path": str(env), "python_version": "3.11.7", "framework": None, "cuda_available": None,
                  "gpu_count": None, "ddp_expected_ok": None}
    return None, {"status": status, "category": None, "hallucinations": hallucinations, "checked": checked,
                  "unverifiable": unverifiable, "report_errors": [], "observed": observed, "claims": claims,
                  "environment": {"prefix": str(work / "env"), "size_bytes": 187 * 2**20}}


def _old_run(conn, root: Path, run_id: str, name: str, started: float, state: str, pattern: str) -> None:
    finished = started + 2 * 3600 if state == "finished" else None
    _run_row(conn, run_id, name, state, started, finished, ["baseline"], root, None if finished else started + 1800,
             host="old-runner")
    for number, repo in enumerate(REPOS):
        tiers = pattern if number % 3 else pattern.replace("f", "p")
        if repo == "torch-ddp":
            tiers = "pppfff"
        job_state = "done" if state == "finished" or number < 5 else "queued"
        _job(conn, root, run_id, number, repo, "baseline", job_state, None, tiers if job_state == "done" else "",
             0, 0.0, started + 120 * number, None)


if __name__ == "__main__":
    print(build())
