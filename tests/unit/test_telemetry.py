"""GPU telemetry: the nvidia-smi stream parser on recorded H200 output, the NVML sampler on a fake
`pynvml` (this machine has no GPU), the process-to-job map, and the store sink (retention, stale)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

import pytest

from resenv.engine.store.db import StoreWriter
from resenv.engine.hosts.telemetry import (
    NO_DRIVER, NvmlSampler, ProcessMap, SmiStreamParser, TelemetrySink, parse_smi_line,
)

from ..fakes.nvml import FakeNVMLError, fake_pynvml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi"
H200_UUID = "GPU-68bd2f7f-8094-66bf-8521-2b6b0385931b"


def test_recorded_h200_stream_parses_every_row():
    raw = (FIXTURES / "h200-query-gpu-lms.csv").read_bytes()
    parser = SmiStreamParser("h200")
    samples = parser.feed(raw)
    assert len(samples) == raw.count(b"\n") == 6
    first = samples[0]
    assert (first.gpu, first.uuid, first.util_pct, first.mem_used_mib, first.mem_total_mib, first.temp_c) == (
        0, H200_UUID, 0.0, 0.0, 143771.0, 32.0)
    assert first.power_w == pytest.approx(78.83)
    assert parser.skipped == 0


def test_a_stream_cut_at_any_byte_never_yields_a_partial_row():
    raw = (FIXTURES / "h200-query-gpu-lms.csv").read_bytes()
    full = SmiStreamParser("h").feed(raw)
    for cut in range(len(raw) + 1):
        parser = SmiStreamParser("h")
        got = []
        for start in range(0, cut, 7):  # odd chunk sizes, as a channel delivers them
            got += parser.feed(raw[start:min(cut, start + 7)])
        dropped = parser.cut()
        complete = raw[:cut].count(b"\n")
        assert [(s.gpu, s.power_w) for s in got] == [(s.gpu, s.power_w) for s in full[:complete]], cut
        assert dropped == cut - (raw[:cut].rfind(b"\n") + 1)


def test_na_not_supported_mig_header_and_driver_failure_rows():
    parser = SmiStreamParser("h")
    samples = {s.gpu: s for s in parser.feed((FIXTURES / "variants-derived.csv").read_bytes())}
    assert parser.cut() > 0  # the last row was cut mid-line and is not parsed
    assert sorted(samples) == [0, 1, 2, 3, 4]  # header, MIG rows, the error text and the cut row skipped
    assert samples[1].util_pct is None and samples[1].power_w is None and samples[1].mem_used_mib == 0
    assert samples[2].util_pct == 97 and samples[2].power_w is None
    assert all(getattr(samples[3], f) is None for f in ("util_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w"))
    assert samples[4].power_w == 190.5
    assert parser.skipped == 4
    assert parser.errors and "couldn't communicate with the NVIDIA driver" in parser.errors[0]


def test_real_extra_fields_show_na_tokens_the_parser_treats_as_missing():
    row = (FIXTURES / "h200-query-gpu-extra.csv").read_text().strip()
    assert "[N/A]" in row and "[Requested functionality has been deprecated]" in row
    # a 7-field row built from those real tokens parses, with the tokens as None
    line = f"0, {H200_UUID}, [N/A], 616, 143771, [Requested functionality has been deprecated], 700.00"
    sample = parse_smi_line(line, "h")
    assert sample is not None and sample.util_pct is None and sample.temp_c is None and sample.power_w == 700.0


# ------------------------------------------------------------------------------------- fake NVML
class ListSink(TelemetrySink):
    def __init__(self) -> None:
        super().__init__(writer=None, run_id="r")
        self.states: list[tuple[str, str]] = []

    def set_state(self, host: str, state: str) -> None:
        self.states.append((host, state))
        self.host(host).state = state


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_nvml_sampler_reads_util_memory_v2_temperature_power_and_processes(tmp_path):
    proc = fake_proc(tmp_path, {4242: {"cgroup": "0::/system.slice/docker-" + "ab" * 32 + ".scope\n"}})
    pmap = ProcessMap(str(proc))
    pmap.containers["ab" * 32] = 7
    nvml = fake_pynvml(processes={1: [4242]})
    sink = ListSink()
    sampler = NvmlSampler("local", sink, gpus=[0, 1], interval_s=0.05, processes=pmap, nvml=nvml)
    sampler.start()
    wait_until(lambda: sink.host("local").samples >= 6)
    sampler.stop()
    assert nvml.calls["init"] == 1 and nvml.calls["shutdown"] == 1  # initialised once
    by_gpu = {s.gpu: s for s in sink._buffer}
    assert by_gpu[1].util_pct == 20 and by_gpu[1].mem_used_mib == 2048 and by_gpu[1].mem_total_mib == 80 * 1024
    assert by_gpu[1].temp_c == 41 and by_gpu[1].power_w == pytest.approx(250.501)
    processes = sink.host("local").processes
    assert [(p.gpu, p.pid, p.used_mib, p.job_id) for p in processes] == [(1, 4242, 512.0, 7)]
    assert ("local", "ok") in sink.states


def test_nvml_without_driver_is_a_state_not_a_crash():
    sink = ListSink()
    sampler = NvmlSampler("local", sink, nvml=fake_pynvml(init_error=FakeNVMLError("Driver Not Loaded")))
    sampler.start()
    sampler.stop()
    assert sink.states[-1][1].startswith(NO_DRIVER)
    assert sink._buffer == []


def test_nvml_field_not_supported_becomes_none():
    sink = ListSink()
    sampler = NvmlSampler("local", sink, gpus=[0], nvml=fake_pynvml(power_supported=False, gpus=1))
    samples = sampler.sample_once(sampler._nvml, {0: 0})
    assert samples[0].power_w is None and samples[0].util_pct == 10


def fake_proc(root: Path, processes: dict[int, dict[str, str]]) -> Path:
    proc = root / "proc"
    for pid, files in processes.items():
        d = proc / str(pid)
        d.mkdir(parents=True)
        (d / "cgroup").write_text(files.get("cgroup", "0::/user.slice\n"))
        (d / "stat").write_text(files.get("stat", f"{pid} (python3) S 1 {pid} {pid} 0"))
        if "cwd" in files:
            os.symlink(files["cwd"], d / "cwd")
    return proc


def test_process_map_by_container_cgroup_process_group_and_workdir(tmp_path):
    work = tmp_path / "jobs" / "x--a" / "attempt-1" / "work"
    (work / "repo").mkdir(parents=True)
    cid = "0123456789abcdef" * 4
    proc = fake_proc(tmp_path, {
        10: {"cgroup": f"0::/system.slice/docker-{cid}.scope\n"},  # cgroup v2, systemd driver
        11: {"cgroup": f"12:memory:/docker/{cid}\n"},  # cgroup v1, cgroupfs driver
        20: {"stat": "20 (torchrun x) S 1 5555 5555 0"},  # comm with a space; pgid 5555
        30: {"cwd": str(work / "repo")},
        40: {},
    })
    pmap = ProcessMap(str(proc))
    pmap.containers[cid] = 1
    pmap.groups[5555] = 2
    pmap.workdirs[str(work)] = 3
    assert [pmap.job_of(pid) for pid in (10, 11, 20, 30, 40, 99)] == [1, 1, 2, 3, None, None]


async def test_sink_writes_samples_keeps_bounded_retention_and_marks_stale(tmp_path):
    from resenv.engine.hosts.telemetry import GpuSample

    db = tmp_path / "t.db"
    writer = StoreWriter(db)
    writer.start()
    states = []
    sink = TelemetrySink(writer, "r", retention_s=100, stale_after_s=0.2, on_state=lambda h, s: states.append((h, s)))
    now = time.time()
    sink.add([GpuSample("h", 0, now - 500, 1, 2, 3, 4, 5), GpuSample("h", 0, now, 1, 2, 3, 4, 5)])
    sink.set_state("h", "ok")
    sink.flush()  # first flush prunes: the 500 s old row is past the 100 s retention
    await writer.flush()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*), MIN(ts) >= ? FROM gpu_samples", (now - 100,)).fetchone() == (1, 1)
    await asyncio.sleep(0.3)
    sink.flush()
    assert states[-1] == ("h", "stale")
    sink.add([GpuSample("h", 0, time.time())])
    sink.flush()
    assert states[-1] == ("h", "ok")
    await writer.close()
    conn.close()


def test_remote_process_rows_map_to_jobs_by_container_then_work_dir():
    from resenv.engine.hosts.telemetry import ProcessMap, parse_remote_processes

    ctr = "a" * 64
    processes = ProcessMap()
    processes.containers[ctr] = 7
    processes.workdirs["/data/runs/r/one--a/attempt-1/work"] = 3
    text = "\n".join([
        f"GPU-0|101|1024|{ctr}|/",                                   # in a job's container
        "GPU-1|102|[N/A]||/data/runs/r/one--a/attempt-1/work/repo",  # under a job's work dir
        "GPU-1|103|5||/home/someone|with|bars",                      # someone else's process
        "GPU-9|104|5||/",                                            # a GPU the stream never showed
        "GPU-0|not-a-pid|5||/",
        "GPU-0|105|5",                                               # cut short
    ])
    found = parse_remote_processes(text, "h", {"GPU-0": 0, "GPU-1": 1}, processes)
    assert [(p.gpu, p.pid, p.used_mib, p.job_id) for p in found] == [
        (0, 101, 1024.0, 7), (1, 102, None, 3), (1, 103, 5.0, None)]


def test_the_remote_process_rows_recorded_on_the_h200_parse_and_map_to_their_job():
    from resenv.engine.hosts.telemetry import ProcessMap, parse_remote_processes

    text = (Path(__file__).parents[1] / "fixtures" / "nvidia-smi" / "h200-compute-apps-with-facts.txt").read_text()
    header, smi_row, _, facts_row = text.splitlines()[:4]
    uuid, pid, mib = (part.strip() for part in smi_row.split(","))
    workdir = header.split("work dir ")[1]
    processes = ProcessMap()
    processes.workdirs[workdir] = 42
    found = parse_remote_processes(facts_row, "h200", {uuid: 0}, processes)
    assert [(p.gpu, p.pid, p.used_mib, p.job_id) for p in found] == [(0, int(pid), float(mib), 42)]
