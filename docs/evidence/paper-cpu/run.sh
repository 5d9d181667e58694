#!/usr/bin/env bash
# The paper-cpu evidence in one command: the baseline agent on 17 repos of the paper suite at their
# pinned commits, scored on the CPU tiers C0 (import closure), C1 (CPU entrypoint) and C5 (audit of
# the agent's report), then `resenv report` (md, json) and the per-repo table (table.py).
#
#   bash docs/evidence/paper-cpu/run.sh [--mirror DIR] [--jobs N] [--repo ID ...] [--harness DIR] [--drop-envs]
#
# --mirror DIR  clone from local bare copies DIR/<owner>+<name>/repo instead of the code host (CI has
#               no network to it): a rewritten copy of benchmark.yaml goes to the output dir, the
#               committed file is never edited.
# --jobs N      jobs at once (default 1: a repo's pip installs already use the machine's cores).
# --repo ID     only these repos (repeatable); default all 17.
# --harness DIR the paper harness (No-518/ResearchEnvBench; a work tree or a bare git dir): the
#               table adds its own C0 count on each job's env (harness_c0.sh says how it is run).
# --drop-envs   remove each finished job's env (1-7 GB each) but those of DROP_ENVS_KEEP (default:
#               VisionMamba MultiModalMamba Texo LettuceDetect, for the harness comparison).
#
# Everything goes to docs/evidence/paper-cpu/run/ (RUN_DIR overrides): the store resenv.db and the
# data dir data/ (work dirs, envs, raw logs: large, gitignored), and what is kept in git:
# console.txt, report.md, report.json, table.md, table.json and logs.tgz (every job's raw logs and
# report.json; table paths point into data/, which logs.tgz unpacks to). A second call starts a new run in the
# same store; report and table always read the newest one.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
RESENV=${RESENV:-$ROOT/.venv/bin/resenv}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
RUN_DIR=${RUN_DIR:-$HERE/run}
MIRROR="" JOBS=1 REPOS=() HARNESS=() DROP_ENVS="" DROP_ENVS_KEEP=${DROP_ENVS_KEEP:-"VisionMamba MultiModalMamba Texo LettuceDetect"}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mirror) MIRROR=${2:?--mirror needs a directory}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    --repo) REPOS+=("${2:?--repo needs an id}"); shift 2 ;;
    --harness) HARNESS=(--harness "${2:?--harness needs a directory}"); shift 2 ;;
    --drop-envs) DROP_ENVS=1; shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -x $RESENV ]] || { echo "run.sh: no resenv at $RESENV (make the venv: README, Quick start)" >&2; exit 1; }
mkdir -p "$RUN_DIR"
exec > >(tee "$RUN_DIR/console.txt") 2>&1
echo "== paper-cpu evidence: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs"
"$RESENV" --version 2>/dev/null || true
git -C "$ROOT" rev-parse HEAD 2>/dev/null | sed 's/^/resenv commit /'
"$PYTHON" "$HERE/suite.py" check || exit 1

BENCH=$HERE/benchmark.yaml
if [[ -n $MIRROR ]]; then
  BENCH=$RUN_DIR/benchmark.local.yaml
  args=(); for r in "${REPOS[@]}"; do args+=(--repo "$r"); done
  "$PYTHON" "$HERE/suite.py" mirror "$MIRROR" "$BENCH" "${args[@]}" || exit 1
fi
if [[ -n $DROP_ENVS ]]; then
  # An env is 1-7 GB (CUDA torch); seventeen of them outgrow a small disk. Each finished job's env
  # is removed, except those of the repos named in DROP_ENVS_KEEP (the harness comparison needs them).
  (while sleep 20; do
     for key in $("$PYTHON" -c 'import sqlite3, sys
for (key,) in sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(
        "SELECT repo_id || \x27--\x27 || agent FROM jobs WHERE state IN (\x27done\x27, \x27error\x27, \x27cancelled\x27)"):
    print(key)' "$RUN_DIR/resenv.db" 2>/dev/null); do
       [[ " $DROP_ENVS_KEEP " == *" ${key%%--*} "* ]] && continue
       rm -rf "$RUN_DIR"/data/*/jobs/"$key"/attempt-*/work/env
     done
   done) &
  REAPER=$!
  trap 'kill $REAPER 2>/dev/null' EXIT
fi
repo_args=(); for r in "${REPOS[@]}"; do repo_args+=(--repo "$r"); done
DB=$RUN_DIR/resenv.db
START=$(date +%s)
echo "== resenv run ($BENCH, tiers C0,C1,C5, --jobs $JOBS)"
"$RESENV" run "$BENCH" --agent baseline --tiers C0,C1,C5 --jobs "$JOBS" "${repo_args[@]}" \
  --db "$DB" --data-dir "$RUN_DIR/data" --display plain
RC=$?
echo "== resenv run exit $RC after $(( $(date +%s) - START )) s"
echo "== resenv report"
"$RESENV" report latest --db "$DB" --format md > "$RUN_DIR/report.md" || echo "report md failed: $?"
"$RESENV" report latest --db "$DB" --format json > "$RUN_DIR/report.json" || echo "report json failed: $?"
cat "$RUN_DIR/report.md"
echo "== table"
"$PYTHON" "$HERE/table.py" --db "$DB" --report "$RUN_DIR/report.json" --out "$RUN_DIR" "${HARNESS[@]}" || echo "table failed: $?"
echo "== logs.tgz: every job's raw logs and the agent's report.json (not the envs)"
RUN_ID=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"]["id"])' "$RUN_DIR/report.json" 2>/dev/null)
if [[ -n $RUN_ID && -d $RUN_DIR/data/$RUN_ID ]]; then  # this run's only: the store keeps earlier runs too
  (cd "$RUN_DIR" && shopt -s nullglob && tar -czf logs.tgz "data/$RUN_ID"/jobs/*/attempt-*/logs \
     "data/$RUN_ID"/jobs/*/attempt-*/work/report.json) && du -h "$RUN_DIR/logs.tgz"
fi
echo "== sizes"
du -sh "$DB" "$RUN_DIR/data" 2>/dev/null
ls -la "$RUN_DIR"
exit $RC
