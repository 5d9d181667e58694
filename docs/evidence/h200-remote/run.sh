#!/bin/bash
# Issue 7 evidence on the lent H200 (device tool), run from the repo root:
#   bash docs/evidence/h200-remote/run.sh
# 1. the real output of the compute-apps query resenv's SSH sampler runs (REMOTE_PROCESSES), while
#    a torch process holds GPU memory in a known working directory;
# 2. the import map of the device's real torch environment (probes/kit/importmap.py, stdlib only),
#    brought back to be judged by C0 on the engine's machine (see README.md).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=/opt/torch/.venv/bin/python3
{ nvidia-smi --query-gpu=driver_version,name --format=csv,noheader; $PY -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > "$OUT/versions.txt" 2>&1
work=$(mktemp -d /tmp/resenv-job-XXXX)/attempt-1/work
mkdir -p "$work"
(cd "$work" && exec $PY -c 'import torch, time; x = torch.ones(256, 1024, 1024, device="cuda"); time.sleep(20)') &
holder=$!
sleep 8
echo "holder pid $holder, work dir $work" > "$OUT/compute-apps.txt"
nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits >> "$OUT/compute-apps.txt" 2>&1
echo "--- REMOTE_PROCESSES (resenv.engine.hosts.telemetry) ---" >> "$OUT/compute-apps.txt"
sh docs/evidence/h200-remote/remote_processes.sh >> "$OUT/compute-apps.txt" 2>&1
wait $holder
# the import map of a repo that imports torch, numpy, a local package and one missing module
repo=$(mktemp -d /tmp/resenv-repo-XXXX)
mkdir -p "$repo/pkg"
printf 'import torch\nimport numpy\nimport pkg\nimport not_installed_anywhere\n' > "$repo/main.py"
touch "$repo/pkg/__init__.py"
printf 'main.py\n' > "$repo/census.txt"
start=$(date +%s%N)
$PY -I -B probes/kit/importmap.py "$OUT/importmap.tar.gz" "$repo" "$repo/census.txt" > "$OUT/importmap.txt" 2>&1
end=$(date +%s%N)
echo "milliseconds: $(( (end - start) / 1000000 ))" >> "$OUT/importmap.txt"
ls -l "$OUT/importmap.tar.gz" >> "$OUT/importmap.txt"
echo "$repo" > "$OUT/repo-path.txt"
