"""An agent that floods stdout for its whole timeout: the engine's memory and the store stay bounded.

Target (the output budget, engine/output.py): engine RSS < 300 MB while a `yes x`-style agent prints
for its whole agent timeout, and the store < 2x the bytes the budget lets one job keep
(``defaults.output``: head_bytes + tail_bytes, 4 MiB + 256 KiB by default).

The real `resenv run` (a child process, `--tiers none`, one job on the local host, process sandbox)
of one job whose agent is ``yes x`` (``command: "yes x"``) until its agent timeout fires
(``timeouts.agent`` = ``budgets.wall_clock_s`` = --seconds). The parent samples the engine's VmRSS
from /proc at 20 Hz. Figures: peak and median RSS (and per quarter of the run: the memory must be
flat once the head is stored), VmHWM, the engine's CPU seconds, the DB size (main file, WAL and
shared memory), the raw log's size and lines, what the store kept (events, their JSON bytes) and the
omitted counter, and the rates (raw MB/s, lines/s the engine read).

The default agent timeout (``defaults.timeouts.agent``) is 3600 s, far over this script's ~2 minute
limit, so --seconds defaults to 90 s. How it scales to the whole default timeout: the RSS is flat
after the first seconds (compare the quarters), the DB is fixed by the budget whatever the duration,
and the raw log grows linearly at the printed MB/s (the script prints its size extrapolated to
3600 s); `--seconds 3600` measures it for real.

    .venv/bin/python tests/perf/perf_output_flood.py [--seconds 90] [--head-bytes N] [--tail-bytes N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import _perfutil as pu

NAME = "perf_output_flood"
TARGET_RSS_MB = 300.0
TARGET_DB_RATIO = 2.0
DEFAULT_AGENT_TIMEOUT_S = 3600
HEAD_BYTES = 4 * 2**20  # engine/output.py's defaults (defaults.output)
TAIL_BYTES = 256 * 2**10
MB = 1024 * 1024


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


SECRET = "sk-perf-flood-secret-0123456789abcdef"


def write_benchmark(root: Path, seconds: float, head: int | None, tail: int | None, secret: bool = False) -> Path:
    (root / "repo").mkdir()
    (root / "repo" / "main.py").write_text("print('ok')\n")
    output = ""
    if head is not None or tail is not None:
        fields = [f"head_bytes: {head}" if head is not None else "", f"tail_bytes: {tail}" if tail is not None else ""]
        output = f"  output: {{{', '.join(f for f in fields if f)}}}\n"
    bench = root / "benchmark.yaml"
    bench.write_text(textwrap.dedent(f"""\
        version: 1
        defaults:
          suite: s
          agent: flood
          timeouts: {{agent: {seconds}}}
          budgets: {{wall_clock_s: {seconds}}}
        """) + output + textwrap.dedent("""\
        hosts: {local: {kind: local, slots: 1, gpus: 0}}
        agents:
          flood: {kind: command, command: "yes x"FROM}
        suites: {s: {repos: [{id: r, source: {path: repo}, entrypoints: {cpu: {command: 'true'}},
                                not_applicable: {single_gpu: x, multi_gpu: y}}]}}
        """).replace("FROM", ", env_from: [RESENV_PERF_SECRET]" if secret else ""))
    return bench


def quarters(samples: list[tuple[float, int]], start: float, end: float) -> list[float | None]:
    """Median RSS (MB) in each quarter of [start, end]."""
    out = []
    span = (end - start) / 4 or 1.0
    for index in range(4):
        low, high = start + index * span, start + (index + 1) * span
        values = [rss for when, rss in samples if low <= when < high]
        out.append(round(statistics.median(values) / MB, 1) if values else None)
    return out


def flood(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="resenv-perf-flood-"))
    try:
        bench = write_benchmark(root, args.seconds, args.head_bytes, args.tail_bytes, args.secret)
        db = root / "store.db"
        env = {**os.environ, "RESENV_DB": str(db), "RESENV_DATA_DIR": str(root / "data"), "RESENV_PERF_SECRET": SECRET}
        if pu.SOURCE_TREE:  # the child engine imports the measured tree too (the shim _perfutil made)
            env["RESENV_PERF_SRC"] = pu.SOURCE_TREE
            env["PYTHONPATH"] = os.pathsep.join(p for p in (sys.path[0], env.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--tiers", "none", "--display", "none"]
        started = time.monotonic()
        with open(root / "engine.out", "w") as out:
            proc = subprocess.Popen(argv, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT)
            samples: list[tuple[float, int]] = []
            hwm, cpu = 0, None
            while proc.poll() is None:
                try:
                    samples.append((time.monotonic(), pu.rss_bytes(proc.pid)))
                    hwm = max(hwm, pu.hwm_bytes(proc.pid))
                    cpu = cpu_seconds(proc.pid) or cpu
                except (OSError, ValueError, IndexError):
                    pass
                time.sleep(0.05)
        wall = time.monotonic() - started
        conn = sqlite3.connect(db)
        try:
            conn.row_factory = sqlite3.Row
            attempt = dict(conn.execute("SELECT * FROM attempts ORDER BY id DESC LIMIT 1").fetchone())
            agent_s = conn.execute("SELECT finished_at - started_at FROM phases WHERE attempt_id = ? AND name = 'agent'",
                                   (attempt["id"],)).fetchone()[0]
            stored = conn.execute(
                "SELECT COUNT(*) AS n, COALESCE(SUM(length(data)), 0) AS bytes FROM events WHERE kind IN ('output', 'transcript')"
            ).fetchone()
            counters = [json.loads(row["data"]) for row in conn.execute(
                "SELECT data FROM events WHERE kind = 'omitted' AND json_extract(data, '$.final')")]
            events_total = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            finished = conn.execute("SELECT data FROM events WHERE kind = 'agent_finished'").fetchone()
        finally:
            conn.close()
        # the DB as it sits on disk after the run (the engine checkpoints on exit; count the WAL too)
        db_bytes = sum(path.stat().st_size for path in root.glob("store.db*"))
        raw = Path(attempt["workdir"]).parent / "logs" / "agent.stdout"
        raw_bytes = raw.stat().st_size
        raw_lines = raw_bytes // 2  # "x\n"
        shown = subprocess.run([sys.executable, "-m", "resenv.engine.cli.main", "show"], env=env, cwd=root,
                               capture_output=True, text=True, timeout=60).stdout
    finally:
        pu.clean_up(root, args.keep)
    head = args.head_bytes if args.head_bytes is not None else HEAD_BYTES
    tail = args.tail_bytes if args.tail_bytes is not None else TAIL_BYTES
    capped = head + tail
    rss = [value for _, value in samples]
    flood_start = samples[0][0] if samples else started
    flood_end = flood_start + (agent_s or args.seconds)
    omitted_lines = sum(c["lines"] for c in counters)
    omitted_bytes = sum(c["bytes"] for c in counters)
    shown_line = next((line.strip() for line in shown.splitlines() if "only in the raw log" in line), None)
    return {
        "returncode": proc.returncode, "state": attempt["state"], "wall_s": round(wall, 1),
        "agent_s": round(agent_s or 0, 1), "agent_finished": json.loads(finished["data"]) if finished else None,
        "rss_peak_mb": round(max(rss) / MB, 1) if rss else None,
        "rss_median_mb": round(statistics.median(rss) / MB, 1) if rss else None,
        "rss_quarters_mb": quarters(samples, flood_start, flood_end), "vmhwm_mb": round(hwm / MB, 1),
        "samples": len(samples), "engine_cpu_s": cpu,
        "db_bytes": db_bytes, "capped_bytes": capped, "db_ratio": round(db_bytes / capped, 3),
        "raw_log_bytes": raw_bytes, "raw_log_lines": raw_lines,
        "raw_mb_per_s": round(raw_bytes / MB / (agent_s or args.seconds), 2),
        "lines_per_s": round(raw_lines / (agent_s or args.seconds)),
        "raw_log_mb_at_default_timeout": round(raw_bytes / MB / (agent_s or args.seconds) * DEFAULT_AGENT_TIMEOUT_S),
        "stored_line_events": stored["n"], "stored_line_json_bytes": stored["bytes"], "events_total": events_total,
        "omitted_lines": omitted_lines, "omitted_bytes": omitted_bytes, "show": shown_line,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0,
                        help=f"the agent timeout of the flooding job (default 90; defaults.timeouts.agent is "
                             f"{DEFAULT_AGENT_TIMEOUT_S})")
    parser.add_argument("--head-bytes", type=int, default=None, help="defaults.output.head_bytes (default: the engine's)")
    parser.add_argument("--tail-bytes", type=int, default=None, help="defaults.output.tail_bytes (default: the engine's)")
    parser.add_argument("--secret", action="store_true",
                        help="give the agent a secret (env_from), so every byte goes through the streaming redactor")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    print(f"one job whose agent runs `yes x` for its {args.seconds:g} s agent timeout "
          f"(target: engine RSS < {TARGET_RSS_MB:.0f} MB, DB < {TARGET_DB_RATIO:g}x the capped bytes):")
    result = flood(args)
    ok = (result["returncode"] == 0 and result["state"] == "done" and result["rss_peak_mb"] is not None
          and result["rss_peak_mb"] < TARGET_RSS_MB and result["db_ratio"] < TARGET_DB_RATIO
          and result["omitted_lines"] > 0 and result["stored_line_events"] > 0)
    print(f"  agent ran {result['agent_s']} s (wall {result['wall_s']} s); engine CPU {result['engine_cpu_s']} s")
    print(f"  engine RSS peak {result['rss_peak_mb']} MB, median {result['rss_median_mb']} MB, per quarter "
          f"{result['rss_quarters_mb']} MB, VmHWM {result['vmhwm_mb']} MB ({result['samples']} samples at 20 Hz)")
    print(f"  raw log {result['raw_log_bytes'] / MB:.1f} MB, {result['raw_log_lines']:,} lines "
          f"({result['raw_mb_per_s']} MB/s, {result['lines_per_s']:,} lines/s read by the engine; "
          f"~{result['raw_log_mb_at_default_timeout']:,} MB at the default {DEFAULT_AGENT_TIMEOUT_S} s agent timeout)")
    print(f"  store {result['db_bytes'] / MB:.2f} MB = {result['db_ratio']}x the capped {result['capped_bytes'] / MB:.2f} MB; "
          f"{result['stored_line_events']:,} line events ({result['stored_line_json_bytes'] / MB:.2f} MB of JSON), "
          f"{result['events_total']:,} events in all")
    print(f"  left out: {result['omitted_lines']:,} lines ({result['omitted_bytes'] / MB:.1f} MB); "
          f"resenv show: {result['show']}")
    pu.write_result(NAME, {"params": vars(args), "targets": {"rss_mb": TARGET_RSS_MB, "db_ratio": TARGET_DB_RATIO},
                           "flood": result, "pass": ok})
    print(pu.verdict(ok))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
