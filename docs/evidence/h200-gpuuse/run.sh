#!/usr/bin/env bash
# The C3 GPU-use evidence run on a lent H200, from the repo root through the device tool:
#   bash docs/evidence/h200-gpuuse/run.sh             ($OUT: where results go)
# It expects resenv's wheel and the dependencies the machine's python3 lacks under .device/wheels
# (git-ignored; README.md beside this file says how to build them here and carry them). No package
# registry is reachable there; the machine's python3 (/opt/torch/.venv) already holds a CUDA torch.
# C0 is not run, so no node binary is needed.
set -uo pipefail
OUT=${OUT:-/tmp/h200-gpuuse-out}; mkdir -p "$OUT/e"; E=$OUT/e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$E/console.txt") 2>&1
echo "== machine"; date -u; uname -r; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'

echo "== install resenv from carried wheels (no index)"
# python3 there is itself a venv (/opt/torch/.venv): install into it, beside torch, on a throwaway machine.
# nvidia-ml-py (pynvml) is what C3's GPU-use watcher reads NVML with: it must be importable.
python3 -m pip install -q --no-index --find-links .device/wheels pydantic sqlite-utils platformdirs jsonschema pyright textual nvidia-ml-py || exit 1
python3 -m pip install -q --no-index --no-deps --force-reinstall .device/wheels/resenv-*.whl || exit 1
python3 -c 'import pynvml; pynvml.nvmlInit(); print("NVML: driver", pynvml.nvmlSystemGetDriverVersion(), "· GPUs", pynvml.nvmlDeviceGetCount())' \
  || { echo "NVML is not usable here: this evidence needs it"; exit 1; }
export RESENV_HOME=/tmp/rh
resenv --version
cd docs/evidence/h200-gpuuse || exit 1
resenv validate benchmark.yaml || exit 1

echo "== the run (nvidia-smi --query-compute-apps every 0.5 s beside it, as a cross-check independent of resenv)"
( while :; do echo "# $(date +%s.%N)"; nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv,noheader; sleep 0.5; done ) \
  > "$E/compute-apps-during-run.txt" 2>&1 &
SMI=$!
timeout 540 resenv run benchmark.yaml --agent preinstalled --agent cuda-hidden-overclaim --tiers C1,C2,C3,C5 --display plain
echo "resenv run exit: $?"
kill "$SMI" 2>/dev/null

echo "== show / report"
resenv show | tee "$E/show.txt"
resenv report | tee "$E/report.txt"
DB=/tmp/rh/resenv.db
python3 - "$DB" > "$E/tier_results.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
rows = db.execute("SELECT j.key, t.tier, t.status, t.category, t.evidence_json FROM tier_results t JOIN jobs j ON j.id = t.job_id ORDER BY t.id")
print(json.dumps([dict(r) | {"evidence": json.loads(r["evidence_json"] or "{}"), "evidence_json": None} for r in rows], indent=1))
PY
echo "== C3 verdicts and their GPU-use evidence (c3_gpu_use.json)"
python3 - "$DB" "$E/c3_gpu_use.json" <<'PY'
import json, sqlite3, sys
EXPECTED = {  # what this run is meant to prove (README.md)
    "gpu-matmul/preinstalled": ("pass", None),
    "cpu-fallback/preinstalled": ("pass", None),
    "pinned-gpu7/preinstalled": ("fail", "no_gpu_use"),
    # the agent hides CUDA with a .pth start-up hook: tampered, whatever the run would have said
    "gpu-matmul/cuda-hidden-overclaim": ("fail", "tampered"),
    "cpu-fallback/cuda-hidden-overclaim": ("fail", "tampered"),
    "pinned-gpu7/cuda-hidden-overclaim": ("fail", "tampered"),
}
db = sqlite3.connect(sys.argv[1]); db.row_factory = sqlite3.Row
rows = db.execute("SELECT j.key, t.status, t.category, t.evidence_json FROM tier_results t JOIN jobs j ON j.id = t.job_id"
                  " WHERE t.tier = 'C3' ORDER BY t.id").fetchall()
out, mismatches = [], 0
for row in rows:
    ev = json.loads(row["evidence_json"] or "{}")
    out.append({"job": row["key"], "status": row["status"], "category": row["category"], "exit_code": ev.get("exit_code"),
                "duration_s": ev.get("duration_s"), "reason": ev.get("reason"), "gpu_use": ev.get("gpu_use"),
                "log_tail": (ev.get("log_tail") or "")[-600:]})
    use = ev.get("gpu_use") or {}
    seen = "; ".join(f"GPU {g['gpu']}: pids {g['pids']} peak {g['peak_mib']} MiB in {g['samples']} sample(s), others {g['other_pids']}"
                     for g in use.get("per_gpu") or [])
    want = EXPECTED.get(row["key"])
    ok = want == (row["status"], row["category"])
    mismatches += not ok
    print(f"{'ok  ' if ok else 'MISMATCH'} {row['key']:36s} C3 {row['status']}/{row['category']} (expected {want}) exit {ev.get('exit_code')}")
    if ev.get("verdict_otherwise"):
        print(f"     without the hook it would have been: {ev['verdict_otherwise']}")
    print(f"     source {use.get('source')} · {use.get('samples')} samples every {use.get('interval_s')} s · {seen or use.get('unobservable')}")
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("C3 verdicts:", "all as expected" if not mismatches and len(rows) == len(EXPECTED) else f"{mismatches} mismatch(es), {len(rows)} of {len(EXPECTED)} jobs judged")
PY
echo "== compute apps seen by nvidia-smi during the run (distinct pids)"
grep -v '^#' "$E/compute-apps-during-run.txt" | cut -d, -f1,4 | sort -u
[ -d /tmp/rh ] && tar czf "$OUT/runs.tgz" -C /tmp/rh --exclude='*/work/env' --exclude='*/work/repo' --exclude='*/pristine' runs
cd "$OUT" && tar czf evidence.tgz e && ls -la "$OUT"
