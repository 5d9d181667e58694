#!/usr/bin/env bash
# The two-GPU H200 evidence run, on the lent nvidia-h200-x2 machine from the repo root:
#   bash docs/evidence/h200x2/run.sh        ($OUT: where results go)
# Same carried wheels and node as docs/evidence/h200/run.sh.
set -uo pipefail
OUT=${OUT:-/tmp/h200x2-out}; mkdir -p "$OUT/e"; E=$OUT/e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$E/console.txt") 2>&1
echo "== machine"; date -u; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -5
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())'
python3 -m pip install -q --no-index --find-links .device/wheels pydantic sqlite-utils platformdirs jsonschema pyright textual || exit 1  # asyncssh and docker: not needed by a local run
python3 -m pip install -q --no-index --no-deps --force-reinstall .device/wheels/resenv-*.whl || exit 1
python3 -c 'import lzma, shutil; shutil.copyfileobj(lzma.open(".device/node.xz"), open("/tmp/node", "wb"))' && chmod +x /tmp/node
export RESENV_NODE=/tmp/node RESENV_HOME=/tmp/rh
cd docs/evidence/h200x2 || exit 1
echo "== the run"
timeout 540 resenv run benchmark.yaml --display plain
resenv show; resenv report; resenv report --format json > "$E/report.json"
DB=/tmp/rh/resenv.db
python3 - "$DB" > "$E/tier_results.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
rows = db.execute("SELECT j.key, t.tier, t.status, t.category, t.evidence_json FROM tier_results t JOIN jobs j ON j.id = t.job_id ORDER BY t.id")
print(json.dumps([dict(r) | {"evidence": json.loads(r["evidence_json"] or "{}"), "evidence_json": None} for r in rows], indent=1))
PY
python3 - "$DB" > "$E/leases_and_samples.txt" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print("leases (job, host, gpus, start, end, seconds):")
rows = db.execute("SELECT j.key, l.host, l.gpus, l.started_at, l.ended_at FROM leases l JOIN jobs j ON j.id = l.job_id ORDER BY l.started_at").fetchall()
t0 = min(r[3] for r in rows)
for key, host, gpus, start, end in rows:
    print(f"  {key:34s} {host} gpus={gpus:4s} {start - t0:7.2f} -> {end - t0:7.2f}")
overlaps = [(a[0], b[0], g) for i, a in enumerate(rows) for b in rows[i + 1:]
            for g in set(a[2].split(",")) & set(b[2].split(",")) if g and a[3] < b[4] and b[3] < a[4]]
print("overlapping leases of one GPU:", overlaps or "none")
print("GPU samples per GPU (count, max util %, max MiB):")
for row in db.execute("SELECT gpu, COUNT(*), MAX(util_pct), MAX(mem_used_mib) FROM gpu_samples GROUP BY gpu"):
    print("  ", row)
PY
cat "$E/leases_and_samples.txt"
echo "== leftover processes of the failed DDP job (expect none):"; pgrep -af "ddp.py|train_ddp.py|torch.distributed.run" || echo none
cd "$OUT" && tar czf evidence.tgz e && ls -la "$OUT"
