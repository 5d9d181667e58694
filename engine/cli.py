"""The `resenv` command line: run, resume, list, show, validate and control runs."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from . import __version__, eventloop
from .controls import ACTIONS, FINISHED, checkpoint_removed, record_refused, run_tiers, tier_never_ran
from .display import NoDisplay, PlainDisplay
from .summary import summary_lines
from .cliload import load_for_cli
from .paths import UnusablePath, absolute, default_data_dir, default_db, writable_dir, writable_file
from .runs import RunPlan, create_run
from .sandbox.isolation import IsolationUnavailable, check_available
from .scheduler import STALE_AFTER_S, Engine, EngineBusy, engine_alive
from .spec import SpecLookupError
from .secrets import load_secrets
from .store import DISK_ERRNOS, StoreError, StoreReader, insert_control, store_failure
from .tiers import ALL_TIERS
from .figure import FORMATS as FIGURE_FORMATS, write_pyramid_figure
from .report_csv import TABLES, csv_table
from .scoring import choose_scoring, render, score_run
from .scorings import Scoring, ScoringLookupError, live_rescore, not_rescored, not_rescored_lines
from .scorings import header as scoring_header
from .omitted import omitted_text
from .outcomes import errors_text
from .wording import counted
from .fit import Column, fitted_table
from .views import GLYPHS, error_counts, job_rows, omitted_output, run_state

# Off a terminal (pipes, CI logs) tables keep whole ids rather than wrapping at 80 columns, unless
# COLUMNS says how wide the reader is (rich reads it when the width is left to it).
console = Console(highlight=False, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200)

db_option = click.option(
    "--db", "db_path", type=click.Path(path_type=Path), default=None,
    help="SQLite store (default: $RESENV_DB or the user data dir).",
)


_store_in_use: list[Path] = []  # the store the command works on, to name it in an error


def _db(db_path: Path | None) -> Path:
    """The store a command works on, absolute: given relative, it is resolved once, here."""
    path = absolute(db_path) if db_path is not None else default_db()
    _store_in_use[:] = [path]
    return path


def _reader(db_path: Path | None) -> StoreReader:
    try:
        return StoreReader(_db(db_path))
    except StoreError as error:
        raise click.ClickException(str(error)) from error


def _open_run(db_path: Path | None, run_ref: str) -> tuple[StoreReader, dict[str, Any]]:
    """The store and the run `run_ref` names, its state as `runs` says it (`views.run_state`); a
    missing store or run is a CLI error, not a traceback."""
    reader = _reader(db_path)
    try:
        run_row = reader.resolve_run(run_ref)
    except StoreError as error:
        raise click.ClickException(str(error)) from error
    return reader, run_row | {"state": run_state(run_row)}


scoring_option = click.option(
    "--scoring", "scoring_ref", default="latest", show_default=True, metavar="original|latest|N",
    help="Which scoring of the run: what it recorded (original), its newest finished rescore (latest), "
         "or rescore N.",
)


def _scoring(reader: StoreReader, run_id: str, ref: str) -> tuple[Scoring, list[Scoring]]:
    try:
        return choose_scoring(reader, run_id, ref)
    except ScoringLookupError as error:
        raise click.ClickException(str(error)) from error


class ResenvGroup(click.Group):
    """A store or a disk that cannot be used (full, read-only, corrupt, locked, a directory) ends any
    command with one line on stderr and exit status 1, never with a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StoreError, EngineBusy) as error:
            raise click.ClickException(_one_line(error)) from error
        except sqlite3.Error as error:
            failure = store_failure(error, _store_in_use[0] if _store_in_use else default_db())
            if failure is None:
                raise
            raise click.ClickException(_one_line(failure)) from error
        except OSError as error:
            if error.errno not in DISK_ERRNOS | {errno.EACCES, errno.EPERM}:
                raise
            where = f": {error.filename}" if error.filename else ""
            raise click.ClickException(f"{error.strerror or error}{where}") from error


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


@click.group(cls=ResenvGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="resenv")
def main() -> None:
    """Benchmark and supervise coding agents that build environments for research repositories."""


@main.command()
@click.argument("benchmark", type=click.Path(path_type=Path), default="benchmark.yaml", required=False)
@click.option("--suite", help="Suite to run (default: the benchmark's defaults.suite).")
@click.option("--agent", "agents", multiple=True, help="Agent(s) to run; repeat for several.")
@click.option("--repo", "repos", multiple=True, help="Only these repo ids of the suite; repeat for several.")
@click.option("--host", "hosts", multiple=True, help="Host(s) to use; repeat for several (default: defaults.host).")
@db_option
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="Where raw logs and work dirs go.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Jobs at once (default: defaults.concurrency).")
@click.option("--display", type=click.Choice(["tui", "plain", "none"]), default=None,
              help="tui: the live dashboard (default on a terminal); plain: a line per phase, tier verdict and "
                   "attempt end, then a summary (default elsewhere).")
@click.option("--resume", "resume_id", metavar="RUN", help="Resume an interrupted run instead of starting one.")
@click.option("--name", help="A name for the run.")
@click.option("--tiers", "tiers_text", default="all", show_default=True, metavar="LIST",
              help="Tiers to score: `all`, `none`, or a comma list such as C0,C1,C5.")
@click.option("--dry-run", is_flag=True, help="Print the job plan (jobs, tiers, GPUs, assets) and exit; "
              "touches neither the store nor the network.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as one JSON object.")
def run(
    benchmark: Path, suite: str | None, agents: tuple[str, ...], repos: tuple[str, ...], hosts: tuple[str, ...],
    db_path: Path | None,
    data_dir: Path | None, jobs: int | None, display: str | None, resume_id: str | None, name: str | None,
    tiers_text: str, dry_run: bool = False, as_json: bool = False,
) -> None:
    """Run a suite of repo tasks × agents (or --resume one), recording everything in the store."""
    db = _db(db_path)
    if resume_id and dry_run:
        raise click.ClickException("--dry-run plans a new run; it does not go with --resume")
    if as_json and not dry_run:
        raise click.ClickException("--json goes with --dry-run (a run's results: `resenv show --json`)")
    if resume_id:
        if not db.exists():
            raise click.ClickException(f"no run {resume_id!r}: there is no resenv database at {db} "
                                       "(--db or RESENV_DB names the store the run is in)")
        try:
            reader = _reader(db)
        except click.ClickException as error:  # the store cannot even be read: nothing was touched
            raise click.ClickException(f"{error.message}; run {resume_id} was not resumed: "
                                       f"`resenv run --resume {resume_id}` once that is fixed") from error
        try:
            run_row = reader.resolve_run(resume_id)
            _refuse_new_run_options(click.get_current_context(), run_row)
            done = _nothing_to_resume(reader, run_row)
        except StoreError as error:
            raise click.ClickException(str(error)) from error
        finally:
            reader.close()
        if done is not None:
            click.echo(done)
            return
        run_id = run_row["id"]
    else:
        bench = load_for_cli(benchmark)
        plan = RunPlan(
            suite=suite or bench.defaults.suite,
            agents=list(agents) or [bench.defaults.agent],
            hosts=list(hosts) or [bench.defaults.host],
            jobs=jobs, name=name, tiers=parse_tiers(tiers_text), repos=repos,
        )
        data_root = absolute(data_dir) if data_dir else default_data_dir()
        if dry_run:
            from .assets import AssetCache
            from .dryrun import plan_jobs, render_plan
            try:
                planned = plan_jobs(bench, plan, AssetCache.under(data_root))
            except SpecLookupError as error:
                raise click.ClickException(str(error)) from error
            click.echo(json.dumps(planned.to_json(), indent=2) if as_json else render_plan(planned), nl=not as_json)
            return
        _check_secrets(bench, plan.agents)
        _check_sandboxes(bench, plan.hosts)
        try:  # before the run's row is written: a bad data dir must not leave a run stuck `queued`
            writable_dir(data_root, "the data dir")
        except UnusablePath as error:
            raise click.ClickException(str(error)) from error
        try:
            run_id = create_run(bench, plan, db, data_root)
        except SpecLookupError as error:
            raise click.ClickException(str(error)) from error
    if display is None:
        display = "tui" if sys.stdout.isatty() and sys.stdin.isatty() else "plain"
    try:
        if display == "tui":
            from ..tui.app import run_with_engine  # Textual loads only when the dashboard is wanted

            state = run_with_engine(db, run_id, jobs_limit=jobs)
            if state is not None:  # the dashboard is gone: the run's result stays on the terminal
                for line in summary_lines(db, run_id):
                    click.echo(line)
        else:
            shown = PlainDisplay() if display == "plain" else NoDisplay()
            try:
                state = eventloop.run(Engine(db, run_id, shown, jobs_limit=jobs).execute())
            finally:
                if isinstance(shown, PlainDisplay):
                    shown.close()  # an engine that raised never said `finished`
    except EngineBusy as error:
        raise click.ClickException(str(error)) from error
    if state == "interrupted":
        sys.exit(EXIT_INTERRUPTED)
    errors = _jobs_in_error(db, run_id)
    if errors:
        click.echo(f"resenv: {errors[0]} of {errors[1]} jobs ended in error (their reasons are above;"
                   f" `resenv show {run_id}` lists them)", err=True)
        sys.exit(EXIT_JOBS_IN_ERROR)


EXIT_JOBS_IN_ERROR = 3
"""`resenv run`: the run finished, and at least one job ended in `error` (0: every job ended done or
cancelled; 1: resenv could not run it, with a one-line reason; 2: a usage error; 130: interrupted)."""
EXIT_INTERRUPTED = 130


def _jobs_in_error(db: Path, run_id: str) -> tuple[int, int] | None:
    """(jobs in error, jobs) of a finished run; None when none ended in error."""
    from .store import connect

    conn = connect(db, readonly=True)
    try:
        errors, total = conn.execute("SELECT SUM(state = 'error'), COUNT(*) FROM jobs WHERE run_id = ?",
                                     (run_id,)).fetchone()
    finally:
        conn.close()
    return (errors, total) if errors else None


RESUME_KEEPS = {"benchmark": "BENCHMARK", "suite": "--suite", "agents": "--agent", "repos": "--repo",
                "hosts": "--host", "name": "--name", "data_dir": "--data-dir", "tiers_text": "--tiers"}
"""What a resumed run keeps from its start (stored with it): given again on resume, it is refused."""


def _refuse_new_run_options(ctx: click.Context, run_row: dict[str, Any]) -> None:
    """`run --resume` with an option that shapes a new run is one line, not an option silently ignored;
    `--tiers` naming the run's own tiers changes nothing and is let through."""
    for param, shown in RESUME_KEEPS.items():
        if ctx.get_parameter_source(param) != click.core.ParameterSource.COMMANDLINE:
            continue
        if param == "tiers_text" and parse_tiers(ctx.params[param]) == run_tiers(run_row):
            continue
        raise click.ClickException(f"{shown} cannot change on resume: run {run_row['id']} keeps what it started "
                                   "with (start a new run for other ones)")


# What a narrow terminal keeps: ids, states and every tier; then the reason, money, time, tokens, the host.
RUNS_COLUMNS = [Column("run"), Column("name", 1), Column("state"), Column("jobs", 2, "right"),
                Column("done", 3, "right"), Column("error", 2, "right"), Column("started", 5), Column("duration", 4)]
SHOW_COLUMNS = [Column("job"), Column("host:gpus", 5), Column("state"), *(Column(tier) for tier in ALL_TIERS),
                Column("attempt", 7, "right"), Column("agent s", 6, "right"), Column("tokens", 4, "right"),
                Column("cost", 2, "right"), Column("elapsed", 3, "right"), Column("reason", 1)]


def _nothing_to_resume(reader: StoreReader, run_row: dict[str, Any]) -> str | None:
    """Why `run --resume` has nothing to do, or None: a finished or cancelled run is over, and resuming
    it must change nothing (not its stored duration, not a pause queued for it), unless a retry was
    queued for it since (`resenv control retry`), which the resume is there to apply."""
    if run_row["state"] not in ENDED_RUN_STATES or engine_alive(run_row):
        return None
    if live_rescore(reader.rows, run_row["id"], STALE_AFTER_S) is not None:
        return None  # the engine refuses it, naming the rescore that holds the run
    retries = reader.rows("SELECT COUNT(*) AS n FROM controls WHERE run_id = ? AND acked_at IS NULL"
                          " AND action = 'retry'", (run_row["id"],))[0]["n"]
    if retries:
        return None
    return (f"run {run_row['id']} {_ended(run_row['state'])}: nothing to resume, nothing changed "
            f"(`resenv show {run_row['id']}`; `resenv control retry {run_row['id']} JOB` runs a job again)")


def _check_sandboxes(bench: Any, hosts: list[str]) -> None:
    """Refuse to start when a local host's default sandbox cannot isolate: a setup error, not jobs to fail."""
    for name in hosts:
        spec = bench.hosts.get(name)
        if getattr(spec, "kind", None) == "local" and getattr(spec, "sandbox", None) == "process":
            try:
                check_available()
            except IsolationUnavailable as error:
                raise click.ClickException(f"host {name}: {error}") from error
            return


def _check_secrets(bench: Any, agents: list[str]) -> None:
    """Refuse to start when an agent's key is missing: a config error, not a job to retry."""
    problems = []
    for name in agents:
        try:
            spec = bench.agent(name)
        except SpecLookupError as error:
            raise click.ClickException(str(error)) from error
        env_file = getattr(spec, "env_file", None)
        found = load_secrets(getattr(spec, "env_from", ()), bench.base_dir / env_file if env_file else None)
        problems += [f"agent {name!r}: {problem}" for problem in found.problems]
    if problems:
        raise click.ClickException("cannot start: " + "; ".join(problems))


def parse_tiers(text: str) -> tuple[str, ...]:
    """`all`, `none` or a comma list of tier names (any case), returned in pyramid order. An empty
    list is an error rather than `none`, and an unknown name is echoed as the user spelled it."""
    if text.strip().lower() == "all":
        return ALL_TIERS
    if text.strip().lower() == "none":
        return ()
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise click.BadParameter("--tiers is empty; give `all`, `none` or a list such as C0,C1,C5",
                                 param_hint="--tiers")
    unknown = [part for part in parts if part.upper() not in ALL_TIERS]
    if unknown:
        raise click.BadParameter(f"unknown tier(s) {', '.join(unknown)}; choose from {', '.join(ALL_TIERS)}"
                                 " (`all` and `none` stand alone)", param_hint="--tiers")
    chosen = {part.upper() for part in parts}
    return tuple(tier for tier in ALL_TIERS if tier in chosen)


@main.command()
@click.argument("benchmark", type=click.Path(path_type=Path), default="benchmark.yaml", required=False)
def validate(benchmark: Path) -> None:
    """Check a benchmark file; print every error with its line and field."""
    bench = load_for_cli(benchmark)
    repos = sum(len(suite.repos) for suite in bench.suites.values())
    console.print(f"{benchmark}: ok ({counted(len(bench.suites), 'suite')}, {counted(repos, 'repo task')}, "
                  f"{counted(len(bench.agents), 'agent')}, {counted(len(bench.hosts), 'host')})")


@main.command("runs")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: a list of runs.")
def list_runs(db_path: Path | None, as_json: bool) -> None:
    """List the runs in the store, newest first (none yet when there is no store)."""
    db = _db(db_path)
    if not db.exists():  # a store is made by the first run: before it, there are no runs, not an error
        click.echo("[]" if as_json else f"no runs yet: there is no store at {db} (`resenv run` makes it)")
        return
    reader = _reader(db)
    cells = []
    listed = []
    for run_row in reader.runs():
        counts = {row["state"]: row["n"] for row in reader.rows(
            "SELECT state, COUNT(*) AS n FROM jobs WHERE run_id = ? GROUP BY state", (run_row["id"],))}
        state = run_state(run_row)
        started, finished = run_row["started_at"], run_row["finished_at"]
        listed.append({"id": run_row["id"], "name": run_row["name"], "state": state, "jobs": sum(counts.values()),
                       "jobs_by_state": counts, "started_at": started, "finished_at": finished,
                       "duration_s": None if not started else round((finished or time.time()) - started, 3)})
        cells.append([
            run_row["id"], run_row["name"], state, str(sum(counts.values())), str(counts.get("done", 0)),
            str(counts.get("error", 0)), _when(started), _duration(run_row),
        ])
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    console.print(fitted_table(RUNS_COLUMNS, cells, console.width))


@main.command()
@click.argument("run_ref", metavar="[RUN]", default="latest", required=False)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@scoring_option
def show(run_ref: str, db_path: Path | None, as_json: bool, scoring_ref: str = "latest") -> None:
    """Per-job table of a run (default: the latest) with one glyph per tier C0–C5, from one scoring."""
    reader, run_row = _open_run(db_path, run_ref)
    chosen, scorings = _scoring(reader, run_row["id"], scoring_ref)
    rows = job_rows(reader, run_row["id"], chosen)
    omitted = omitted_output(reader, run_row["id"])
    for row in rows:
        row["omitted_output"] = omitted.get(row["id"], [])
    lines = [scoring_header(chosen, scorings), *not_rescored_lines(not_rescored(reader.rows, chosen))]
    errors = error_counts(rows)
    if as_json:  # numbers as numbers (null: unknown), never as the text a table prints
        scoring = chosen.to_json() | {"header": lines[0], "original_rules_version": scorings[0].rules_version}
        jobs = [{key: value for key, value in row.items() if not key.endswith("_text") or key == "state_text"}
                for row in rows]
        run_json = {key: value for key, value in run_row.items() if key not in ("spec_json", "options_json")}
        run_json["options"] = json.loads(run_row["options_json"]) if run_row["options_json"] else None
        click.echo(json.dumps({"run": run_json, "scoring": scoring, "jobs": jobs, "errors": errors,
                               "not_rescored": not_rescored(reader.rows, chosen)}, indent=2, default=str))
        return
    console.print(f"run {run_row['id']} · {run_row['name']} · {run_row['state']} · {run_row['data_dir']}")
    for line in lines:
        console.print(line, markup=False)
    cells = [[
        row["key"], row["where"], row["state_text"], *(GLYPHS.get(row["tiers"][tier], "?") for tier in ALL_TIERS),
        str(row["attempts"]), row["agent_time_text"], row["tokens_text"], row["cost_text"], row["elapsed_text"],
        row["reason"] or "",
    ] for row in rows]
    console.print(fitted_table(SHOW_COLUMNS, cells, console.width))
    console.print("tiers: ✓ pass  ✗ fail  – skip  ! error  · not scored")
    for agent, counts in errors.items():
        console.print(f"{agent}: {errors_text(counts)}", markup=False)
    if omitted:
        console.print("output left out of the store by the output budget (defaults.output; the raw logs"
                      " keep every byte):", markup=False)
        for row in rows:
            for entry in row["omitted_output"]:
                console.print(f"  {row['key']}  {entry['log']}.{entry['stream']}: "
                              f"{omitted_text(entry['lines'], entry['bytes'])}", markup=False)
    flagged = [row for row in rows if row["findings"]]
    if flagged:
        console.print("integrity findings (the probes judged the repo as pinned; see docs in README, 'Integrity'):",
                      markup=False)
        for row in flagged:
            for finding in row["findings"]:
                console.print(f"  {row['key']}: {finding['kind']} {finding['path']} → {finding['action']}", markup=False)


@main.command()
@click.argument("run_ref", metavar="[RUN]", default="latest", required=False)
@db_option
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json", "latex"]), default="md", show_default=True)
@click.option("--table", type=click.Choice(TABLES), default=None,
              help="With --format csv: which table the file holds (default: summary, one row per agent).")
@click.option("--figure", type=click.Path(path_type=Path),
              help="Also write the pyramid figure (.png, .svg or .pdf, by the suffix).")
@scoring_option
def report(run_ref: str, db_path: Path | None, fmt: str, figure: Path | None, scoring_ref: str = "latest",
           table: str | None = None) -> None:
    """Scores of a run: per agent C0 ratios, C1–C4 pass rates with denominators, C5 hallucinations;
    from its latest scoring unless --scoring names another, and saying which."""
    if figure is not None and figure.suffix.lower() not in FIGURE_FORMATS:  # before anything is printed
        raise click.BadParameter("the figure must end in .png, .svg or .pdf", param_hint="--figure")
    if figure is not None:
        try:
            figure = writable_file(figure, "the figure")
        except UnusablePath as error:
            raise click.ClickException(str(error)) from error
    if table is not None and fmt != "csv":
        raise click.BadParameter("--table chooses a CSV table; it goes with --format csv", param_hint="--table")
    reader, run_row = _open_run(db_path, run_ref)
    chosen, _ = _scoring(reader, run_row["id"], scoring_ref)
    scores = replace(score_run(reader, run_row["id"], chosen), run=run_row)  # the state as `runs` says it
    click.echo(csv_table(scores, table or "summary") if fmt == "csv" else render(scores, fmt), nl=False)
    if figure is not None:
        try:
            write_pyramid_figure(scores, figure)
        except OSError as error:  # the disk filled or the directory went away since the check
            raise click.ClickException(f"cannot write the figure {figure}: {error.strerror or error}") from error
        click.echo(f"figure written to {figure}", err=True)


@main.command()
@click.argument("run_ref", metavar="RUN")
@db_option
@click.option("--tiers", "tiers_text", default="all", show_default=True, metavar="LIST",
              help="Tiers to judge again: `all` (every tier the run scored) or a comma list of them.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Jobs judged at once (default: the run's).")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
def rescore(run_ref: str, db_path: Path | None, tiers_text: str, jobs: int | None, as_json: bool) -> None:
    """Judge the kept post-agent state of every job of a run again, with the current rules, into a new
    scoring (`rescore N`); the agent never runs again and the run's own results stay as they were.
    Prints what changed against the original scoring, per job and tier and in pass rates per agent."""
    from .rescore import Rescorer, RescoreRefused
    from .scoring_diff import compare_scorings, render_json, render_text

    db = _db(db_path)
    reader, run_row = _open_run(db_path, run_ref)
    reader.close()
    tiers = None if tiers_text == "all" else parse_tiers(tiers_text)
    # progress goes to stderr: stdout holds the report alone (JSON with --json)
    progress = PlainDisplay(Console(file=sys.stderr, highlight=False, width=None if sys.stderr.isatty() else 200))
    rescorer = Rescorer(db, run_row["id"], progress, tiers=tiers, jobs_limit=jobs)
    try:
        state = eventloop.run(rescorer.execute())
    except (EngineBusy, RescoreRefused) as error:
        raise click.ClickException(str(error)) from error
    reader = _reader(db_path)
    try:
        scorings = choose_scoring(reader, run_row["id"])[1]
        new = next(scoring for scoring in scorings if scoring.id == rescorer.scoring_id)
        diff = compare_scorings(reader, run_row["id"], scorings[0], new)
    finally:
        reader.close()
    click.echo(render_json(diff) if as_json else render_text(diff), nl=as_json)
    if state == "interrupted":
        sys.exit(130)
    if state == "empty":  # no job's kept state could be judged: nothing to read, and scripts should know
        sys.exit(1)


@main.command()
@click.argument("action", type=click.Choice(sorted(ACTIONS)))
@click.argument("run_ref", metavar="RUN")
@click.argument("job_ref", metavar="[JOB]", required=False)
@db_option
@click.option("--tier", type=click.Choice(ALL_TIERS), help="With retry: re-run only this tier on the kept state.")
@click.option("--wait", "wait_s", type=float, default=5.0, show_default=True,
              help="Seconds to wait for the engine's acknowledgement (0: don't wait).")
def control(
    action: str, run_ref: str, job_ref: str | None, db_path: Path | None, tier: str | None, wait_s: float,
) -> None:
    """Pause, resume or cancel a run or a job; retry a job or one of its tiers. The engine applies it
    and acknowledges."""
    reader = _reader(db_path)
    try:
        run_row = reader.resolve_run(run_ref)
        job = reader.resolve_job(run_row["id"], job_ref) if job_ref else None
    except StoreError as error:
        raise click.ClickException(str(error)) from error
    if action == "retry" and job is None:
        raise click.ClickException("retry needs a JOB")
    if tier and action != "retry":
        raise click.ClickException("--tier goes with retry")
    if action != "retry" and run_row["state"] in ENDED_RUN_STATES and not engine_alive(run_row):
        # nothing runs to pause, resume or cancel, and a resume must not find it queued
        raise click.ClickException(f"{action}: run {run_row['id']} {_ended(run_row['state'])}; there is nothing to {action}"
                                   " (a job or a tier can still be retried)")
    if tier and job is not None and (never := _tier_never_ran(reader, run_row, job, tier)) is not None:
        record_refused(_db(db_path), run_row["id"], action, never, job_id=job["id"], tier=tier)
        click.echo(f"{action} job {job['key']} tier {tier}: rejected — {never}")
        sys.exit(1)
    control_id = insert_control(_db(db_path), run_row["id"], action, job_id=job["id"] if job else None, tier=tier)
    target = f"job {job['key']}" if job else f"run {run_row['id']}"
    if tier:
        target += f" tier {tier}"
    if not engine_alive(run_row):
        console.print(f"{action} {target}: queued (no engine is running this run; "
                      f"`resenv run --resume {run_row['id']}` applies it)")
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        acked = reader.rows("SELECT ack, ack_message FROM controls WHERE id = ?", (control_id,))[0]
        if acked["ack"]:
            console.print(f"{action} {target}: {acked['ack']} — {acked['ack_message']}")
            if acked["ack"] != "applied":
                sys.exit(1)
            return
        time.sleep(0.1)
    console.print(f"{action} {target}: sent, not yet acknowledged")


ENDED_RUN_STATES = frozenset({"finished", "cancelled"})
"""A run in one of these states is over for good (an interrupted one can still be resumed)."""


def _ended(state: str) -> str:
    """`has finished` or `was cancelled`: how a message says that a run is over."""
    return "was cancelled" if state == "cancelled" else f"has {state}"


def _tier_never_ran(reader: StoreReader, run_row: dict[str, Any], job: dict[str, Any], tier: str) -> str | None:
    """Refuse here a retry of a tier that never ran, once the job has finished (else the engine decides)."""
    if tier not in run_tiers(run_row) or job["state"] in FINISHED:
        return tier_never_ran(reader.rows, run_row, job, tier) or checkpoint_removed(reader.rows, run_row, job)
    return None


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "—"


def _duration(run_row: dict) -> str:
    if not run_row["started_at"]:
        return "—"
    end = run_row["finished_at"] or time.time()
    return f"{end - run_row['started_at']:.1f}s"


@main.command()
@click.argument("run_ref", metavar="RUN")
@db_option
def prune(run_ref: str, db_path: Path | None) -> None:
    """Remove a finished run's checkpoint images and leftover containers from its docker hosts
    (kept so that any tier can be re-run after the run ended)."""
    from .prune import PruneRefused, prune_run, record_pruned

    reader, run_row = _open_run(db_path, run_ref)
    holder = live_rescore(reader.rows, run_row["id"], STALE_AFTER_S)
    reader.close()
    if holder is not None:  # it is judging those very checkpoints
        raise click.ClickException(f"run {run_row['id']} is being rescored ({holder['label']}) by PID "
                                   f"{holder['engine_pid']}; prune it once that ends")
    try:
        results = eventloop.run(prune_run(run_row))
    except PruneRefused as error:
        raise click.ClickException(str(error)) from error
    if not results:
        click.echo(f"run {run_row['id']} has no docker hosts: nothing to prune")
    record_pruned(_db(db_path), run_row["id"], results)
    failed = False
    for host, done in results.items():
        if "error" in done:
            failed = True
            click.echo(f"{host}: {done['error']}")
        else:
            click.echo(f"{host}: removed {counted(len(done['images']), 'image')}, "
                       f"{counted(len(done['containers']), 'container')}")
    if failed:
        sys.exit(1)


# `resenv hosts check [BENCHMARK]`: reach each host and report what it offers
from .hostcheck import hosts_group  # noqa: E402

main.add_command(hosts_group)

# `resenv assets fetch|status|pin`: fill and inspect the per-host asset cache before scoring
from .assets_cli import assets_group  # noqa: E402

main.add_command(assets_group)

# `resenv image build`: an image for docker hosts, made without pulling
from .image_cli import image_group  # noqa: E402

main.add_command(image_group)


if __name__ == "__main__":
    main()
