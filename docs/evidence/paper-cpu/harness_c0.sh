#!/usr/bin/env bash
# The ResearchEnvBench paper harness's own C0 (pyright missing imports) on one env, for comparison
# with resenv's C0 on the same env. Harness code is never copied into this repository: it is read
# from a fetched copy of the harness (a work tree, or a bare git directory, exported to a temp dir).
#
#   bash docs/evidence/paper-cpu/harness_c0.sh --harness DIR --repo DIR --python ENV_PYTHON \
#        [--bundle OWNER@NAME] [--out DIR] [--as-runner]
#
# --harness DIR   the harness (No-518/ResearchEnvBench): a work tree or a bare git dir (its HEAD)
# --repo DIR      the repository's tree at its pinned commit (a checkout or a `git archive` export)
# --python PY     the env's interpreter (what the agent's report.json names as python_path)
# --bundle O@N    the harness's per-repo bundle scripts/O@N/benchmark_scripts (default: the one
#                 whose name ends in @<basename of --repo>)
# --out DIR       keep the harness's build_output/pyright there (log, pyright JSON, analysis)
# --as-runner     run it exactly as its runner calls it, which shows the wrong-interpreter count
#
# How the harness runs C0: its runner copies the bundle into the checkout as benchmark_scripts/,
# exports SCIMLOPSBENCH_REPORT (the agent's report.json) and runs benchmark_scripts/run_all.sh,
# whose first stage is `bash run_pyright_missing_imports.sh` with no arguments. That script takes
# the python_path of the report and runs `<python> -m pyright <targets> --level error --outputjson`
# (pip-installing pyright into the env first when it is not importable there). But the pyright
# package's wrapper does not tell pyright which interpreter started it, and pyright, given neither
# --pythonpath nor a venv setting, resolves imports against the first `python` on PATH: the
# runner's system Python, not the env. So C0 as run there judges the wrong interpreter whenever
# the env is not on PATH.
#
# What this script does instead, through the harness script's own options, its code unchanged:
# it runs the same script on a temporary copy of the repo with the bundle in place and a report
# naming the env's python, with `--python <a python holding resenv's pinned pyright>` (so nothing
# is installed into the env) and `-- --pythonpath <env python>`, the pyright option that makes it
# resolve imports against the env. --as-runner leaves out both (report-driven, PATH as it is) and
# needs pyright importable in the env (the script would otherwise pip-install it there).
# It prints the harness's missing-import count (analysis.json: missing_packages_count, the distinct
# top-level names of reportMissingImports diagnostics) and its ratio over its own AST import scan.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
HARNESS="" REPO="" ENV_PY="" BUNDLE="" OUTDIR="" AS_RUNNER=0
PYRIGHT_PY=${PYRIGHT_PY:-$ROOT/.venv/bin/python}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --harness) HARNESS=$2; shift 2 ;;
    --repo) REPO=$2; shift 2 ;;
    --python) ENV_PY=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --as-runner) AS_RUNNER=1; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "harness_c0.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $HARNESS && -n $REPO && -n $ENV_PY ]] || { echo "harness_c0.sh: --harness, --repo and --python are required" >&2; exit 2; }
[[ -x $ENV_PY ]] || { echo "harness_c0.sh: $ENV_PY is not executable" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/harness-c0.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

if [[ -d $HARNESS/scripts ]]; then H=$HARNESS
elif git --git-dir "$HARNESS" rev-parse --verify -q HEAD >/dev/null; then
  H=$TMP/harness; mkdir -p "$H"
  git --git-dir "$HARNESS" archive HEAD scripts | tar -x -C "$H" || exit 1
  echo "harness: $HARNESS at $(git --git-dir "$HARNESS" rev-parse HEAD)"
else echo "harness_c0.sh: $HARNESS is neither a harness work tree nor a git dir" >&2; exit 1; fi
if [[ -z $BUNDLE ]]; then
  BUNDLE=$(cd "$H/scripts" && ls -d *@"$(basename "$(cd "$REPO" && pwd)")" 2>/dev/null | head -1)
fi
B=$H/scripts/$BUNDLE/benchmark_scripts
[[ -n $BUNDLE && -f $B/run_pyright_missing_imports.sh ]] || { echo "harness_c0.sh: no bundle ${BUNDLE:-for $REPO} under $H/scripts" >&2; exit 1; }

# The runner's layout: the repo with the bundle as benchmark_scripts/, and the agent's report.
mkdir -p "$TMP/repo"
tar -C "$REPO" --exclude=./benchmark_scripts --exclude=./build_output -cf - . | tar -C "$TMP/repo" -xf - || exit 1
cp -r "$B" "$TMP/repo/benchmark_scripts"
printf '{"python_path": "%s"}\n' "$ENV_PY" > "$TMP/report.json"
export SCIMLOPSBENCH_REPORT=$TMP/report.json
# The script greps pyproject.toml for [tool.pyright] with ripgrep; where there is none, a stand-in
# that runs the same search with grep (without it the check silently reads "no pyright section").
if ! command -v rg >/dev/null; then
  mkdir -p "$TMP/bin"; printf '#!/bin/sh\n# rg -n PATTERN FILE\nshift; exec grep -nE "$@"\n' > "$TMP/bin/rg"
  chmod +x "$TMP/bin/rg"; export PATH=$TMP/bin:$PATH
fi
if [[ $AS_RUNNER == 1 ]]; then
  echo "mode: as the runner calls it (python from the report; pyright resolves against PATH's $(command -v python3 || command -v python))"
  bash "$TMP/repo/benchmark_scripts/run_pyright_missing_imports.sh"
else
  echo "mode: pyright run by $PYRIGHT_PY, resolving imports against $ENV_PY (--pythonpath)"
  bash "$TMP/repo/benchmark_scripts/run_pyright_missing_imports.sh" --python "$PYRIGHT_PY" -- --pythonpath "$ENV_PY"
fi
RC=$?
P=$TMP/repo/build_output/pyright
[[ -n $OUTDIR ]] && mkdir -p "$OUTDIR" && cp -r "$P"/. "$OUTDIR"/
"$PYRIGHT_PY" - "$P" "$BUNDLE" "$RC" <<'PY'
import json, sys
from pathlib import Path
stage, bundle, rc = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
try:
    analysis = json.loads((stage / "analysis.json").read_text())
    results = json.loads((stage / "results.json").read_text())
except (OSError, ValueError) as error:
    print(f"harness C0 {bundle}: no analysis ({error}); script exit {rc}")
    print((stage / "log.txt").read_text(errors="replace")[-3000:] if (stage / "log.txt").exists() else "")
    sys.exit(1)
m = analysis.get("metrics", {})
print(f"harness C0 {bundle}: missing {m.get('missing_packages_count')} "
      f"(ratio {m.get('missing_package_ratio')} over its own import scan), status {results.get('status')}, "
      f"script exit {rc}")
print("targets:", " ".join(results.get("meta", {}).get("pyright", {}).get("targets_or_project", [])))
print("command:", results.get("command"))
print("missing:", ", ".join(analysis.get("missing_packages", [])) or "none")
PY
