"""Run on a GPU machine (the `run` device tool): the NVML sampler against the real driver, with a
torch process holding GPU memory in a job-like work dir, mapped back to its job by the ProcessMap.

    python3 tests/gpu/nvml_on_device.py OUT_DIR      (needs pynvml and torch; read-only on the GPU)
"""
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

here = Path(__file__).resolve().parent.parent.parent
spec = importlib.util.spec_from_file_location("telemetry", here / "engine" / "hosts" / "telemetry.py")
telemetry = importlib.util.module_from_spec(spec)
sys.modules["telemetry"] = telemetry
spec.loader.exec_module(telemetry)

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
work = Path("/tmp/resenv-nvml/jobs/demo--a/attempt-1/work")
work.mkdir(parents=True, exist_ok=True)
holder = subprocess.Popen(
    [sys.executable, "-c", "import torch, time; x = torch.ones(256, 1024, 1024, device='cuda'); "
     "print('holding', flush=True); [torch.mm(x[0], x[1]) for _ in range(2000)]; time.sleep(6)"],
    cwd=work, stdout=subprocess.PIPE, text=True, start_new_session=True)
assert holder.stdout.readline().strip() == "holding"


class Sink(telemetry.TelemetrySink):
    def __init__(self):
        super().__init__(writer=None, run_id="device")
        self.states = []

    def set_state(self, host, state):
        self.states.append(state)
        self.host(host).state = state


pmap = telemetry.ProcessMap()
pmap.workdirs[str(work)] = 42
sink = Sink()
sampler = telemetry.NvmlSampler("h200", sink, interval_s=1.0, processes=pmap)
sampler.start()
time.sleep(4.5)
sampler.stop()
holder.kill()
result = {
    "states": sink.states,
    "samples": [vars(s) | {} for s in sink._buffer],
    "processes": [vars(p) for p in sink.host("h200").processes],
    "holder_pid": holder.pid,
}
(out / "nvml_sampler.json").write_text(json.dumps(result, indent=2, default=str))
print(json.dumps({k: result[k] for k in ("states", "processes", "holder_pid")}, default=str))
print(json.dumps(result["samples"][-1], default=str))
