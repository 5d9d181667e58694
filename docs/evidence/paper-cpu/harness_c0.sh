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
# How the harness runs C0: its runner copies the repo's bundle into the checkout as
# benchmark_scripts/, exports SCIMLOPSBENCH_REPORT (the agent's report.json) and runs
# `bash benchmark_scripts/run_all.sh` from the repo root; run_all.sh's first stage runs
# run_pyright_missing_imports.sh, each bundle with its own arguments (the bundles are written per
# repo and differ: some need --repo, some pass --python from the report, some take neither). The
# stage runs `<the report's python> -m pyright ... --outputjson` (pip-installing pyright into the
# env first when it is not importable there). But the pyright package's wrapper does not tell
# pyright which interpreter started it, and pyright, given neither --pythonpath nor a venv setting,
# resolves imports against the first `python3`/`python` on PATH: the runner's system Python, not
# the env. So C0 as run there judges the wrong interpreter whenever the env is not on PATH.
#
# What this script does: the runner's own layout and call, on a temporary copy of the repo (the
# given tree is not touched): the bundle as benchmark_scripts/, a report.json naming the env's
# python, and `bash benchmark_scripts/run_all.sh`, unchanged, with every other stage's script in
# the temporary copy replaced by a stub that exits 0, so run_all.sh runs only its pyright stage,
# with its own arguments. Two things differ from the runner, both outside the harness's code:
#   - the env's bin directory is first on PATH, so the interpreter pyright asks for its search
#     paths is the env's own (the fix for the wrong interpreter);
#   - pyright is made importable by the env's python without installing anything into the env:
#     PYTHONPATH names a directory holding only links to resenv's pinned pyright wrapper and its
#     two dependencies (pyright, nodeenv, typing_extensions). pyright then also sees those three
#     names as resolvable; the summary says so when the repo imports one of them.
# --as-runner leaves both out (PATH as it is; the stage pip-installs pyright into the env when the
# env lacks it: use a throwaway env), which shows the wrong-interpreter count.
# It prints the harness's missing-import count the way the paper's table reads it (results.json's
# missing_packages_count or missing_imports_count, top level, then under metrics or meta.metrics).
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
for f in "$TMP/repo/benchmark_scripts"/*; do  # every stage but pyright: a stub (the copy only)
  case $(basename "$f") in
    run_all.sh|run_pyright_missing_imports.sh) ;;
    *.py) printf 'raise SystemExit(0)  # stage stubbed by harness_c0.sh\n' > "$f" ;;
    *.sh) printf '#!/bin/sh\nexit 0  # stage stubbed by harness_c0.sh\n' > "$f" ;;
  esac
done
printf '{"python_path": "%s"}\n' "$ENV_PY" > "$TMP/report.json"
export SCIMLOPSBENCH_REPORT=$TMP/report.json
# Some bundles grep pyproject.toml for [tool.pyright] with ripgrep; where there is none, a stand-in
# that runs the same search with grep (without it the check silently reads "no pyright section").
if ! command -v rg >/dev/null; then
  mkdir -p "$TMP/bin"; printf '#!/bin/sh\n# rg [-n] PATTERN FILE as grep -E\n[ "$1" = -n ] && shift\nexec grep -nE "$@"\n' > "$TMP/bin/rg"
  chmod +x "$TMP/bin/rg"; export PATH=$TMP/bin:$PATH
fi
if [[ $AS_RUNNER == 1 ]]; then
  echo "mode: as the runner calls it (pyright resolves against PATH's $(command -v python3 || command -v python))"
  (cd "$TMP/repo" && bash benchmark_scripts/run_all.sh) > "$TMP/run_all.out" 2>&1
else
  ENV_BIN=$(dirname "$ENV_PY")
  SITE=$("$PYRIGHT_PY" -c 'import os, pyright; print(os.path.dirname(os.path.dirname(pyright.__file__)))') || exit 1
  mkdir -p "$TMP/pyright-only"
  for name in pyright nodeenv.py typing_extensions.py; do ln -s "$SITE/$name" "$TMP/pyright-only/$name"; done
  echo "mode: the env's bin first on PATH ($ENV_BIN), pyright from $SITE through PYTHONPATH"
  (cd "$TMP/repo" && PATH=$ENV_BIN:$PATH PYTHONPATH=$TMP/pyright-only bash benchmark_scripts/run_all.sh) > "$TMP/run_all.out" 2>&1
fi
RC=$?
P=$TMP/repo/build_output/pyright
grep -E "^(=+ ?stage: pyright|\[run_all\] pyright|stage_result)" "$TMP/run_all.out" | head -3
[[ -n $OUTDIR ]] && mkdir -p "$OUTDIR" && cp -r "$P"/. "$OUTDIR"/ && cp "$TMP/run_all.out" "$OUTDIR"/
"$PYRIGHT_PY" - "$P" "$BUNDLE" "$RC" "$REPO" <<'PY'
import json, sys
from pathlib import Path
stage, bundle, rc, repo = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
try:
    analysis = json.loads((stage / "analysis.json").read_text())
    results = json.loads((stage / "results.json").read_text())
except (OSError, ValueError) as error:
    print(f"harness C0 {bundle}: no analysis ({error}); run_all.sh exit {rc}")
    print((stage / "log.txt").read_text(errors="replace")[-3000:] if (stage / "log.txt").exists() else "")
    sys.exit(1)
def pick(*keys):
    for where in (results, results.get("metrics") or {}, (results.get("meta") or {}).get("metrics") or {},
                  analysis.get("metrics") or {}):
        for key in keys:
            if isinstance(where, dict) and isinstance(where.get(key), int):
                return where[key]
    return None
missing = pick("missing_packages_count", "missing_imports_count")
total = pick("total_imported_packages_count", "total_imports_count")
names = analysis.get("missing_packages") or analysis.get("missing_imports") or results.get("missing_packages") or []
print(f"harness C0 {bundle}: missing {missing} (of {total} in its own import scan), status {results.get('status')}, "
      f"run_all.sh exit {rc}")
print("command:", results.get("command"))
print("missing:", ", ".join(map(str, names)) or "none")
shadow = set()
for path in repo.rglob("*.py"):  # does the repo import a name the pyright-only directory provides?
    try:
        text = path.read_text(errors="replace")
    except OSError:
        continue
    shadow |= {n for n in ("pyright", "nodeenv", "typing_extensions") if f"import {n}" in text or f"from {n}" in text}
if shadow:
    print("note: the repo imports", ", ".join(sorted(shadow)), "which the pyright-only PYTHONPATH also provides")
PY
