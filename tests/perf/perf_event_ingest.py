"""Event ingest into the store, with readers tailing it.

Target (issue): >= 50,000 events/s sustained into the store WITH readers tailing.

Method: one `StoreWriter` (the engine's single writer task, its SQLite work in a worker thread) is
fed by PRODUCERS asyncio tasks in the same event loop, as the engine's output callbacks feed it:
each producer is one "attempt" emitting transcript-like events (~150 bytes of JSON: log, stream,
line_no, type, text) through `writer.event(..., attempt_id=p, seq=n)` in bursts (a 64 KiB output
chunk becomes a burst of lines), yielding to the loop between bursts. READERS separate processes
(multiprocessing, spawn) tail `events` by id through `StoreReader.tail_events`, as the dashboard does,
polling every --poll-s seconds when they are caught up and immediately when a page came back full.

Two phases, each --seconds long:
  * saturate: producers emit as fast as the loop lets them (they back off while the writer's queue
    holds more than --max-backlog events, so memory stays bounded): the writer's capacity;
  * paced: producers offer exactly --rate events/s (default 50,000): does the store keep up,
    and how far behind are the readers?

Figures: committed events/s per 1 s window (median, min; the first window is warm-up and dropped),
the writer's mean batch per transaction, the readers' lag in events (newest committed id minus the
reader's last id, sampled at every poll) and in ms (time seen minus the event's `ts`, i.e. from
`writer.event()` to a reader having it), the WAL size, and exactly-once: every reader must see every
id once, in order, and every (attempt_id, seq) once with no gap.

    .venv/bin/python tests/perf/perf_event_ingest.py
    .venv/bin/python tests/perf/perf_event_ingest.py --seconds 5 --readers 2 --rate 80000
"""

from __future__ import annotations

import argparse
from array import array
import asyncio
import multiprocessing as mp
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _perfutil as pu

from resenv.engine.store.db import StoreReader, StoreWriter
from resenv.engine.store.db import _encode as encode_event  # the very encoder writer.event() calls

NAME = "perf_event_ingest"
TARGET = 50_000
RUN_ID = "perf-ingest"

LINES = [
    "Collecting torch==2.3.1 (from -r requirements.txt (line 4))",
    "  Downloading torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl (779.1 MB)",
    "Successfully installed numpy-1.26.4 scipy-1.13.1 einops-0.8.0",
    "Running command: python -c 'import torch; print(torch.cuda.is_available())'",
    "ERROR: Could not find a version that satisfies the requirement flash-attn==2.5.8",
    "I will now create a virtual environment in /work/env and install the pinned dependencies.",
    "Traceback (most recent call last): File \"main.py\", line 12, in <module>",
]


def payload(line_no: int, rng: random.Random) -> dict[str, Any]:
    """A transcript event as `run_command` emits it for an agent's output line (~150 bytes JSON)."""
    text = rng.choice(LINES)
    return {"log": "agent", "stream": "stdout", "line_no": line_no, "type": "output", "text": text}


# ----------------------------------------------------------------------------- readers (processes)


def reader_main(index: int, db: str, poll_s: float, page: int, stop, started, boundaries, out) -> None:
    """Tail events by id until `stop` is set and nothing newer is left; report what was seen.

    `boundaries` (shared doubles) holds the wall-clock start of each phase, so lags can be split by
    phase afterwards: an event belongs to the phase its `ts` falls in, a poll to the phase it ran in."""
    reader = StoreReader(Path(db))
    last_id = 0
    count = duplicates = gaps = out_of_order_seq = 0
    next_seq: dict[int, int] = {}
    lag_ms = array("d")
    event_ts = array("d")
    lag_events = array("d")
    poll_ts = array("d")
    polls = full_pages = 0
    query_s: list[float] = []
    started.set()
    while True:
        stopping = stop.is_set()
        newest = reader.conn.execute("SELECT MAX(id) FROM events").fetchone()[0] or 0
        lag_events.append(max(0, newest - last_id))
        poll_ts.append(time.time())
        t0 = time.perf_counter()
        rows = reader.tail_events(RUN_ID, last_id, page)
        query_s.append(time.perf_counter() - t0)
        seen_at = time.time()
        polls += 1
        for row in rows:
            rid = row["id"]
            if rid <= last_id:
                duplicates += 1
                continue
            if rid != last_id + 1:
                gaps += rid - last_id - 1
            last_id = rid
            count += 1
            attempt, seq = row["attempt_id"], row["seq"]
            if attempt is not None:
                expected = next_seq.get(attempt, 1)
                if seq != expected:
                    out_of_order_seq += 1
                next_seq[attempt] = seq + 1
            lag_ms.append((seen_at - row["ts"]) * 1000)
            event_ts.append(row["ts"])
        if len(rows) == page:
            full_pages += 1
            continue
        if stopping and not rows:
            break
        time.sleep(poll_s)
    reader.close()
    starts = [b for b in boundaries if b > 0]

    def phase_of(ts: float) -> int:
        return sum(1 for b in starts[1:] if ts >= b)

    per_phase: list[dict[str, Any]] = []
    for number in range(len(starts)):
        ms = [v for v, ts in zip(lag_ms, event_ts) if phase_of(ts) == number]
        evs = [v for v, ts in zip(lag_events, poll_ts) if phase_of(ts) == number]
        per_phase.append({"lag_ms": pu.summary(ms, 1, 1), "lag_events": pu.summary(evs, 1, 0)})
    out.put({
        "phases": per_phase,
        "reader": index, "seen": count, "last_id": last_id, "duplicates": duplicates, "gaps": gaps,
        "seq_errors": out_of_order_seq, "per_attempt_last_seq": {k: v - 1 for k, v in next_seq.items()},
        "polls": polls, "full_pages": full_pages,
        "lag_ms": pu.summary(list(lag_ms), 1, 1), "lag_events": pu.summary(list(lag_events), 1, 0),
        "query_ms": pu.summary(query_s, 1000, 2),
    })


# ----------------------------------------------------------------------------- producers (engine loop)


async def produce(writer: StoreWriter, producer: int, stop: asyncio.Event, state: dict[str, Any],
                  burst: int, max_backlog: int, pacer: "Pacer | None") -> None:
    rng = random.Random(producer)
    seq = state["seq"].get(producer, 0)
    while not stop.is_set():
        if pacer is not None:
            n = await pacer.take(burst)
            if n == 0:
                continue
        else:
            n = burst
            if writer.queue.qsize() > max_backlog:
                await asyncio.sleep(0.001)
                continue
        for _ in range(n):
            seq += 1
            writer.event(RUN_ID, "transcript", payload(seq, rng), job_id=producer, attempt_id=producer, seq=seq)
        state["produced"] += n
        await asyncio.sleep(0)
    state["seq"][producer] = seq


class Pacer:
    """Hands out event quotas so that all producers together offer `rate` events/s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.perf_counter()
        self.granted = 0

    async def take(self, want: int) -> int:
        due = int((time.perf_counter() - self.start) * self.rate) - self.granted
        if due <= 0:
            await asyncio.sleep(0.002)
            return 0
        n = min(want, due)
        self.granted += n
        return n


async def monitor(writer: StoreWriter, stop: asyncio.Event, windows: list[dict[str, float]]) -> None:
    last_t, last_n, last_tx = time.perf_counter(), writer.events_written, writer.transactions
    while not stop.is_set():
        await asyncio.sleep(1.0)
        now, n, tx = time.perf_counter(), writer.events_written, writer.transactions
        windows.append({
            "seconds": now - last_t, "events": n - last_n, "rate": (n - last_n) / (now - last_t),
            "transactions": tx - last_tx, "backlog": writer.queue.qsize(),
        })
        last_t, last_n, last_tx = now, n, tx


async def phase(writer: StoreWriter, name: str, args: argparse.Namespace, state: dict[str, Any],
                rate: float | None) -> dict[str, Any]:
    state["boundaries"][state["phase_no"]] = time.time()
    state["phase_no"] += 1
    stop = asyncio.Event()
    windows: list[dict[str, float]] = []
    pacer = Pacer(rate) if rate else None
    produced0, written0, tx0 = state["produced"], writer.events_written, writer.transactions
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(produce(writer, p, stop, state, args.burst, args.max_backlog, pacer))
             for p in range(1, args.producers + 1)]
    mon = asyncio.create_task(monitor(writer, stop, windows))
    await asyncio.sleep(args.seconds)
    stop.set()
    await asyncio.gather(*tasks)
    produce_s = time.perf_counter() - t0
    backlog_at_stop = writer.queue.qsize()
    await writer.flush()
    drain_s = time.perf_counter() - t0 - produce_s
    await mon
    steady = windows[1:] if len(windows) > 2 else windows
    rates = [w["rate"] for w in steady]
    produced = state["produced"] - produced0
    written = writer.events_written - written0
    tx = writer.transactions - tx0
    return {
        "phase": name,
        "offered_rate": rate or "max",
        "produced": produced,
        "committed": written,
        "produce_s": round(produce_s, 3),
        "drain_s_after_stop": round(drain_s, 3),
        "backlog_at_stop": backlog_at_stop,
        "offered_events_per_s": round(produced / produce_s),
        "committed_events_per_s_overall": round(written / (produce_s + drain_s)),
        "committed_events_per_s_1s_windows": {
            "median": round(statistics.median(rates)) if rates else None,
            "min": round(min(rates)) if rates else None,
            "max": round(max(rates)) if rates else None,
            "windows": [round(r) for r in rates],
        },
        "backlog_per_window": [int(w["backlog"]) for w in steady],
        "mean_batch_events": round(written / tx, 1) if tx else None,
        "transactions": tx,
    }


async def ingest(db: Path, args: argparse.Namespace, boundaries) -> dict[str, Any]:
    writer = StoreWriter(db)
    writer.start()
    state: dict[str, Any] = {"produced": 0, "seq": {}, "boundaries": boundaries, "phase_no": 0}
    results = []
    try:
        results.append(await phase(writer, "saturate", args, state, None))
        if args.rate:
            results.append(await phase(writer, "paced", args, state, float(args.rate)))
    finally:
        await writer.close()
    return {"phases": results, "produced_total": state["produced"], "last_seq": state["seq"]}


async def breakdown(db: Path, count: int, rounds: int = 5) -> dict[str, Any]:
    """Single-threaded cost per event of each side, on a separate DB without readers.

    The whole, `writer.event()` (encode + queue put) with the writer not running, and its encoding
    part, the store's own encoder on the same payloads with each result kept as the queue keeps it,
    are timed in alternating rounds under the same conditions and each taken at its fastest round
    (the least disturbed by the machine), so the part cannot exceed the whole by a change of
    conditions; the remainder (tuple, clock read, queue put) is the whole minus the part. Then the
    writer drains the last round's queue alone (executemany + commit)."""
    rng = random.Random(0)
    t0 = time.perf_counter()
    payloads = [payload(n, rng) for n in range(1, count + 1)]
    build_s = time.perf_counter() - t0
    encode_rounds: list[float] = []
    event_rounds: list[float] = []
    writer = StoreWriter(db)
    for _ in range(rounds):
        kept: list[str] = []
        t0 = time.perf_counter()
        for data in payloads:
            kept.append(encode_event(data))
        encode_rounds.append(time.perf_counter() - t0)
        del kept
        writer.queue = asyncio.Queue()
        writer.backlog_bytes = 0
        t0 = time.perf_counter()
        for seq, data in enumerate(payloads, 1):
            writer.event(RUN_ID, "transcript", data, job_id=1, attempt_id=1, seq=seq)
        event_rounds.append(time.perf_counter() - t0)
    enqueue_s, encode_s = min(event_rounds), min(encode_rounds)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    writer.start()
    await writer.flush()
    drain_s = time.perf_counter() - t0
    drain_cpu = time.process_time() - cpu0
    transactions = writer.transactions
    await writer.close()
    us = 1e6 / count
    return {
        "events": count,
        "rounds": rounds,
        "build_payload_us": round(build_s * us, 2),
        "writer_event_us": round(enqueue_s * us, 2),
        "encode_us": round(encode_s * us, 2),
        "queue_put_and_rest_us": round((enqueue_s - encode_s) * us, 2),
        "parts_within_whole": encode_s <= enqueue_s,
        "writer_event_rounds_us": [round(r * us, 2) for r in event_rounds],
        "encode_rounds_us": [round(r * us, 2) for r in encode_rounds],
        "writer_drain_us": round(drain_s * us, 2),
        "writer_drain_cpu_us": round(drain_cpu * us, 2),
        "writer_alone_events_per_s": round(count / drain_s),
        "engine_side_events_per_s_one_core": round(count / (enqueue_s + drain_s)),
        "transactions": transactions,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--producers", type=int, default=8, help="producer tasks (attempts) in the engine loop")
    parser.add_argument("--burst", type=int, default=200, help="events per producer burst before yielding")
    parser.add_argument("--max-backlog", type=int, default=50_000, help="saturate phase: queue bound")
    parser.add_argument("--rate", type=int, default=TARGET, help="paced phase offered rate (0: skip it)")
    parser.add_argument("--readers", type=int, default=2, help="reader processes tailing events")
    parser.add_argument("--poll-s", type=float, default=0.1, help="reader poll interval when caught up (10 Hz)")
    parser.add_argument("--page", type=int, default=10_000, help="tail_events limit per query")
    parser.add_argument("--breakdown", type=int, default=200_000,
                        help="events for the per-event cost breakdown at the end (0: skip)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="resenv-perf-ingest-"))
    db = root / "store.db"
    try:
        # Create the schema and the run row before the readers open the DB read-only.
        async def setup() -> None:
            writer = StoreWriter(db)
            writer.start()
            writer.execute(
                "INSERT INTO runs (id, name, benchmark_path, base_dir, suite, spec_json, options_json, data_dir,"
                " state, created_at) VALUES (?, 'perf', '-', '-', 's', '{}', '{}', '-', 'running', ?)",
                (RUN_ID, time.time()))
            await writer.close()
        asyncio.run(setup())

        ctx = mp.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        boundaries = ctx.Array("d", 2)
        readers, ready = [], []
        for index in range(args.readers):
            started = ctx.Event()
            proc = ctx.Process(target=reader_main, args=(index, str(db), args.poll_s, args.page, stop, started, boundaries, out))
            proc.start()
            readers.append(proc)
            ready.append(started)
        for started in ready:
            started.wait(30)

        print(f"{args.producers} producers, {args.readers} reader processes polling at {1 / args.poll_s:g} Hz,"
              f" {args.seconds:g} s per phase; db {db}")
        result = asyncio.run(ingest(db, args, boundaries))
        stop.set()
        reports = [out.get(timeout=120) for _ in readers]
        for proc in readers:
            proc.join(30)

        reader = StoreReader(db)
        total_rows = reader.conn.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (RUN_ID,)).fetchone()[0]
        sample = reader.conn.execute("SELECT AVG(LENGTH(data)) FROM events").fetchone()[0]
        reader.close()
        wal = db.with_name(db.name + "-wal")
        result["events_in_db"] = total_rows
        result["mean_payload_bytes"] = round(sample or 0, 1)
        result["db_bytes"] = db.stat().st_size
        result["wal_bytes_at_end"] = wal.stat().st_size if wal.exists() else 0
        expected_seq = {int(k): v for k, v in result["last_seq"].items()}
        for report in reports:
            report["exactly_once"] = (
                report["seen"] == total_rows == result["produced_total"] and report["duplicates"] == 0
                and report["gaps"] == 0 and report["seq_errors"] == 0
                and {int(k): v for k, v in report.pop("per_attempt_last_seq").items()} == expected_seq
            )
        result["readers"] = reports

        for number, ph in enumerate(result["phases"]):
            ph["readers"] = [r["phases"][number] for r in reports]
            w = ph["committed_events_per_s_1s_windows"]
            print(f"[{ph['phase']}] offered {ph['offered_events_per_s']:,}/s, committed median {w['median']:,}/s"
                  f" (min {w['min']:,}, max {w['max']:,}) over 1 s windows; {ph['committed']:,} events in"
                  f" {ph['transactions']} transactions (mean batch {ph['mean_batch_events']}); backlog at stop"
                  f" {ph['backlog_at_stop']:,}, drained in {ph['drain_s_after_stop']} s")
            for index, r in enumerate(ph["readers"]):
                print(f"    reader {index} lag: median {r['lag_ms'].get('median')} ms / {r['lag_events'].get('median')}"
                      f" events, p99 {r['lag_ms'].get('p99')} ms, max {r['lag_ms'].get('max')} ms /"
                      f" {r['lag_events'].get('max')} events")
        print(f"payload mean {result['mean_payload_bytes']} bytes; db {result['db_bytes'] / 1e6:.1f} MB,"
              f" WAL at end {result['wal_bytes_at_end'] / 1e6:.1f} MB")
        for r in reports:
            print(f"reader {r['reader']}: saw {r['seen']:,}/{total_rows:,} exactly once: {r['exactly_once']}"
                  f" (dups {r['duplicates']}, gaps {r['gaps']}, seq errors {r['seq_errors']});"
                  f" {r['polls']} polls ({r['full_pages']} full pages), tail_events query median"
                  f" {r['query_ms']['median']} ms, p90 {r['query_ms']['p90']} ms")
        sustained = min(ph["committed_events_per_s_1s_windows"]["median"] or 0 for ph in result["phases"]
                        if ph["phase"] == "saturate")
        # Kept up: everything offered was committed by the end of the phase plus 1 s of drain,
        # and the queue never held more than 1 s of offered load.
        paced_ok = all(
            ph["drain_s_after_stop"] <= 1.0 and max(ph["backlog_per_window"] or [0]) <= ph["offered_events_per_s"]
            for ph in result["phases"] if ph["phase"] == "paced")
        once = all(r["exactly_once"] for r in reports)
        ok = sustained >= TARGET and paced_ok and once
        print(f"\nsustained capacity {sustained:,} events/s (target >= {TARGET:,}) -> {pu.verdict(sustained >= TARGET)};"
              f" paced phase kept up: {paced_ok}; readers exactly once: {once} -> overall {pu.verdict(ok)}")
        result.pop("last_seq")
        if args.breakdown:
            b = asyncio.run(breakdown(root / "breakdown.db", args.breakdown))
            result["breakdown"] = b
            print(f"per-event cost, one thread, no readers, fastest of {b['rounds']} alternating rounds:"
                  f" writer.event() {b['writer_event_us']} us = encode {b['encode_us']} us + queue put and rest"
                  f" {b['queue_put_and_rest_us']} us (parts within the whole: {b['parts_within_whole']});"
                  f" writer drain {b['writer_drain_us']} us"
                  f" ({b['writer_alone_events_per_s']:,}/s alone) -> engine side on one core"
                  f" {b['engine_side_events_per_s_one_core']:,} events/s")
        pu.write_result(NAME, {
            "target": {"events_per_s_min": TARGET},
            "params": vars(args),
            "sustained_events_per_s": sustained,
            "pass": ok,
            **result,
        })
    finally:
        pu.clean_up(root, args.keep)


if __name__ == "__main__":
    main()
