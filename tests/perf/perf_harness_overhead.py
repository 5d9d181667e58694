"""Harness overhead per job, end to end: the real `resenv run` against a bare loop of the same commands.

Target (issue): <= 25 ms per job at `--jobs 4` on an idle machine (50 jobs, tiers none, process
start and run creation included).

Method: a benchmark of REPOS bundled tiny repos x AGENTS command agents that run `true` (default
10 x 5 = 50 jobs) is written to a temp dir. For each `--jobs` value and each repeat, two child
processes run one after the other, in alternating order:

- resenv: `resenv run <benchmark> --tiers none --jobs J --display none` with a fresh store and
  data dir (this script re-executed with --child, so RESENV_PERF_SRC applies to it too);
- bare: a plain Python loop (this script with --bare) that runs the SAME commands with the same
  parallelism (J worker threads): per repo once, the bundled tree committed into a bare repo
  (`git init --bare`, `git add --all`, `git commit`, `git rev-parse`: what resenv does to build
  its pristine copy); per job `git clone --quiet --no-hardlinks --no-checkout <pristine> <dir>`,
  `git -C <dir> checkout --quiet --detach <commit>` and the agent command `true`.

Before each child the disk's dirty pages are written back (`os.sync`), so neither pays for the
other's writes (on a virtual disk that was up to a second either way). Both walls are measured
from just before the child is spawned to its exit, so interpreter start,
imports, loading the YAML and creating the run are inside resenv's. Figures (medians over the
repeats):

    overhead per job = (resenv wall - bare wall) / jobs
    process start    = child spawned -> run row created, and -> first attempt started (resenv)
    checkout         = per job: the bare loop's clone + checkout; resenv's `checkout` phase
                       (which adds its tree verification) from the `phases` table

The children cache bytecode as an installed resenv does (PYTHONDONTWRITEBYTECODE is dropped from
their environment). --unsafe-process gives the host `sandbox: unsafe-process`: by difference, what
the bubblewrap namespaces cost.

--profile re-runs resenv once per --jobs value under cProfile (in the child, after the timed
repeats: profiling slows it) and writes the top functions to results/perf_harness_overhead.j<N>.prof.txt.

    .venv/bin/python tests/perf/perf_harness_overhead.py                 # 50 jobs, --jobs 1 and 4, 5 repeats
    .venv/bin/python tests/perf/perf_harness_overhead.py --repos 10 --agents 10 --repeats 3 --jobs 4
    .venv/bin/python tests/perf/perf_harness_overhead.py --profile
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _perfutil as pu

NAME = "perf_harness_overhead"
TARGET_MS = 25.0
TARGET_JOBS = 4
MAIN = "print('ok')\n"
SCRIPT = Path(__file__).resolve()


# ----------------------------------------------------------------------------- children


def child(argv: list[str]) -> None:
    """`resenv <argv>` in this process; with PERF_PROFILE=<file>, under cProfile, stats dumped there."""
    from resenv.engine.cli.main import main as cli_main

    profile_to = os.environ.get("PERF_PROFILE")
    if not profile_to:
        cli_main(argv, prog_name="resenv")
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        cli_main(argv, prog_name="resenv", standalone_mode=False)
    finally:
        profiler.disable()
        profiler.dump_stats(profile_to)


def bare(spec_path: Path) -> None:
    """The same commands resenv runs for these jobs, with nothing around them; prints per-job checkout seconds."""
    spec = json.loads(spec_path.read_text())
    work = Path(spec["work"])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "LANG": "C.UTF-8", "GIT_AUTHOR_NAME": "resenv",
           "GIT_AUTHOR_EMAIL": "resenv@localhost", "GIT_COMMITTER_NAME": "resenv",
           "GIT_COMMITTER_EMAIL": "resenv@localhost", "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
    locks = {repo: threading.Lock() for repo in spec["repos"]}
    commits: dict[str, str] = {}

    def git(*args: str, extra: dict[str, str] | None = None) -> str:
        return subprocess.run(["git", *args], env={**env, **(extra or {})}, check=True, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True).stdout.strip()

    def pristine(repo: str) -> tuple[Path, str]:
        bare_repo = work / "pristine" / f"{repo}.git"
        with locks[repo]:
            if repo not in commits:
                git("init", "--quiet", "--bare", str(bare_repo))
                tree = {"GIT_DIR": str(bare_repo), "GIT_WORK_TREE": spec["repos"][repo]}
                git("add", "--all", "--force", ".", extra=tree)
                git("commit", "--quiet", "--no-verify", "-m", f"resenv: bundled tree {repo}", extra=tree)
                commits[repo] = git("rev-parse", "HEAD", extra=tree)
        return bare_repo, commits[repo]

    def job(repo: str, agent: str) -> float:
        source, commit = pristine(repo)
        target = work / "jobs" / f"{repo}--{agent}" / "repo"
        started = time.perf_counter()
        git("clone", "--quiet", "--no-hardlinks", "--no-checkout", str(source), str(target))
        git("-C", str(target), "checkout", "--quiet", "--detach", commit)
        checkout_s = time.perf_counter() - started
        subprocess.run(spec["command"], check=True, stdin=subprocess.DEVNULL)
        return checkout_s

    with ThreadPoolExecutor(max_workers=spec["jobs"]) as pool:
        futures = [pool.submit(job, repo, agent) for repo, agent in spec["order"]]
        checkouts = [future.result() for future in futures]
    print(json.dumps({"checkout_s": checkouts}))


# ----------------------------------------------------------------------------- parent


def agent_names(count: int) -> list[str]:
    # write_benchmark's defaults name agent `a`; keep it as the first one.
    return ["a"] + [f"noop{index}" for index in range(1, count)]


def make_benchmark(root: Path, repos: int, agents: int, unsafe: bool) -> tuple[Path, dict[str, str]]:
    """The benchmark, and each repo id's bundled tree (the bare loop commits the same trees);
    `unsafe`: the local host's sandbox is `unsafe-process` (no bubblewrap namespace per command)."""
    from tests.conftest import write_benchmark

    trees = {f"r{index:03d}": {"main.py": MAIN, "README": f"tiny repo {index}\n"} for index in range(repos)}
    block = "".join(f"{name}:\n  kind: command\n  command: [\"true\"]\n" for name in agent_names(agents))
    path = write_benchmark(root, trees, block)
    if unsafe:
        text = path.read_text()
        host = "local: {kind: local, slots: 4, gpus: 0}"
        assert host in text, "the benchmark's local host line changed"
        path.write_text(text.replace(host, "local: {kind: local, slots: 4, gpus: 0, sandbox: unsafe-process}"))
    return path, {repo: str(root / "suites" / repo) for repo in trees}


def child_env() -> dict[str, str]:
    """The children's environment. Bytecode is cached as an installed resenv's is (pip compiles it at
    install): PYTHONDONTWRITEBYTECODE, where the shell sets it, would make every process start
    compile resenv's sources again, a quarter of a second that no installed copy pays."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    # An outer PYTHONPATH stays behind ours: it may be where resenv itself is (a checkout not pip-installed).
    paths = [str(pu.PERF_DIR), str(pu.REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def run_resenv(bench: Path, agents: list[str], work: Path, jobs: int, profile_to: Path | None = None) -> dict[str, Any]:
    db, data = work / "store.db", work / "data"
    argv = [sys.executable, str(SCRIPT), "--child", "run", str(bench), "--tiers", "none", "--jobs", str(jobs),
            "--display", "none", "--db", str(db), "--data-dir", str(data)]
    argv += [word for agent in agents for word in ("--agent", agent)]
    env = child_env()
    if profile_to is not None:
        env["PERF_PROFILE"] = str(profile_to)
    os.sync()  # the previous child's files written back first: its disk traffic is not this one's
    spawned = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"resenv run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    conn = sqlite3.connect(db)
    try:
        created = conn.execute("SELECT created_at FROM runs").fetchone()[0]
        first, last = conn.execute("SELECT MIN(started_at), MAX(finished_at) FROM attempts").fetchone()
        states = dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
        checkout = [r[0] for r in conn.execute(
            "SELECT finished_at - started_at FROM phases WHERE name = 'checkout'")]
        events = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()
    return {"wall_s": wall, "to_run_created_s": created - spawned, "to_first_job_s": first - spawned,
            "last_job_to_exit_s": spawned + wall - last, "states": states, "events": events,
            "checkout_phase_s": statistics.median(checkout)}


def run_bare(trees: dict[str, str], order: list[tuple[str, str]], work: Path, jobs: int) -> dict[str, Any]:
    spec = work / "bare.json"
    work.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"work": str(work), "repos": trees, "order": order, "jobs": jobs, "command": ["true"]}))
    os.sync()
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, str(SCRIPT), "--bare", str(spec)], env=child_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"bare loop failed ({done.returncode}):\n{done.stderr[-3000:]}")
    checkouts = json.loads(done.stdout.strip().splitlines()[-1])["checkout_s"]
    return {"wall_s": wall, "checkout_s": statistics.median(checkouts)}


def profile_text(prof: Path, tag: str) -> Path:
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(prof), stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(50)
    path = pu.RESULTS / f"{NAME}.{tag}.prof.txt"
    path.write_text(out.getvalue())
    return path


def measure(root: Path, bench: Path, trees: dict[str, str], order: list[tuple[str, str]], jobs: int,
            repeats: int) -> dict[str, Any]:
    resenv, plain, loads = [], [], []
    for repeat in range(repeats):
        pair = ("resenv", "bare") if repeat % 2 == 0 else ("bare", "resenv")  # interleaved, order alternating
        for kind in pair:
            work = root / f"j{jobs}-{repeat}-{kind}"
            if kind == "resenv":
                resenv.append(run_resenv(bench, sorted({a for _, a in order}), work, jobs))
            else:
                plain.append(run_bare(trees, order, work, jobs))
            pu.clean_up(work, keep=False)
        loads.append(os.getloadavg()[0])
    n = len(order)
    if any(row["states"] != {"done": n} for row in resenv):
        raise SystemExit(f"resenv did not run the {n} jobs the bare loop ran: {[row['states'] for row in resenv]}")
    per_job = [(r["wall_s"] - b["wall_s"]) / n for r, b in zip(resenv, plain)]

    def med(rows: list[dict[str, Any]], key: str, scale: float = 1000.0) -> float:
        return round(statistics.median(row[key] for row in rows) * scale, 2)

    return {
        "jobs_limit": jobs, "jobs": n, "repeats": repeats, "job_states": resenv[0]["states"],
        "events": resenv[0]["events"],
        "overhead_ms_per_job": round(statistics.median(per_job) * 1000, 2),
        "overhead_ms_per_job_each_repeat": [round(x * 1000, 2) for x in per_job],
        "resenv_wall_ms": med(resenv, "wall_s"), "bare_wall_ms": med(plain, "wall_s"),
        "process_start_to_run_created_ms": med(resenv, "to_run_created_s"),
        "process_start_to_first_job_ms": med(resenv, "to_first_job_s"),
        "last_job_to_process_exit_ms": med(resenv, "last_job_to_exit_s"),
        "checkout_bare_ms_per_job": med(plain, "checkout_s"),
        "checkout_resenv_phase_ms_per_job": med(resenv, "checkout_phase_s"),
        "loadavg_1min_during": [round(x, 2) for x in loads],
    }


def show(f: dict[str, Any]) -> None:
    print(f"--jobs {f['jobs_limit']}: {f['jobs']} jobs {f['job_states']} ({f['events']} events), median of {f['repeats']}")
    print(f"  wall: resenv {f['resenv_wall_ms']:.0f} ms, bare loop {f['bare_wall_ms']:.0f} ms")
    print(f"  overhead per job  {f['overhead_ms_per_job']} ms  (each repeat: {f['overhead_ms_per_job_each_repeat']})")
    print(f"  process start: -> run created {f['process_start_to_run_created_ms']} ms,"
          f" -> first job started {f['process_start_to_first_job_ms']} ms;"
          f" last job finished -> exit {f['last_job_to_process_exit_ms']} ms")
    print(f"  checkout per job: bare clone+checkout {f['checkout_bare_ms_per_job']} ms,"
          f" resenv checkout phase {f['checkout_resenv_phase_ms_per_job']} ms")
    print(f"  load average (1 min) after each repeat: {f['loadavg_1min_during']}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--bare":
        bare(Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=10)
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 4], help="concurrency values to measure")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved resenv/bare pairs per --jobs value")
    parser.add_argument("--profile", action="store_true", help="then one cProfiled resenv run per --jobs value")
    parser.add_argument("--unsafe-process", action="store_true",
                        help="the host's sandbox is unsafe-process: what the bubblewrap namespaces cost, by difference")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="resenv-perf-overhead-"))
    pu.RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        bench, trees = make_benchmark(root, args.repos, args.agents, args.unsafe_process)
        # The order resenv queues them in: suite order (repos), then agents.
        order = [(repo, agent) for repo in trees for agent in agent_names(args.agents)]
        print(f"{args.repos} repos x {args.agents} agents running `true` = {len(order)} jobs, sandbox"
              f" {'unsafe-process' if args.unsafe_process else 'process (bubblewrap)'}; load average"
              f" {[round(x, 2) for x in os.getloadavg()]}; temp dir {root}")
        runs = []
        for jobs in args.jobs:
            figures = measure(root, bench, trees, order, jobs, args.repeats)
            show(figures)
            runs.append(figures)
        for jobs in args.jobs if args.profile else []:
            prof = pu.RESULTS / f"{NAME}.j{jobs}.prof"
            run_resenv(bench, agent_names(args.agents), root / f"profile-j{jobs}", jobs, profile_to=prof)
            print(f"  profile --jobs {jobs}: {profile_text(prof, f'j{jobs}').relative_to(pu.REPO_ROOT)}")
        judged = [r for r in runs if r["jobs_limit"] == TARGET_JOBS]
        ok = bool(judged) and all(r["overhead_ms_per_job"] <= TARGET_MS for r in judged)
        print(f"\noverhead at --jobs {TARGET_JOBS}: "
              f"{[r['overhead_ms_per_job'] for r in judged] or 'not measured'} ms/job -> {pu.verdict(ok)}"
              f" (target <= {TARGET_MS:g} ms/job on an idle machine; load average now"
              f" {[round(x, 2) for x in os.getloadavg()]})")
        pu.write_result(NAME, {
            "target": {"overhead_ms_per_job_max": TARGET_MS, "at_jobs": TARGET_JOBS},
            "params": {"repos": args.repos, "agents": args.agents, "jobs": args.jobs, "repeats": args.repeats,
                       "sandbox": "unsafe-process" if args.unsafe_process else "process (bubblewrap)"},
            "pass": ok,
            "runs": runs,
        })
    finally:
        pu.clean_up(root, args.keep)


if __name__ == "__main__":
    main()
