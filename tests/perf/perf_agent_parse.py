"""Agent stream parsing speed, and the engine's memory while it ingests a 100 MB transcript.

Targets: parsing >= 20,000 stream lines/s per agent; a 100 MB transcript ingested with
the engine's RSS <= 250 MB.

1. **Parse throughput**, per agent kind (claude-code, codex, command jsonl): the lines of the
   recorded real streams (tests/fixtures/streams/claude-setup.jsonl, codex-setup.jsonl; a synthetic
   resenv-schema jsonl for the command agent), repeated with fresh message ids up to --lines lines,
   go through exactly what the engine does per line: `AgentSession.parse` (full-line restore check,
   the adapter's parser, the usage ledger, budget checks) and `EventSink.emit` (redaction with one
   registered secret, the store writer's `json.dumps`); only the SQLite commit is left out (it has
   its own figure, perf_event_ingest.py). Figure: lines/s, best of --repeat.
2. **100 MB ingest**: the real `resenv run` (a child process, `--tiers none`) of one job whose
   claude-code agent is a stand-in CLI printing a 100 MB Claude stream (the recorded lines cycled
   with unique message ids, plus some 200 kB lines over the sandbox's 16 KiB line cap, then a
   `result`). The parent samples the engine's VmRSS at 20 Hz; figures: peak RSS (and VmHWM), wall
   time, end-to-end lines/s, and a check that every line reached the store or is counted as left
   out of it by the output budget (defaults.output: a head and a tail are stored, every line parsed).

    .venv/bin/python tests/perf/perf_agent_parse.py [--lines 200000] [--mb 100]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _perfutil as pu

NAME = "perf_agent_parse"
TARGET_LINES_S = 20_000
TARGET_RSS_MB = 250.0
MB = 1024 * 1024
STREAMS = pu.REPO_ROOT / "tests" / "fixtures" / "streams"


# ----------------------------------------------------------------------------- 1. throughput


def stream_lines(kind: str, count: int) -> list[str]:
    if kind == "command":
        base = [
            json.dumps({"type": "message", "text": "Installing the requirements of the repository now."}),
            json.dumps({"type": "tool_call", "id": "t1", "name": "shell", "command": "pip install -r requirements.txt"}),
            json.dumps({"type": "tool_result", "id": "t1", "exit_code": 0, "output": "Successfully installed x-1.0\n" * 5}),
            json.dumps({"type": "usage", "input": 1200, "cached_input": 300, "output": 80}),
            "plain text progress line 42%",
        ]
    else:
        base = (STREAMS / f"{'claude' if kind == 'claude-code' else 'codex'}-setup.jsonl").read_text().splitlines()
        base = [line for line in base if '"type":"result"' not in line and '"turn.completed"' not in line]
    out = []
    for n in range(count):
        line = base[n % len(base)]
        if kind == "claude-code":  # every cycle a new API message: usage accounting does real work
            line = line.replace('"id":"msg_', f'"id":"msg_{n // len(base)}_')
        out.append(line)
    return out


class NullWriter:
    """The store writer's per-event work (json.dumps) without SQLite."""

    path = None

    def __init__(self) -> None:
        self.events = 0

    def event(self, run_id: str, kind: str, data: dict, **_: Any) -> None:
        json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        self.events += 1

    def execute(self, sql: str, params: Any = None) -> None:
        pass


def session_for(kind: str, tmp: Path):
    from resenv.engine.agents import adapter_for
    from resenv.engine.agents.session import AgentSession
    from resenv.engine.attempt import EventSink
    from resenv.engine.spec import loads_benchmark

    agent = {"claude-code": "{kind: claude-code, model: claude-sonnet-4-5}", "codex": "{kind: codex, model: gpt-5-codex}",
             "command": "{kind: command, command: 'true', output: jsonl}"}[kind]
    bench = loads_benchmark(textwrap.dedent(f"""\
        version: 1
        defaults:
          suite: s
          agent: a
          budgets: {{wall_clock_s: 600, tokens: 100000000000, dollars: 1000000.0}}
          prices:
            claude-sonnet-4-5: {{input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0, date: 2025-09-29}}
            gpt-5-codex: {{input: 1.25, cached_input: 0.125, cache_write: 0.0, output: 10.0, date: 2025-09-23}}
        agents: {{a: {agent}}}
        suites: {{s: {{repos: [{{id: r, source: {{path: .}}, entrypoints: {{cpu: {{command: 'true'}}}},
                                not_applicable: {{single_gpu: x, multi_gpu: y}}}}]}}}}
    """), tmp)
    writer = NullWriter()
    sink = EventSink(writer, "run", 1, 1)  # type: ignore[arg-type]
    attempt = SimpleNamespace(
        sink=sink, ctx=SimpleNamespace(bench=bench, run_id="run", writer=writer), job={"agent": "a", "id": 1},
        attempt_id=1, base=tmp, sandbox=None, log_prefix="", timeouts=bench.defaults.timeouts,
    )
    adapter = adapter_for("a", bench.agent("a"))
    return AgentSession(attempt, adapter), sink, writer  # type: ignore[arg-type]


async def parse_rate(kind: str, lines: list[str], tmp: Path) -> dict[str, Any]:
    from resenv.engine.sandbox.base import OutputLine

    session, sink, writer = session_for(kind, tmp)
    items = [OutputLine("stdout", n, text, len(text.encode()), False) for n, text in enumerate(lines, 1)]
    started = time.perf_counter()
    for line in items:
        base = {"log": "agent", "stream": "stdout", "line_no": line.line_no}
        for event in session.parse(line):
            sink.emit("transcript", {**base, **event})
    seconds = time.perf_counter() - started
    totals = session.ledger.totals()
    return {"lines": len(items), "seconds": round(seconds, 3), "lines_per_s": round(len(items) / seconds),
            "events": writer.events, "tokens_counted": totals["tokens"]}


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    from resenv.engine import secrets

    secrets.register({"ANTHROPIC_API_KEY": "sk-ant-perf-secret-value-0123456789"})
    results = {}
    with tempfile.TemporaryDirectory(prefix="resenv-perf-parse-") as tmp:
        for kind in ("claude-code", "codex", "command"):
            lines = stream_lines(kind, args.lines)
            best = None
            for _ in range(args.repeat):
                result = asyncio.run(parse_rate(kind, lines, Path(tmp)))
                if best is None or result["lines_per_s"] > best["lines_per_s"]:
                    best = result
            results[kind] = best
            print(f"  {kind:12s} {best['lines_per_s']:>9,} lines/s  ({best['lines']:,} lines, "
                  f"{best['events']:,} events, {best['tokens_counted']:,} tokens counted)  "
                  f"{pu.verdict(best['lines_per_s'] >= TARGET_LINES_S)}")
    return results


# ----------------------------------------------------------------------------- 2. 100 MB ingest


def write_transcript(path: Path, megabytes: int) -> int:
    """A Claude stream of about `megabytes` MB: the recorded lines with fresh ids, some 200 kB lines,
    then a result. Returns its line count."""
    lines = (STREAMS / "claude-setup.jsonl").read_text().splitlines()
    body, result = lines[:-1], lines[-1]
    big = json.dumps({"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_big", "type": "tool_result", "content": "y" * 200_000, "is_error": False}]},
        "tool_use_result": {"stdout": "y" * 200_000, "stderr": "", "interrupted": False}})
    target = megabytes * MB
    written = count = 0
    with path.open("w") as handle:
        for cycle in itertools.count():
            for line in body:
                text = line.replace('"id":"msg_', f'"id":"msg_{cycle}_')
                handle.write(text + "\n")
                written += len(text) + 1
                count += 1
            if cycle % 50 == 0:
                handle.write(big + "\n")
                written += len(big) + 1
                count += 1
            if written >= target:
                break
        handle.write(result + "\n")
    return count + 1


def ingest(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="resenv-perf-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        transcript = tmp / "transcript.jsonl"
        nlines = write_transcript(transcript, args.mb)
        size = transcript.stat().st_size
        cli = tmp / "fake-claude"
        cli.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo '0 (perf)'; exit 0; fi\n"
                       f"cat > /dev/null\nexec cat {transcript}\n")
        cli.chmod(0o755)
        (tmp / "repo").mkdir()
        (tmp / "repo" / "main.py").write_text("print('ok')\n")
        bench = tmp / "benchmark.yaml"
        bench.write_text(textwrap.dedent(f"""\
            version: 1
            defaults:
              suite: s
              agent: c
              timeouts: {{agent: 1200}}
              budgets: {{wall_clock_s: 1200}}
              prices:
                claude-sonnet-4-5: {{input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0, date: 2025-09-29}}
            hosts: {{local: {{kind: local, slots: 1, gpus: 0}}}}
            agents:
              c: {{kind: claude-code, executable: {cli}, model: claude-sonnet-4-5, completion_grace_s: 60}}
            suites: {{s: {{repos: [{{id: r, source: {{path: repo}}, entrypoints: {{cpu: {{command: 'true'}}}},
                                    not_applicable: {{single_gpu: x, multi_gpu: y}}}}]}}}}
        """))
        env = {**os.environ, "RESENV_DB": str(tmp / "store.db"), "RESENV_DATA_DIR": str(tmp / "data")}
        if pu.SOURCE_TREE:
            env["RESENV_PERF_SRC"] = pu.SOURCE_TREE
        argv = [sys.executable, "-m", "resenv.engine.cli.main", "run", str(bench), "--tiers", "none", "--display", "none"]
        started = time.monotonic()
        proc = subprocess.Popen(argv, env=env, cwd=tmp)
        samples = []
        hwm = 0
        while proc.poll() is None:
            try:
                samples.append(pu.rss_bytes(proc.pid))
                hwm = max(hwm, pu.hwm_bytes(proc.pid))
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        wall = time.monotonic() - started
        conn = sqlite3.connect(tmp / "store.db")
        stored = conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'transcript'").fetchone()[0]
        # the output budget (defaults.output) stores a head and a tail; the rest is counted, and parsed
        stored_lines = conn.execute("SELECT COUNT(DISTINCT json_extract(data, '$.line_no')) FROM events"
                                    " WHERE kind = 'transcript' AND json_extract(data, '$.stream') = 'stdout'"
                                    ).fetchone()[0]
        omitted = conn.execute("SELECT COALESCE(SUM(json_extract(data, '$.lines')), 0) FROM events WHERE"
                               " kind = 'omitted' AND json_extract(data, '$.final')"
                               " AND json_extract(data, '$.stream') = 'stdout'").fetchone()[0]
        unknown = conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'transcript'"
                               " AND json_extract(data, '$.type') = 'unknown'").fetchone()[0]
        usage = conn.execute("SELECT SUM(input_tokens + cached_input_tokens + cache_write_tokens + output_tokens)"
                             " FROM usage").fetchone()[0]
        conn.close()
    peak = max(samples) if samples else 0
    result = {"transcript_bytes": size, "lines": nlines, "stored_transcript_events": stored,
              "stored_lines": stored_lines, "omitted_lines": omitted, "unknown_events": unknown,
              "usage_tokens": usage, "returncode": proc.returncode, "wall_s": round(wall, 2),
              "lines_per_s_end_to_end": round(nlines / wall), "rss_peak_mb": round(peak / MB, 1),
              "rss_median_mb": round(sorted(samples)[len(samples) // 2] / MB, 1) if samples else None,
              "vmhwm_mb": round(hwm / MB, 1), "samples": len(samples)}
    ok = proc.returncode == 0 and stored_lines + omitted == nlines and peak / MB <= TARGET_RSS_MB
    print(f"  {size / MB:.0f} MB, {nlines:,} lines in {wall:.1f} s ({result['lines_per_s_end_to_end']:,} lines/s end to "
          f"end); stored {stored:,} transcript events of {stored_lines:,} lines ({unknown} unknown), "
          f"{omitted:,} lines only in the raw log; {usage or 0:,} tokens counted; engine RSS peak {result['rss_peak_mb']} MB "
          f"(VmHWM {result['vmhwm_mb']} MB)  {pu.verdict(ok)}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--skip-ingest", action="store_true")
    args = parser.parse_args()
    print(f"parse throughput (target >= {TARGET_LINES_S:,} lines/s per agent):")
    rates = throughput(args)
    result: dict[str, Any] = {"params": vars(args), "targets": {"lines_per_s": TARGET_LINES_S, "rss_mb": TARGET_RSS_MB},
                              "throughput": rates}
    ok = all(r["lines_per_s"] >= TARGET_LINES_S for r in rates.values())
    if not args.skip_ingest:
        print(f"ingest of a {args.mb} MB transcript (target engine RSS <= {TARGET_RSS_MB:.0f} MB):")
        result["ingest"] = ingest(args)
        ok = ok and result["ingest"]["rss_peak_mb"] <= TARGET_RSS_MB and \
            result["ingest"]["stored_lines"] + result["ingest"]["omitted_lines"] == result["ingest"]["lines"]
    result["pass"] = ok
    pu.write_result(NAME, result)
    print(pu.verdict(ok))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
