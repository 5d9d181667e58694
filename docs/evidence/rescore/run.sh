#!/usr/bin/env bash
# `resenv rescore` on a run made before the scoring rules changed, end to end:
#   bash docs/evidence/rescore/run.sh [OLD_COMMIT]     (from the repo root, after the README's install)
# It installs resenv at OLD_COMMIT (default: the last commit before the rules version existed) into a
# throwaway venv, makes a run with it (a repo whose import is missing; an honest agent, one that drops
# a stub beside the entrypoint, one that rewrites the entrypoint, one that reports /bin/true as its
# interpreter), then rescores that run with this checkout's resenv and prints show / report / rescore.
set -euo pipefail
OLD=${1:-3ab4fa053b713fe12d34d52a1eb7566a912bb46c}
ROOT=$(git rev-parse --show-toplevel)
NEW=$ROOT/.venv/bin/resenv
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/old" >/dev/null 2>&1 || true' EXIT
git -C "$ROOT" worktree add -q --detach "$WORK/old" "$OLD"
python3 -m venv "$WORK/old/.venv"
"$WORK/old/.venv/bin/pip" install -q -c "$WORK/old/constraints.txt" -e "$WORK/old" 2>/dev/null
PY=$(readlink -f "$ROOT/.venv/bin/python")
mkdir -p "$WORK/bench/suites/needs-missing"
printf "import resenv_absent_pkg\nprint('ran', resenv_absent_pkg)\n" > "$WORK/bench/suites/needs-missing/main.py"
REPORT="printf '{{\"python_path\": \"%s\"}}' {env}/bin/python > {report}"
VENV="$PY -m venv --without-pip {env}"
cat > "$WORK/bench/benchmark.yaml" <<YAML
version: 1
defaults: {suite: s, agent: honest, host: h, retries: {infra: 0, backoff_s: 0.1}}
hosts:
  h: {kind: local, slots: 2, gpus: 0}
agents:
  honest:
    kind: command
    command: >-
      $VENV && $REPORT
  shadow:
    kind: command
    command: >-
      $VENV && echo 'x = 1' > {repo}/resenv_absent_pkg.py && $REPORT
  edit:
    kind: command
    command: >-
      $VENV && echo 'print(1)' > {repo}/main.py && $REPORT
  bin-true:
    kind: command
    command: >-
      printf '{{"python_path": "/bin/true", "notes": null}}' > {report}
suites:
  s:
    repos:
      - id: needs-missing
        source: {path: suites/needs-missing}
        entrypoints: {cpu: {command: "{python} main.py"}}
        not_applicable: {single_gpu: none, multi_gpu: none}
YAML
export RESENV_HOME=$WORK/home
cd "$WORK/bench"
echo "== the run, by resenv at $OLD"
"$WORK/old/.venv/bin/resenv" run benchmark.yaml --agent honest --agent shadow --agent edit --agent bin-true \
    --tiers C0,C1,C5 --display none
"$WORK/old/.venv/bin/resenv" show
echo "== resenv rescore latest, by this checkout ($(git -C "$ROOT" rev-parse --short HEAD))"
"$NEW" rescore latest
echo "== resenv show / report (the latest scoring)"
"$NEW" show
"$NEW" report
