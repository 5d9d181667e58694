#!/usr/bin/env bash
# The process sandbox on a lent H200: bubblewrap namespaces with the GPUs passed through, from the
# repo root through the device tool:   OUT=$OUT bash docs/evidence/h200-sandbox/run.sh
# Carries .device (git-ignored): resenv's wheel and its dependencies under .device/wheels (as
# docs/evidence/h200-gpuuse/README.md says) and Debian's bubblewrap .deb under .device/debs
# (`apt-get download bubblewrap`), unpacked with dpkg -x since no package registry is reachable there.
set -uo pipefail
OUT=${OUT:-/tmp/h200-sandbox-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/console.txt") 2>&1
echo "== bubblewrap from the carried .deb"
mkdir -p /tmp/bw && for deb in .device/debs/*.deb; do dpkg -x "$deb" /tmp/bw; done
export PATH=/tmp/bw/usr/bin:$PATH
bwrap --version && command -v setpriv
bwrap --ro-bind / / --unshare-pid --proc /proc --dev /dev true && echo "namespaces: ok" || { echo "bubblewrap cannot make namespaces here"; exit 1; }

echo "== the C3 GPU-use benchmark, every command in the default (bubblewrap) sandbox"
OUT=$OUT/gpuuse bash docs/evidence/h200-gpuuse/run.sh

echo "== what a command sees inside the sandbox, on the GPU machine"
RESENV_HOME=/tmp/rh python3 - <<'PY'
import asyncio, os, tempfile
from pathlib import Path
from resenv.engine.sandbox.isolation import Isolation
from resenv.engine.sandbox.process import ProcessSandbox

CHECKS = {
    "who": ["id"],
    "root dir": ["ls", "/"],
    "processes": ["sh", "-c", "ls -d /proc/[0-9]* | wc -l"],
    "pid 1 environment": ["sh", "-c", "tr '\\0' '\\n' < /proc/1/environ"],
    "the store": ["sh", "-c", "ls /tmp/rh 2>&1 || true"],
    "GPUs (driver)": ["nvidia-smi", "-L"],
    "GPUs (torch)": ["/opt/torch/.venv/bin/python3", "-c",
                      "import torch; x = torch.ones(1024, 1024, device='cuda'); print(torch.cuda.get_device_name(0), float((x @ x).sum()))"],
    "setsid child": ["sh", "-c", "setsid sh -c 'sleep 300' </dev/null >/dev/null 2>&1 & echo left $!"],
}
def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

async def main():
    work = Path(tempfile.mkdtemp()) / "work"
    box = ProcessSandbox(work, isolation=Isolation())
    for name, argv in CHECKS.items():
        result = await box.exec(argv, env={"CUDA_VISIBLE_DEVICES": "0", "ENGINE_SECRET_NOT_DECLARED": os.environ.get("HOME", "")},
                                log_prefix=work.parent / name.replace(" ", "_"), timeout=120)
        print(f"-- {name}: exit {result.returncode}")
        print(result.stdout_path.read_text().rstrip())
        print(result.stderr_path.read_text().rstrip())
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline(pid) == b"sleep\0300\0"]
    print("-- after the sandbox, `sleep 300` processes left:", len(left))
asyncio.run(main())
PY
