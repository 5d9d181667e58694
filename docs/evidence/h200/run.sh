#!/usr/bin/env bash
# The H200 evidence run. Runs on the lent GPU machine from the repo root:
#   bash docs/evidence/h200/run.sh          ($OUT: where results go)
# It expects resenv's wheels under .device/wheels and an xz-compressed node binary at .device/node.xz
# (no package registry is reachable there; the machine's python3 already holds torch).
set -uo pipefail
STAGES=${1:-main,extras}   # main: the benchmark run; extras: GPU tests and the dashboard render
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT/e"
E=$OUT/e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$E/console.txt") 2>&1
echo "== machine"; date -u; uname -a; nvidia-smi; nvidia-smi -q | head -40
python3 -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0))'
echo "== install resenv from carried wheels (no index)"
# python3 there is itself a venv (/opt/torch/.venv): install into it, beside torch, on a throwaway machine.
python3 -m pip install -q --no-index --find-links .device/wheels resenv || exit 1
python3 -m pip install -q --no-index --no-deps --force-reinstall .device/wheels/resenv-*.whl || exit 1
python3 -c 'import lzma, shutil; shutil.copyfileobj(lzma.open(".device/node.xz"), open("/tmp/node", "wb"))' && chmod +x /tmp/node
export RESENV_NODE=/tmp/node RESENV_HOME=/tmp/rh
/tmp/node --version; resenv --version
cd docs/evidence/h200 || exit 1
if [[ $STAGES == *main* ]]; then
echo "== the run"
resenv validate benchmark.yaml
timeout 540 resenv run benchmark.yaml --agent preinstalled --agent baseline-offline --agent cuda-hidden-overclaim --display plain
echo "== show / report"
resenv show
resenv report
resenv report --format json > "$E/report.json"
resenv report --figure "$E/pyramid.png" > /dev/null
DB=/tmp/rh/resenv.db
python3 - "$DB" > "$E/tier_results.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
rows = db.execute("SELECT j.key, t.tier, t.status, t.category, t.evidence_json FROM tier_results t JOIN jobs j ON j.id = t.job_id ORDER BY t.id")
print(json.dumps([dict(r) | {"evidence": json.loads(r["evidence_json"] or "{}"), "evidence_json": None} for r in rows], indent=1))
PY
sqlite3 -header -csv "$DB" "SELECT host, gpu, datetime(ts, 'unixepoch') AS t, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c FROM gpu_samples ORDER BY ts" > "$E/gpu_samples.csv" 2>/dev/null \
  || python3 -c "import csv,sqlite3,sys; c=sqlite3.connect('$DB'); r=c.execute('SELECT * FROM gpu_samples ORDER BY ts'); w=csv.writer(sys.stdout); w.writerow([d[0] for d in r.description]); w.writerows(r)" > "$E/gpu_samples.csv"
python3 -c "import sqlite3; c=sqlite3.connect('$DB'); print('samples, max util %, max MiB:', c.execute('SELECT COUNT(*), MAX(util_pct), MAX(mem_used_mib) FROM gpu_samples').fetchone())"
python3 - "$DB" > "$E/gpu_processes.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
rows = db.execute("SELECT e.kind, j.key, e.data FROM events e LEFT JOIN jobs j ON j.id = e.job_id WHERE e.kind LIKE '%gpu%' OR e.kind LIKE '%process%' OR e.kind LIKE 'host%' ORDER BY e.id")
print(json.dumps([dict(r) for r in rows][:400], indent=1))
PY
sqlite3 -header -csv "$DB" "SELECT * FROM hosts" > "$E/hosts.csv" 2>/dev/null || true
echo "== nvidia-smi stream (for the remote-sampling parser)"
timeout 5 nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw --format=csv,noheader,nounits -lms 1000 > "$E/nvidia-smi-stream.csv"
fi
if [[ $STAGES == *extras* ]]; then
echo "== GPU tests (pytest -m gpu)"
(cd ../../.. && RESENV_HOME=/tmp/rh-gpu-tests python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -o addopts="" 2>&1 | tail -5) | tee "$E/gpu-tests.txt"
echo "== dashboard render during a GPU job"
python3 -m pip install -q --no-index --find-links ../../../.device/wheels textual
RESENV_HOME=/tmp/rh-tui python3 render_tui.py "$E" || echo "render failed"
fi
[ -d /tmp/rh ] && tar czf "$OUT/runs.tgz" -C /tmp/rh --exclude='*/work/env' --exclude='*/work/repo' --exclude='*/pristine' runs
cd "$OUT" && tar czf evidence.tgz e && ls -la "$OUT"
