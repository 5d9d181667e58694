"""Memory of the engine process while 5,000 jobs are queued.

Target (issue): <= 200 MB RSS with 5,000 queued jobs.

Method: a benchmark of REPOS bundled tiny repos x AGENTS agents (default 500 x 10 = 5,000 jobs)
whose agent is `sleep 3600`, so with `--jobs 4` four jobs run (and stay running) and 4,996 stay
queued. The engine is the real `resenv run <benchmark> --jobs 4 --display none` in a child process
(this script re-executed with --child, so RESENV_PERF_SRC applies to it too): it loads the YAML,
creates the run, starts the Engine. The parent samples the child's VmRSS / VmHWM from /proc at
20 Hz, waits (via a read-only DB connection) until 4 jobs run and the rest are queued, holds that
state for --hold seconds (heartbeats and control polls go on), then writes a `cancel` control row as
an operator would and waits for the engine to mark everything cancelled and exit.

Figures: RSS while N jobs are queued (median, max), the peak RSS of the process over its whole life
(VmHWM, which includes loading the benchmark and creating the run), the RSS of a bare interpreter
that only imported the engine (the floor), and with --small M the same run with M jobs, to derive
the per-queued-job cost. --tracemalloc makes the child dump its top Python allocations (by line)
while the jobs are queued into tests/perf/results/perf_queued_memory.tracemalloc.txt.

    .venv/bin/python tests/perf/perf_queued_memory.py
    .venv/bin/python tests/perf/perf_queued_memory.py --repos 500 --agents 10 --small 100 --tracemalloc
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _perfutil as pu

NAME = "perf_queued_memory"
TARGET_MB = 200.0
MB = 1024 * 1024
MAIN = "print('ok')\n"


# ----------------------------------------------------------------------------- child (the engine)


def child(argv: list[str]) -> None:
    """Run `resenv <argv>` in this process; with PERF_TRACEMALLOC=<file>, dump allocations on SIGUSR1."""
    dump_to = os.environ.get("PERF_TRACEMALLOC")
    if dump_to:
        import tracemalloc

        tracemalloc.start(1)

        def dump(signum: int, frame: Any) -> None:
            snapshot = tracemalloc.take_snapshot().filter_traces([
                tracemalloc.Filter(False, tracemalloc.__file__),
                tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
            ])
            current, peak = tracemalloc.get_traced_memory()
            lines = [f"traced now {current / MB:.1f} MiB, traced peak {peak / MB:.1f} MiB", "", "top by line:"]
            lines += [str(stat) for stat in snapshot.statistics("lineno")[:30]]
            lines += ["", "top by file:"]
            lines += [str(stat) for stat in snapshot.statistics("filename")[:20]]
            Path(dump_to).write_text("\n".join(lines) + "\n")

        signal.signal(signal.SIGUSR1, dump)
    from resenv.engine.cli.main import main as cli_main

    cli_main(argv, prog_name="resenv")


# ----------------------------------------------------------------------------- parent


def agent_names(count: int) -> list[str]:
    return ["a"] + [f"sleeper{index}" for index in range(1, count)]


def make_benchmark(root: Path, repos: int, agents: int) -> Path:
    from tests.conftest import write_benchmark

    trees = {f"r{index:04d}": {"main.py": MAIN} for index in range(repos)}
    block = "".join(f"{name}:\n  kind: command\n  command: [\"sleep\", \"3600\"]\n" for name in agent_names(agents))
    return write_benchmark(root, trees, block)


def bare_import_rss() -> int:
    """RSS of an interpreter that imported the engine's modules and nothing else: the floor."""
    code = ("import _perfutil as pu, resenv.engine.cli.main, resenv.engine.run.scheduler; "
            "print(pu.rss_bytes())")
    out = subprocess.run([sys.executable, "-c", code], cwd=pu.PERF_DIR, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(pu.PERF_DIR)})
    return int(out.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job_counts(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return {}


def measure(root: Path, repos: int, agents: int, jobs: int, hold: float, tracemalloc_to: Path | None) -> dict[str, Any]:
    total = repos * agents
    work = root / f"n{total}"
    work.mkdir(parents=True)
    bench = make_benchmark(work, repos, agents)
    db, data = work / "store.db", work / "data"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RESENV_DB": str(db), "RESENV_DATA_DIR": str(data)}
    if tracemalloc_to is not None:
        env["PERF_TRACEMALLOC"] = str(tracemalloc_to)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "run", str(bench), "--jobs", str(jobs),
           "--display", "none", "--db", str(db), "--data-dir", str(data)]
    for name in agent_names(agents):
        cmd += ["--agent", name]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, int, str]] = []  # (t, rss, stage)
    hwm = 0
    stage = "startup"
    queued_since: float | None = None
    time_to_queued: float | None = None
    cancel_sent: float | None = None
    counts: dict[str, int] = {}
    last_count_check = 0.0
    dumped = False
    cpu_at_queued: float | None = None
    cpu_while_queued: float | None = None
    try:
        while proc.poll() is None:
            now = time.monotonic() - t0
            try:
                rss = pu.rss_bytes(proc.pid)
                hwm = max(hwm, pu.hwm_bytes(proc.pid))
            except (OSError, ValueError):
                break
            samples.append((now, rss, stage))
            if stage != "cancelling" and now - last_count_check >= 0.2:
                last_count_check = now
                counts = job_counts(db)
                if stage == "startup" and counts.get("running", 0) == min(jobs, total) and \
                        counts.get("queued", 0) == total - min(jobs, total):
                    stage, queued_since, time_to_queued = "queued", now, now
                    cpu_at_queued = cpu_seconds(proc.pid)
                elif stage == "queued" and queued_since is not None:
                    if tracemalloc_to is not None and not dumped and now - queued_since >= hold / 2:
                        os.kill(proc.pid, signal.SIGUSR1)
                        dumped = True
                    if now - queued_since >= hold:
                        if cpu_at_queued is not None:
                            cpu_while_queued = (cpu_seconds(proc.pid) - cpu_at_queued) / (now - queued_since)
                        from resenv.engine.store.db import StoreReader, insert_control

                        reader = StoreReader(db)
                        run_id = reader.resolve_run("latest")["id"]
                        reader.close()
                        insert_control(db, run_id, "cancel", origin="perf")
                        stage, cancel_sent = "cancelling", now
            if now > 110:
                raise TimeoutError(f"engine did not reach the queued state in time (jobs {counts})")
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = time.monotonic() - t0
    final = job_counts(db)
    queued_rss = [rss for _, rss, st in samples if st == "queued"]
    by_stage = {st: max((rss for _, rss, s in samples if s == st), default=0) for st in ("startup", "queued", "cancelling")}
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
    return {
        "jobs_total": total,
        "running_limit": jobs,
        "returncode": proc.returncode,
        "final_job_states": final,
        "time_to_queued_state_s": round(time_to_queued, 2) if time_to_queued is not None else None,
        "cancel_to_exit_s": round(ended - cancel_sent, 2) if cancel_sent is not None else None,
        "queued_rss_mb": pu.summary(queued_rss, 1 / MB, 1),
        "engine_cpu_percent_while_queued": round(cpu_while_queued * 100, 2) if cpu_while_queued is not None else None,
        "max_rss_mb_by_stage": {k: round(v / MB, 1) for k, v in by_stage.items()},
        "peak_rss_mb_vmhwm": round(hwm / MB, 1),
        "samples": len(samples),
    }


def show(r: dict[str, Any]) -> None:
    q = r["queued_rss_mb"]
    print(f"{r['jobs_total']:,} jobs ({r['running_limit']} running): queued state reached after"
          f" {r['time_to_queued_state_s']} s; RSS while queued median {q.get('median')} MB, max {q.get('max')} MB;"
          f" peak over the whole life (VmHWM) {r['peak_rss_mb_vmhwm']} MB;"
          f" engine CPU while queued {r['engine_cpu_percent_while_queued']}%")
    print(f"  max RSS by stage: {r['max_rss_mb_by_stage']}; cancel -> exit {r['cancel_to_exit_s']} s;"
          f" final job states {r['final_job_states']} (rc {r['returncode']})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=500)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=4, help="jobs running at once (the rest stay queued)")
    parser.add_argument("--hold", type=float, default=6.0, help="seconds to hold the queued state")
    parser.add_argument("--small", type=int, default=100, help="also measure a run of this many jobs (0: skip)")
    parser.add_argument("--tracemalloc", action="store_true", help="dump the child's top allocations")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="resenv-perf-memory-"))
    try:
        floor = bare_import_rss()
        print(f"bare interpreter + engine imports: {floor / MB:.1f} MB RSS")
        big = measure(root, args.repos, args.agents, args.jobs, args.hold, None)
        show(big)
        trace_file = None
        if args.tracemalloc:
            # A separate run: tracing itself costs RSS (and the snapshot even more), so the figures
            # above come from the untraced run and this one only yields the allocation table.
            trace_file = pu.RESULTS / f"{NAME}.tracemalloc.txt"
            pu.RESULTS.mkdir(parents=True, exist_ok=True)
            traced = measure(root / "traced", args.repos, args.agents, args.jobs, args.hold, trace_file)
            big["tracemalloc_run_queued_rss_mb"] = traced["queued_rss_mb"]
        small = None
        if args.small:
            agents = min(args.agents, args.small)
            small = measure(root, max(1, args.small // agents), agents, args.jobs, min(args.hold, 3.0), None)
            show(small)
            extra_jobs = big["jobs_total"] - small["jobs_total"]
            if extra_jobs > 0 and big["queued_rss_mb"].get("median") and small["queued_rss_mb"].get("median"):
                per_job_kb = (big["queued_rss_mb"]["median"] - small["queued_rss_mb"]["median"]) * 1024 / extra_jobs
                big["per_queued_job_kb"] = round(per_job_kb, 2)
                print(f"  => about {per_job_kb:.2f} KB of RSS per queued job (repo + job row + spec share)")
        peak = max(big["peak_rss_mb_vmhwm"], big["queued_rss_mb"].get("max", 0))
        ok = big["returncode"] == 0 and peak <= TARGET_MB and big["time_to_queued_state_s"] is not None
        print(f"\npeak RSS {peak} MB with {big['jobs_total']:,} jobs (target <= {TARGET_MB:g} MB) -> {pu.verdict(ok)}")
        if trace_file is not None and trace_file.exists():
            print(f"tracemalloc top allocations: {trace_file.relative_to(pu.REPO_ROOT)}")
        pu.write_result(NAME, {
            "target": {"rss_mb_max": TARGET_MB, "queued_jobs": 5000},
            "params": vars(args),
            "bare_import_rss_mb": round(floor / MB, 1),
            "peak_rss_mb": peak,
            "pass": ok,
            "run": big,
            "small_run": small,
        })
    finally:
        pu.clean_up(root, args.keep)


if __name__ == "__main__":
    main()
