"""A second process that appends transcript events to one attempt, as an engine's writer would.

    python -m tests.tui.writer_process DB RUN JOB ATTEMPT COUNT RATE_PER_S [PREFIX]

Events are written in small transactions (one per 10 ms), numbered after the attempt's last `seq`,
each a `transcript` output line "PREFIX N".
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from resenv.engine.store.db import EVENT_SQL, open_for_writing


def write(db: Path, run_id: str, job_id: int, attempt_id: int, count: int, rate: float, prefix: str = "line") -> None:
    conn = open_for_writing(db)
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE attempt_id = ?", (attempt_id,)).fetchone()[0]
    start = time.monotonic()
    written = 0
    while written < count:
        due = min(count, int((time.monotonic() - start) * rate) + 1)
        rows = []
        while written < due:
            written += 1
            seq += 1
            data = {"log": "agent", "stream": "stdout", "line_no": seq, "type": "output", "text": f"{prefix} {written}"}
            rows.append((run_id, job_id, attempt_id, seq, time.time(), "transcript", json.dumps(data)))
        if rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(EVENT_SQL, rows)
            conn.execute("COMMIT")
        time.sleep(0.01)
    conn.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    write(Path(args[0]), args[1], int(args[2]), int(args[3]), int(args[4]), float(args[5]),
          args[6] if len(args) > 6 else "line")
