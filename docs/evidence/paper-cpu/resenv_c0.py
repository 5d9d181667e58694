"""resenv's own C0 on one env, outside a run: the counterpart of harness_c0.sh on the same env.

To compare the paper harness's C0 count with resenv's, both must judge the same interpreter and
the same tree. This runs resenv's probe (`resenv.probes.c0.run_c0`, the code a run's C0 tier runs)
with the census of the tree (`resenv.probes.census`, as the engine computes it at the pinned
commit: here over the exported tree, or over a bare git dir's commit with --git-dir/--commit) and
prints the missing count out of the census total, the third-party part, and the names.

Usage (the project's venv)::

    python docs/evidence/paper-cpu/resenv_c0.py --repo DIR --python ENV_PYTHON [--git-dir G --commit SHA]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from resenv.probes.c0 import run_c0
from resenv.probes.census import files_at_commit, files_in_dir, import_census


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="the tree the env is judged on")
    parser.add_argument("--python", required=True, help="the env's interpreter")
    parser.add_argument("--git-dir", type=Path, help="census from this bare git dir's --commit instead of --repo")
    parser.add_argument("--commit")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    files = files_at_commit(args.git_dir, args.commit) if args.git_dir else files_in_dir(args.repo)
    census = import_census(files)
    with tempfile.TemporaryDirectory(prefix="resenv-c0-") as work:
        result = asyncio.run(run_c0(args.python, args.repo, census, work_dir=Path(work), timeout=args.timeout))
    third = set(census.names("third_party"))
    missing = set(result.missing)
    print(f"resenv C0: {result.status}/{result.category or '—'}: missing {len(missing)}/{census.total} "
          f"(paper ratio {result.paper_ratio:.3f}); third-party missing "
          f"{len((missing | set(result.missing_source)) & third)}/{len(third)}")
    print("missing:", ", ".join(sorted(missing)) or "none",
          "| stub-only:", ", ".join(result.missing_source) or "none")
    print("command:", " ".join(result.command))
    return 0 if result.status != "error" else 1


if __name__ == "__main__":
    sys.exit(main())
