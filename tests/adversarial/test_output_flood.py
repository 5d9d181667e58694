"""Output floods against the real engine (`resenv run` in a child process).

An agent or an interpreter that prints without end must cost the engine bounded memory and the store
bounded space: the first bytes of a job's output become events, the last bytes of each command's
streams follow when it ends, a counter says what was left out, and the raw log keeps every byte.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from ..conftest import RESENV, resenv, write_benchmark
from ..conftest import rows as db_rows

MAIN = "print('ok')\n"
KIB = 1024
MB = 1024 * 1024


def run_engine(tmp_path: Path, env: dict, *args: str, timeout: float = 240) -> tuple[int, int, str]:
    """Run the real engine; returns (exit status, its peak RSS in bytes from /proc VmHWM, its output)."""
    out_path = tmp_path / "engine.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([*RESENV, *args], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        waited = 0.0
        while True:
            try:
                proc.wait(timeout=0.05)  # sampling the child's memory until it exits
                break
            except subprocess.TimeoutExpired:
                waited += 0.05
                peak = max(peak, _hwm(proc.pid))
                if waited > timeout:
                    proc.kill()
                    proc.wait()
                    raise AssertionError(f"the engine did not finish in {timeout:g} s:\n{out_path.read_text()[-3000:]}")
    return proc.returncode, peak, out_path.read_text()


def _hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def latest_attempt(db: Path) -> dict:
    return db_rows(db, "SELECT * FROM attempts ORDER BY id DESC LIMIT 1")[0]


def log_events(db: Path, attempt_id: int, log: str) -> list[dict]:
    return [json.loads(row["data"]) | {"_size": row["size"]} for row in db_rows(
        db, "SELECT data, length(data) AS size FROM events WHERE attempt_id = ? AND kind IN ('output', 'transcript')"
        " AND json_extract(data, '$.log') = ? ORDER BY seq", (attempt_id, log))]


def omitted_events(db: Path, attempt_id: int) -> list[dict]:
    return [json.loads(row["data"]) for row in db_rows(
        db, "SELECT data FROM events WHERE attempt_id = ? AND kind = 'omitted' ORDER BY seq", (attempt_id,))]


def test_a_flooding_agent_is_stored_as_head_tail_and_a_counter(tmp_path, cli_env) -> None:
    lines = 200_000
    bench = write_benchmark(
        tmp_path, {"r": {"main.py": MAIN}},
        f"a: {{kind: command, command: 'yes x | head -n {lines}; echo the-end; echo on-stderr >&2'}}\n",
        defaults=f"  output: {{head_bytes: {64 * KIB}, tail_bytes: {8 * KIB}}}\n")
    done = resenv("run", str(bench), "--tiers", "none", "--display", "none", env=cli_env, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    attempt = latest_attempt(db)
    assert attempt["state"] == "done"
    raw = Path(attempt["workdir"]).parent / "logs" / "agent.stdout"
    assert raw.read_bytes().count(b"\n") == lines + 1  # the raw log keeps every line

    stored = [e for e in log_events(db, attempt["id"], "agent") if e["stream"] == "stdout"]
    numbers = [e["line_no"] for e in stored]
    assert len(numbers) == len(set(numbers)) and numbers == sorted(numbers)
    # the head: the first lines, in order; the tail: the last lines, ending with the last one
    assert numbers[0] == 1 and stored[-1]["text"] == "the-end" and numbers[-1] == lines + 1
    head = [n for i, n in enumerate(numbers) if n == i + 1]
    assert 100 < len(head) < lines / 10
    assert sum(e["_size"] for e in stored) <= 64 * KIB + 8 * KIB + 2 * KIB
    [counter] = [o for o in omitted_events(db, attempt["id"]) if o["stream"] == "stdout" and o["final"]]
    assert counter["log"] == "agent" and counter["lines"] == lines + 1 - len(stored)
    assert counter["bytes"] == 2 * counter["lines"]  # "x\n" each
    assert counter["first_line_no"] == len(head) + 1 and counter["last_line_no"] == numbers[len(head)] - 1
    # stderr was small: all of it is stored, nothing counted as left out
    assert [e["text"] for e in log_events(db, attempt["id"], "agent") if e["stream"] == "stderr"] == ["on-stderr"]
    assert not [o for o in omitted_events(db, attempt["id"]) if o["stream"] == "stderr"]

    shown = resenv("show", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"{counter['lines']:,} lines" in shown.stdout and "only in the raw log" in shown.stdout


def test_a_50_mb_line_is_stored_as_a_capped_event(tmp_path, cli_env) -> None:
    bench = write_benchmark(
        tmp_path, {"r": {"main.py": MAIN}},
        "a: {kind: command, command: \"head -c 50000000 /dev/zero | tr '\\\\0' x; echo; echo after\"}\n")
    done = resenv("run", str(bench), "--tiers", "none", "--display", "none", env=cli_env, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    attempt = latest_attempt(db)
    raw = Path(attempt["workdir"]).parent / "logs" / "agent.stdout"
    assert raw.stat().st_size == 50_000_000 + len("\nafter\n")
    stored = log_events(db, attempt["id"], "agent")
    assert [e["line_no"] for e in stored] == [1, 2] and stored[1]["text"] == "after"
    long = stored[0]
    assert set(long["text"]) == {"x"} and 1000 <= len(long["text"]) <= 64 * KIB
    assert long.get("truncated") is True and long.get("nbytes") == 50_000_000
    biggest = db_rows(db, "SELECT MAX(length(data)) AS n FROM events")[0]["n"]
    assert biggest < 64 * KIB
    assert db.stat().st_size < 5 * MB


def test_usage_is_counted_for_transcript_lines_that_are_not_stored(tmp_path, cli_env) -> None:
    """The budget limits what is stored, never what is parsed: tokens on lines left out still count."""
    script = tmp_path / "usage-flood.py"
    script.write_text(textwrap.dedent("""\
        import json
        for i in range(20000):
            print(json.dumps({"type": "usage", "input": 10, "output": 1, "model": "m"}))
        print(json.dumps({"type": "completion", "status": "success"}))
    """))
    bench = write_benchmark(
        tmp_path, {"r": {"main.py": MAIN}},
        f"a: {{kind: command, output: jsonl, command: ['python3', '{script}']}}\n",
        defaults=f"  output: {{head_bytes: {16 * KIB}, tail_bytes: {4 * KIB}}}\n")
    done = resenv("run", str(bench), "--tiers", "none", "--display", "none", env=cli_env, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(cli_env["RESENV_DB"])
    attempt = latest_attempt(db)
    [usage] = db_rows(db, "SELECT * FROM usage WHERE attempt_id = ?", (attempt["id"],))
    assert (usage["input_tokens"], usage["output_tokens"]) == (200_000, 20_000)
    stored = log_events(db, attempt["id"], "agent")
    assert len(stored) < 1000 and stored[-1]["type"] == "completion"
    [counter] = [o for o in omitted_events(db, attempt["id"]) if o["final"]]
    assert counter["lines"] == 20_001 - len(stored)


FLOOD_INTERPRETER = """\
#!/bin/sh
# answers every question with 300 MB on stdout
head -c 300000000 /dev/zero
"""


def test_an_interpreter_flooding_stdout_does_not_grow_engine_memory(tmp_path, cli_env) -> None:
    """The reported interpreter floods stdout whenever it runs (C0's interpreter check, the interpreter
    probe): the engine reads a capped head and tail of it, never the whole."""
    flood = tmp_path / "flood-python"
    flood.write_text(FLOOD_INTERPRETER)
    flood.chmod(0o755)
    writer = tmp_path / "write-report.sh"
    # The agent installs it in its env (a sandbox sees nothing of the host's tmp dirs but what its
    # command line names).
    writer.write_text('mkdir -p "$2/bin" && cp "$3" "$2/bin/python" && '
                      "printf '{\"python_path\": \"%s\"}' \"$2/bin/python\" > \"$1\"\n")
    bench = write_benchmark(tmp_path, {"r": {"main.py": MAIN}},
                            f"a: {{kind: command, command: ['sh', '{writer}', '{{report}}', '{{env}}', '{flood}']}}\n")
    code, peak, output = run_engine(tmp_path, cli_env, "run", str(bench), "--tiers", "C0", "--display", "none")
    assert code == 0, output
    assert peak < 250 * MB, f"engine peak RSS {peak / MB:.0f} MB"
    db = Path(cli_env["RESENV_DB"])
    attempt = latest_attempt(db)
    report = json.loads((Path(attempt["workdir"]) / "report.json").read_text())
    assert report == {"python_path": str(Path(attempt["workdir"]) / "env" / "bin" / "python")}
    [c0] = db_rows(db, "SELECT status, category, evidence_json FROM tier_results WHERE attempt_id = ?", (attempt["id"],))
    assert c0["status"] == "fail"
    assert len(c0["evidence_json"]) < 64 * KIB
    # In the sandbox it runs C0's import-map recorder (its 300 MB go to the raw log only, within the
    # output budget); it records nothing, so C0 judges a replay interpreter that says so.
    assert "without recording an import map" in json.loads(c0["evidence_json"])["log_tail"]
