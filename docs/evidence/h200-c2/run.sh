#!/usr/bin/env bash
# C2 for every repo on a real GPU host (the lent H200), run from the repo root through the device tool:
#   bash docs/evidence/h200-c2/run.sh
# The repo's own benchmark.yaml, the starter suite, the baseline in offline mode (no package index
# there), the local host with `gpus: auto` (one H200). Expected: every job leases the GPU (C2 is
# judged for every repo), the CPU-only repos fail C2 with deps_missing (no framework), and jobs take
# turns on the one GPU (leases never overlap).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/console.txt") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --find-links .device/wheels pydantic sqlite-utils textual pyright jsonschema platformdirs click-default-group
python3 -m pip install -q --no-index --no-deps --force-reinstall .device/wheels/resenv-*.whl || exit 1
python3 -c 'import lzma, shutil; shutil.copyfileobj(lzma.open(".device/node.xz"), open("/tmp/node", "wb"))' && chmod +x /tmp/node
export RESENV_NODE=/tmp/node RESENV_HOME=/tmp/rh
resenv --version
timeout 500 resenv run --suite starter --agent baseline-offline --display plain
resenv show
python3 - /tmp/rh/resenv.db > "$OUT/c2_and_leases.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
c2 = [dict(r) for r in db.execute("SELECT j.repo_id, j.gpus_needed, t.status, t.category, t.evidence_json FROM tier_results t JOIN jobs j ON j.id = t.job_id WHERE t.tier = 'C2' ORDER BY j.id")]
for row in c2:
    evidence = json.loads(row.pop("evidence_json") or "{}")
    row["framework_seen"] = {k: evidence.get("framework", {}).get(k) for k in ("framework", "version", "cuda_build", "cuda_available", "device_count")}
    row["reason"] = evidence.get("reason")
leases = [dict(r) for r in db.execute("SELECT l.job_id, j.repo_id, l.gpus, l.started_at, l.ended_at FROM leases l JOIN jobs j ON j.id = l.job_id ORDER BY l.started_at")]
overlap = any(a["ended_at"] > b["started_at"] for a, b in zip(leases, leases[1:]))
print(json.dumps({"c2": c2, "leases": leases, "leases_overlap": overlap}, indent=1))
PY
