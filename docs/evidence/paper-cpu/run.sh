#!/usr/bin/env bash
# The paper-cpu evidence in one command: the baseline agent on 14 repos of the paper suite at their
# pinned commits, scored on the CPU tiers C0 (import closure), C1 (CPU entrypoint) and C5 (audit of
# the agent's report), then `resenv report` (md, json) and the per-repo table (table.py).
#
#   bash docs/evidence/paper-cpu/run.sh [--mirror DIR] [--jobs N] [--repo ID ...] [--harness DIR]
#
# --mirror DIR  clone from local bare copies DIR/<owner>+<name>/repo instead of the code host (CI has
#               no network to it): a rewritten copy of benchmark.yaml goes to the output dir, the
#               committed file is never edited.
# --jobs N      jobs at once (default 1: a repo's pip installs already use the machine's cores).
# --repo ID     only these repos (repeatable); default all 14.
# --harness DIR the paper harness (No-518/ResearchEnvBench; a work tree or a bare git dir): the
#               table adds its own C0 count on each job's env (harness_c0.sh says how it is run).
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
MIRROR="" JOBS=1 REPOS=() HARNESS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mirror) MIRROR=${2:?--mirror needs a directory}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    --repo) REPOS+=("${2:?--repo needs an id}"); shift 2 ;;
    --harness) HARNESS=(--harness "${2:?--harness needs a directory}"); shift 2 ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
  # The bare copies' pack files may be readable by their owner only (0400/0600 .promisor files),
  # and resenv's pristine clone of a local path hardlinks them, so the job's own clone, which runs
  # as another uid when the engine is root, cannot read them. Clone from a world-readable copy.
  BENCH=$RUN_DIR/benchmark.local.yaml
  args=(); for r in "${REPOS[@]}"; do args+=(--repo "$r"); done
  "$PYTHON" "$HERE/suite.py" mirror "$MIRROR" "$BENCH" "${args[@]}" || exit 1
  COPY=$RUN_DIR/mirror
  for src in $("$PYTHON" "$HERE/suite.py" sources "$BENCH"); do
    name=$(basename "$(dirname "$src")")
    if [[ ! -d $COPY/$name/repo ]]; then
      mkdir -p "$COPY/$name" && cp -r "$src" "$COPY/$name/repo.tmp" && chmod -R a+rX "$COPY/$name/repo.tmp" \
        && mv "$COPY/$name/repo.tmp" "$COPY/$name/repo" || { echo "run.sh: cannot copy $src" >&2; exit 1; }
    fi
  done
  "$PYTHON" "$HERE/suite.py" mirror "$COPY" "$BENCH" "${args[@]}" || exit 1
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
