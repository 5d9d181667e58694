"""Dashboard performance: the real `resenv-tui` process in a pseudo-terminal (120×40).

Phase 1, live: a run of 2,000 jobs whose store is written by a separate writer process (the
engine's own StoreWriter) with a transcript growing at 1,000 lines/s on the job the dashboard has
open, plus job churn (a job finishes and another starts every 0.25 s, with their tier, phase and
state events), GPU samples for 8 GPUs at 1 Hz and engine heartbeats. Measured:
  * key press -> repaint latency: the time from writing a key to the pty until the dashboard has
    written the first frame after it received that key (the app logs its key receptions and frame
    writes with CLOCK_MONOTONIC when RESENV_TUI_PERF_LOG is set); j/k alternately every 0.25 s,
    in the job detail (transcript streaming) and in the overview (2,000 rows churning);
  * CPU of the dashboard process (utime+stime from /proc over the window, % of one core);
  * RSS of the dashboard process (VmRSS sampled at 5 Hz; max) and its peak (VmHWM);
  * transcript lag: lines the dashboard has shown vs lines written.
Phase 2, finished: opening a finished run of 10,000 jobs (60,000 tier results), 5 times: from exec
of `resenv-tui` to the first frame that shows the whole jobs table (median of 5), with the CPU the
dashboard spent by then and the load average each open ran under.

Targets: latency median <= 100 ms, CPU <= 50 % of one core, RSS <= 300 MB, open <= 1 s.

    .venv/bin/python tests/perf/perf_tui.py [--seconds 20] [--jobs 2000] [--big 10000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import platform
import pty
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perfutil import REPO_ROOT, hwm_bytes, rss_bytes, summary, verdict, write_result  # noqa: E402

TIERS = ("C0", "C1", "C2", "C3", "C4", "C5")
WATCHED_REPO = "repo-00042"
SIZE = (120, 40)


# -- stores -----------------------------------------------------------------------------------------
def build_store(db: Path, jobs: int, *, finished: bool, engine_pid: int | None = None) -> tuple[str, int, int]:
    """A run of `jobs` jobs (agents a0..a3); returns (run_id, watched job id, its attempt id)."""
    from resenv.engine.store.db import open_for_writing

    conn = open_for_writing(db)
    now = time.time()
    run_id = "perf-finished" if finished else "perf-live"
    rng = random.Random(7)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir, state,"
        " created_at, started_at, finished_at, engine_pid, engine_host, heartbeat_at)"
        " VALUES (?, ?, 'b.yaml', '/', 'perf', '{}', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, f"perf × {jobs} jobs", json.dumps({"agents": ["a0", "a1", "a2", "a3"], "hosts": ["gpu"],
                                                      "tiers": list(TIERS)}),
         str(db.parent / "data"), "finished" if finished else "running", now - 4000, now - 3900,
         now - 10 if finished else None, engine_pid, platform.node(), None if finished else now))
    gpus = [{"index": index, "name": "NVIDIA H200"} for index in range(8)]
    conn.execute("INSERT INTO hosts VALUES (?, 'gpu', 'local', 'up', ?, ?)",
                 (run_id, json.dumps({"kind": "local", "cpus": 128, "slots": 64, "gpus": gpus}), now))
    watched = attempt_watched = 0
    job_rows, attempt_rows = [], []
    for number in range(jobs):
        repo, agent = f"repo-{number // 4:05d}", f"a{number % 4}"
        state = "done" if finished or number % 5 < 2 else ("running" if number % 5 == 2 else "queued")
        if (repo, agent) == (WATCHED_REPO, "a0"):
            state = "running"
        job_rows.append((number + 1, run_id, f"{repo}/{agent}", "perf", repo, agent, 0, state,
                         0 if state == "queued" else 1, None if state == "queued" else "gpu",
                         now - 4000, None if state == "queued" else now - 3000 + number,
                         now - 100 if state == "done" else None))
        if state != "queued":
            attempt_rows.append((number + 1, run_id, number + 1, 1, "running" if state == "running" else "done",
                                 "agent" if state == "running" else None, "gpu", "", str(db.parent / "w" / str(number)),
                                 now - 3000 + number))
        if (repo, agent) == (WATCHED_REPO, "a0"):
            watched = attempt_watched = number + 1
    conn.executemany(
        "INSERT INTO jobs (id, run_id, key, suite, repo_id, agent, gpus_needed, state, attempts, host, created_at,"
        " started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", job_rows)
    conn.executemany(
        "INSERT INTO attempts (id, run_id, job_id, number, state, phase, host, gpus, workdir, started_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", attempt_rows)
    results = []
    for row in job_rows:
        if row[7] != "done":
            continue
        for tier in TIERS:
            status = rng.choice(("pass", "pass", "pass", "fail", "skip"))
            evidence = {"command": ["python", "main.py"], "exit_code": 0 if status == "pass" else 1,
                        "duration_s": 1.2, "log_tail": "ok\n" * 3}
            results.append((run_id, row[0], row[0], tier, status, "runtime" if status == "fail" else None,
                            json.dumps(evidence), now - 200))
    conn.executemany("INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, category, evidence_json,"
                     " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", results)
    conn.execute("COMMIT")
    conn.close()
    return run_id, watched, attempt_watched


# -- the writer process (the engine's StoreWriter) ----------------------------------------------------
async def writer_main(db: Path, run_id: str, watched: int, attempt: int, rate: float, seconds: float) -> None:
    from resenv.engine.store.db import StoreWriter

    writer = StoreWriter(db)
    writer.start()
    conn = writer.conn
    running = [row[0] for row in conn.execute("SELECT id FROM jobs WHERE run_id = ? AND state = 'running' AND id != ?",
                                              (run_id, watched))]
    queued = [row[0] for row in conn.execute("SELECT id FROM jobs WHERE run_id = ? AND state = 'queued'", (run_id,))]
    seq = 0
    start = time.monotonic()
    written = 0
    next_churn = next_gpu = next_beat = start
    rng = random.Random(11)
    status_file = Path(str(db) + ".written")
    while time.monotonic() - start < seconds:
        now_m = time.monotonic()
        due = int((now_m - start) * rate)
        while written < due:
            written += 1
            seq += 1
            writer.event(run_id, "transcript", {"log": "agent", "stream": "stdout", "line_no": seq, "type": "output",
                                                "text": f"pip: collecting package-{written} (streamed line {written})"},
                         job_id=watched, attempt_id=attempt, seq=seq)
        if now_m >= next_churn and running and queued:  # a job finishes, another starts
            next_churn += 0.25
            done = running.pop(rng.randrange(len(running)))
            for tier in TIERS:
                status = rng.choice(("pass", "fail", "skip"))
                writer.execute("INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, evidence_json,"
                               " created_at) VALUES (?, ?, ?, ?, ?, '{}', ?)", (run_id, done, done, tier, status, time.time()))
                writer.event(run_id, "tier", {"tier": tier, "status": status, "category": None}, job_id=done,
                             attempt_id=done)
            writer.update("jobs", done, {"state": "done", "finished_at": time.time()})
            writer.event(run_id, "job_state", {"state": "done"}, job_id=done)
            new = queued.pop(0)
            running.append(new)
            writer.update("jobs", new, {"state": "running", "attempts": 1, "host": "gpu", "started_at": time.time()})
            writer.event(run_id, "job_state", {"state": "running", "attempt": 1}, job_id=new, attempt_id=None)
            writer.event(run_id, "phase", {"phase": "agent", "status": "started"}, job_id=new, attempt_id=None)
            writer.execute("INSERT INTO usage (run_id, job_id, attempt_id, ts, input_tokens, output_tokens, cost_usd)"
                           " VALUES (?, ?, ?, ?, 5000, 500, 0.02)", (run_id, new, new, time.time()))
        if now_m >= next_gpu:
            next_gpu += 1.0
            for gpu in range(8):
                writer.execute("INSERT INTO gpu_samples (host, gpu, ts, util_pct, mem_used_mib, mem_total_mib, power_w,"
                               " temp_c) VALUES ('gpu', ?, ?, ?, 40000, 143771, 400, 60)",
                               (gpu, time.time(), rng.uniform(0, 100)))
        if now_m >= next_beat:
            next_beat += 2.0
            writer.update("runs", run_id, {"heartbeat_at": time.time()})
        publish_count(status_file, written)
        await asyncio.sleep(0.01)
    await writer.close()
    publish_count(status_file, written)


def publish_count(path: Path, count: int) -> None:
    """Replace `path` with `count` atomically (a temp file renamed over it): a reader sees the old
    complete value or the new one, never the empty or partial file that truncate-then-write exposes."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(str(count))
    os.replace(temp, path)


def read_count(path: Path) -> int:
    """The count `publish_count` last wrote; raises if the file is missing or not a whole number, so a
    failed read can never pass for a count of 0."""
    text = path.read_text()
    if not text.isdigit():
        raise RuntimeError(f"{path} holds {text!r}, not a line count")
    return int(text)


# -- the dashboard in a pty -----------------------------------------------------------------------------
class Dashboard:
    def __init__(self, db: Path, run_id: str, log: Path) -> None:
        self.log = log
        binary = shutil.which("resenv-tui", path=str(Path(sys.executable).parent))
        argv = [binary] if binary else [sys.executable, "-m", "resenv.tui"]
        self.argv = [*argv, "--db", str(db), run_id]
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", RESENV_TUI_PERF_LOG=str(log))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.bytes = 0
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.bytes += len(data)

    def press(self, key: bytes) -> float:
        sent = time.monotonic()
        os.write(self.master, key)
        return sent

    def events(self) -> list[tuple[float, str, str]]:
        out = []
        if not self.log.exists():
            return out
        for line in self.log.read_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3:
                out.append((float(parts[0]), parts[1], parts[2]))
        return out

    def wait_for(self, predicate, timeout: float = 60.0) -> tuple[float, str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            time.sleep(0.02)
        tail = self.log.read_text()[-2000:] if self.log.exists() else "(no log)"
        raise RuntimeError(f"dashboard did not reach the expected state (exit {self.proc.poll()}); log tail: {tail}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.write(self.master, b"q")
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(5)
        os.close(self.master)


def latencies(dash: Dashboard, sent: list[float]) -> list[float]:
    """Per key press: first frame written after the dashboard received that key, minus the send time."""
    events = dash.events()
    keys = [ts for ts, kind, _ in events if kind == "key"]
    paints = [ts for ts, kind, _ in events if kind == "paint"]
    out = []
    for t_send in sent:
        received = next((ts for ts in keys if ts >= t_send - 0.001), None)
        if received is None:
            continue
        painted = next((ts for ts in paints if ts > received), None)
        if painted is not None:
            out.append(painted - t_send)
    return out


def press_series(dash: Dashboard, seconds: float, every: float = 0.25) -> tuple[list[float], list[float]]:
    sent, rss = [], []
    end = time.monotonic() + seconds
    toggle = False
    while time.monotonic() < end:
        sent.append(dash.press(b"j" if not toggle else b"k"))
        toggle = not toggle
        rss.append(rss_bytes(dash.proc.pid))
        time.sleep(every)
    time.sleep(0.5)
    return sent, rss


def live_phase(root: Path, jobs: int, rate: float, seconds: float) -> dict:
    db = root / "live.db"
    # the writer's pid is the engine pid the run claims: the dashboard sees a live engine
    run_id, watched, attempt = build_store(db, jobs, finished=False, engine_pid=None)
    writer = subprocess.Popen([sys.executable, __file__, "--writer", str(db), run_id, str(watched), str(attempt),
                               str(rate), str(seconds * 3 + 60)], cwd=REPO_ROOT)
    from resenv.engine.store.db import open_for_writing

    conn = open_for_writing(db)
    conn.execute("UPDATE runs SET engine_pid = ? WHERE id = ?", (writer.pid, run_id))
    conn.close()
    log = root / "live.perf.log"
    dash = Dashboard(db, run_id, log)
    try:
        opened = dash.wait_for(lambda e: e[1] == "paint" and e[2] == str(jobs))[0] - dash.started
        # open the streaming job: filter to it, then enter
        time.sleep(1.0)
        for key in (b"/", *(bytes([c]) for c in f"{WATCHED_REPO}/a0".encode()), b"\r"):
            dash.press(key)
            time.sleep(0.02)
        time.sleep(0.5)
        dash.press(b"\r")
        dash.wait_for(lambda e: e[1] == "transcript" and int(e[2]) > 0)
        time.sleep(2.0)
        cpu0, wall0 = dash.cpu_seconds(), time.monotonic()
        sent, rss = press_series(dash, seconds)
        cpu_detail = (dash.cpu_seconds() - cpu0) / (time.monotonic() - wall0)
        detail_latency = latencies(dash, sent)
        shown = max((int(e[2]) for e in dash.events() if e[1] == "transcript"), default=0)
        written = read_count(Path(str(db) + ".written"))
        # back to the overview (2,000 rows churning), clear the filter, and press there
        for key in (b"\x1b", b"\x1b"):
            dash.press(key)
            time.sleep(0.5)
        cpu1, wall1 = dash.cpu_seconds(), time.monotonic()
        sent2, rss2 = press_series(dash, seconds / 2)
        cpu_overview = (dash.cpu_seconds() - cpu1) / (time.monotonic() - wall1)
        overview_latency = latencies(dash, sent2)
        hwm = hwm_bytes(dash.proc.pid)
    finally:
        dash.close()
        writer.terminate()
        writer.wait(30)
    return {
        "jobs": jobs, "transcript_lines_per_s": rate, "window_s": seconds, "open_live_s": round(opened, 3),
        "latency_job_detail_ms": summary(detail_latency, 1000, 1),
        "latency_overview_ms": summary(overview_latency, 1000, 1),
        "cpu_job_detail_pct_of_core": round(100 * cpu_detail, 1),
        "cpu_overview_pct_of_core": round(100 * cpu_overview, 1),
        "rss_max_mb": round(max(rss + rss2) / 2**20, 1), "rss_hwm_mb": round(hwm / 2**20, 1),
        "transcript_written": written, "transcript_shown": shown,
        "transcript_lag_lines": max(0, written - shown) if shown else None,
        "transcript_lag_s": round(max(0, written - shown) / rate, 2) if shown else None,
    }


def finished_phase(root: Path, jobs: int, repeats: int = 5) -> dict:
    """Open the finished run `repeats` times. Besides the wall time, the CPU the dashboard process
    spent by then (read as soon as the full frame is seen, so an upper bound): on a loaded machine
    the wall time mostly measures the other processes, the CPU time does not."""
    db = root / "big.db"
    started = time.monotonic()
    run_id, _, _ = build_store(db, jobs, finished=True)
    built = time.monotonic() - started
    opens, loads, cpus, load_avg = [], [], [], []
    for index in range(repeats):
        log = root / f"big.{index}.perf.log"
        load_avg.append(os.getloadavg()[0])
        dash = Dashboard(db, run_id, log)
        try:
            painted = dash.wait_for(lambda e: e[1] == "paint" and e[2] == str(jobs))[0]
            cpus.append(dash.cpu_seconds())
            opens.append(painted - dash.started)
            loaded = [float(e[2]) for e in dash.events() if e[1] == "loaded"]
            if loaded:
                loads.append(loaded[0])
        finally:
            dash.close()
    return {"jobs": jobs, "tier_results": jobs * len(TIERS), "store_build_s": round(built, 2),
            "open_s": summary(opens, 1, 3), "open_cpu_s": summary(cpus, 1, 3), "feed_load_s": summary(loads, 1, 3),
            "load_average_1min": [round(value, 2) for value in load_avg]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--big", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--writer", nargs=6, metavar=("DB", "RUN", "JOB", "ATTEMPT", "RATE", "SECONDS"))
    args = parser.parse_args()
    if args.writer:
        db, run_id, job, attempt, rate, seconds = args.writer
        asyncio.run(writer_main(Path(db), run_id, int(job), int(attempt), float(rate), float(seconds)))
        return
    root = Path(tempfile.mkdtemp(prefix="resenv-perf-tui-"))
    try:
        live = live_phase(root, args.jobs, args.rate, args.seconds)
        big = finished_phase(root, args.big)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    checks = {
        "latency_median_le_100ms": max(live["latency_job_detail_ms"].get("median", 1e9),
                                       live["latency_overview_ms"].get("median", 1e9)) <= 100,
        "cpu_le_50pct_core": max(live["cpu_job_detail_pct_of_core"], live["cpu_overview_pct_of_core"]) <= 50,
        "rss_le_300mb": live["rss_hwm_mb"] <= 300,
        "open_10k_le_1s": big["open_s"].get("median", 1e9) <= 1.0,
    }
    print(f"live run: {live['jobs']} jobs, transcript {live['transcript_lines_per_s']:.0f} lines/s, "
          f"{live['window_s']:.0f} s windows")
    print(f"  key -> repaint, job detail (transcript streaming): {live['latency_job_detail_ms']} ms")
    print(f"  key -> repaint, overview (2,000 rows churning):     {live['latency_overview_ms']} ms")
    print(f"  CPU: job detail {live['cpu_job_detail_pct_of_core']} % of a core, overview "
          f"{live['cpu_overview_pct_of_core']} %")
    print(f"  RSS: max {live['rss_max_mb']} MB, peak (VmHWM) {live['rss_hwm_mb']} MB")
    print(f"  transcript: {live['transcript_written']} lines written, {live['transcript_shown']} shown "
          f"(lag {live['transcript_lag_lines']} lines ≈ {live['transcript_lag_s']} s)")
    print(f"  open (live, {live['jobs']} jobs): {live['open_live_s']} s")
    print(f"finished run: {big['jobs']} jobs, {big['tier_results']} tier results: open (exec -> full table) "
          f"{big['open_s']} s; CPU of the dashboard by then {big['open_cpu_s']} s; feed load {big['feed_load_s']} s;"
          f" 1-min load average at each open {big['load_average_1min']} on {os.cpu_count()} CPUs")
    for name, ok in checks.items():
        print(f"  {verdict(ok)} {name}")
    write_result("tui", {"parameters": vars(args) | {"size": SIZE}, "live": live, "finished": big,
                         "checks": checks, "pass": all(checks.values())})


if __name__ == "__main__":
    main()
