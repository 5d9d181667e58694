"""The paper-cpu evidence table: one row per repo of a run, ours beside the paper's, checkable by hand.

`resenv report` gives the pyramid; a reader checking the evidence also needs, per repo, the numbers
behind each verdict and where to look: C0's missing imports out of our census total beside the
paper's own census total (suites/paper/census.json ``paper_total``), the third-party part of it,
C1's status and category with its raw log and that log's last meaningful line (so the category can
be checked by reading one line), C5's verdict, the agent's and the job's time, and what the baseline
agent itself says it did (its report.json's ``baseline`` object: ``failures`` today; ``pip_check``,
``imports_missing`` and ``conflicts`` where the agent writes them, shown as "—" where it does not).

Everything is read through resenv's own code (the store reader, the scoring chooser, the per-job view
`resenv show` prints) and the files the engine keeps: the tier evidence in the store, each job's
raw logs and the report.json the agent left in its attempt's work dir (``<data dir>/<run>/jobs/
<repo>--<agent>/attempt-<n>/work/report.json``).

Usage::

    python docs/evidence/paper-cpu/table.py --db run/resenv.db [--run RUN] [--report run/report.json] [--out run/] \\
        [--harness DIR]

With --harness (the paper harness, fetched: a work tree or a bare git dir) it also runs the harness's
own C0 on each job's env and tree (harness_c0.sh) and adds its missing count as a column.

It prints the markdown and, with --out, writes table.md and table.json there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from resenv.engine.results.scoring import choose_scoring
from resenv.engine.store.db import StoreReader
from resenv.engine.results.views import job_rows

HERE = Path(__file__).resolve().parent
CENSUS = HERE.parents[2] / "suites" / "paper" / "census.json"
NOISE = ("warning: location 'file://", "[notice]", "warning: ignoring invalid distribution")


def census_by_repo() -> dict[str, dict[str, Any]]:
    return {repo["id"]: repo for repo in json.loads(CENSUS.read_text())["repos"]}


def last_meaningful_line(log: str | None) -> str | None:
    """The last line of a raw log that says something: not blank, not pip's index-location noise."""
    if not log:
        return None
    path = Path(log)
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 65536))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError as error:
        return f"(unreadable: {error.strerror or error})"
    for line in reversed(lines):
        text = line.strip()
        if text and not text.lower().startswith(NOISE):
            return text[:300]
    return None


def tier_logs(evidence: dict[str, Any]) -> tuple[str | None, str | None]:
    """The tier's raw logs kept by the engine: (stdout, stderr), either None when absent."""
    logs = [str(log) for log in evidence.get("logs") or []]
    return (next((log for log in logs if log.endswith(".stdout")), None),
            next((log for log in logs if log.endswith(".stderr")), None))


def c1_log(evidence: dict[str, Any]) -> tuple[str | None, str | None]:
    """C1's log to read and its last meaningful line: stderr (where a traceback goes) when it says
    something, else stdout."""
    out, err = tier_logs(evidence)
    for log in (err, out):
        line = last_meaningful_line(log)
        if line:
            return log, line
    return err or out, None


def read_report(workdir: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The agent's report.json in its attempt's work dir: (object or None, path)."""
    if not workdir:
        return None, None
    path = Path(workdir) / "report.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, str(path)
    return (data if isinstance(data, dict) else None), str(path)


def baseline_summary(report: dict[str, Any] | None) -> dict[str, Any]:
    """The report's `baseline` object, read defensively: each field None when absent or mistyped."""
    base = report.get("baseline") if isinstance(report, dict) else None
    base = base if isinstance(base, dict) else {}

    def listed(key: str) -> list[Any] | None:
        value = base.get(key)
        return value if isinstance(value, list) else None

    pip = base.get("pip_check")
    pip = pip if isinstance(pip, dict) else None
    return {
        "present": bool(base),
        "final": base.get("final"),
        "pip_check": None if pip is None else {"ok": pip.get("ok"), "problems": [str(p) for p in pip.get("problems") or []]},
        "imports_missing": [str(name) for name in listed("imports_missing")] if listed("imports_missing") is not None else None,
        "conflicts": [c for c in listed("conflicts") or [] if isinstance(c, dict)] if listed("conflicts") is not None else None,
        "failures": [f for f in listed("failures") or [] if isinstance(f, dict)] if listed("failures") is not None else None,
        "seconds": base.get("seconds"),
    }


def harness_c0(harness: Path, workdir: str | None, report: dict[str, Any] | None, slug: str | None) -> dict[str, Any] | None:
    """The paper harness's C0 on the job's env and tree (harness_c0.sh), or None without an env."""
    python = report.get("python_path") if isinstance(report, dict) else None
    if not workdir or not slug or not isinstance(python, str) or not Path(python).exists():
        return None
    bundle = slug.replace("/", "@")  # the harness names each repo's bundle scripts/<owner>@<name>
    command = ["bash", str(HERE / "harness_c0.sh"), "--harness", str(harness), "--repo", str(Path(workdir) / "repo"),
               "--python", python, "--bundle", bundle]
    found = subprocess.run(command, capture_output=True, text=True, timeout=900)
    match = re.search(r"^harness C0 \S+: missing (\d+) \(of (\S+) in", found.stdout, re.M)
    names = re.search(r"^missing: (.*)$", found.stdout, re.M)
    return {"missing_count": int(match.group(1)) if match else None, "scan_total": match.group(2) if match else None,
            "missing": [] if not names or names.group(1) == "none" else names.group(1).split(", "),
            "output_tail": (found.stdout + found.stderr)[-2000:] if not match else None}


def collect(db: Path, run_ref: str, harness: Path | None = None) -> dict[str, Any]:
    reader = StoreReader(db)
    run = reader.resolve_run(run_ref)
    scoring, _ = choose_scoring(reader, run["id"])
    where, params = scoring.where()
    evidence: dict[int, dict[str, dict[str, Any]]] = {}
    for row in reader.rows(
        f"SELECT t.job_id, t.tier, t.status, t.category, t.evidence_json, a.workdir, a.number FROM tier_results t"
        f" JOIN attempts a ON a.id = t.attempt_id WHERE t.run_id = ? AND {where} ORDER BY t.id", (run["id"], *params)
    ):
        evidence.setdefault(row["job_id"], {})[row["tier"]] = {
            "status": row["status"], "category": row["category"], "workdir": row["workdir"], "attempt": row["number"],
            "evidence": json.loads(row["evidence_json"] or "{}"),
        }
    last_workdir = {row["job_id"]: row["workdir"] for row in reader.rows(
        "SELECT job_id, workdir FROM attempts WHERE run_id = ? AND scope = 'job' ORDER BY number", (run["id"],))}
    census = census_by_repo()
    repos = []
    for job in job_rows(reader, run["id"], scoring):
        tiers = evidence.get(job["id"], {})
        c0, c1, c5 = (tiers.get(t) for t in ("C0", "C1", "C5"))
        counted = census.get(job["repo_id"], {})
        third_party = set(counted.get("modules", {}).get("third_party", []))
        row: dict[str, Any] = {
            "repo": job["repo_id"], "agent": job["agent"], "state": job["state_text"], "reason": job["reason"],
            "census_total": counted.get("paper_compatible_total"), "census_third_party": counted.get("third_party_total"),
            "paper_total": counted.get("paper_total"), "census_counted_by_paper": counted.get("counted"),
            "agent_s": job["agent_seconds"], "job_s": job["elapsed_s"],
        }
        if c0:
            ev = c0["evidence"]
            missing, source = set(ev.get("missing") or []), set(ev.get("missing_source") or [])
            row["C0"] = {"status": c0["status"], "category": c0["category"], "missing": sorted(missing),
                         "missing_count": len(missing), "missing_source": sorted(source),
                         "third_party_missing": sorted((missing | source) & third_party),
                         "paper_ratio": ev.get("paper_ratio"), "third_party_ratio": ev.get("third_party_ratio")}
        if c1:
            log, line = c1_log(c1["evidence"])
            row["C1"] = {"status": c1["status"], "category": c1["category"], "log": log, "last_line": line,
                         "reason": job["tier_reasons"].get("C1")}
        if c5:
            ev = c5["evidence"]
            row["C5"] = {"status": c5["status"], "category": c5["category"],
                         "hallucinations": ev.get("hallucinations") if isinstance(ev.get("hallucinations"), (dict, list)) else None,
                         "reason": job["tier_reasons"].get("C5")}
        workdir = next((t["workdir"] for t in tiers.values() if t.get("workdir")), None) or last_workdir.get(job["id"])
        report, report_path = read_report(workdir)
        row["agent_report"] = report_path
        row["baseline"] = baseline_summary(report)
        if harness is not None:
            row["harness_C0"] = harness_c0(harness, workdir, report, counted.get("slug"))
            print(f"harness C0 {job['repo_id']}: {_harness_cell(row['harness_C0'])}", file=sys.stderr)
        repos.append(row)
    return {"run": run["id"], "state": run["state"], "scoring": scoring.to_json(), "db": str(db), "repos": repos}


def _cell(value: Any) -> str:
    return "—" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}s"


def _names(values: list[str] | None, limit: int = 6) -> str:
    if values is None:
        return "—"
    if not values:
        return "none"
    shown = ", ".join(values[:limit])
    return f"{len(values)}: {shown}" + (f", … +{len(values) - limit}" if len(values) > limit else "")


def _harness_cell(found: dict[str, Any] | None) -> str:
    if found is None:
        return "no env"
    if found["missing_count"] is None:
        return "did not run"
    return f"{found['missing_count']} ({', '.join(found['missing'][:6]) or 'none'})"


def _rel(path: str | None, base: Path | None) -> str | None:
    """`path` relative to the run dir when it lies there (logs.tgz unpacks to the same place)."""
    if path and base is not None:
        try:
            return str(Path(path).resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return path


def markdown(data: dict[str, Any], base: Path | None = None) -> str:
    harness = any("harness_C0" in r for r in data["repos"])
    head = (f"# paper-cpu: baseline on {len(data['repos'])} paper repos (C0, C1, C5)\n\n"
            f"run `{data['run']}` ({data['state']}), scoring {data['scoring'].get('label') or data['scoring']}\n\n"
            "| repo | state | C0 missing / census (ours) | paper census | C0 3rd-party missing | C1 | C5 | agent | job "
            "| pip check | imports missing (baseline) | conflicts | failures (baseline) |"
            + (" harness C0 missing |" if harness else "") + "\n"
            + "|---" * (14 if harness else 13) + "|\n")
    rows, details = [], []
    for r in data["repos"]:
        c0, c1, c5, b = r.get("C0"), r.get("C1"), r.get("C5"), r["baseline"]
        c0_cell = f"{c0['missing_count']}/{_cell(r['census_total'])} ({c0['status']})" if c0 else "·"
        tp = f"{len(c0['third_party_missing'])}/{_cell(r['census_third_party'])}" if c0 else "·"
        c1_cell = f"{c1['status']}/{c1['category']}" if c1 and c1["category"] else (c1["status"] if c1 else "·")
        c5_cell = f"{c5['status']}/{c5['category']}" if c5 and c5["category"] else (c5["status"] if c5 else "·")
        pip = b["pip_check"]
        pip_cell = "—" if pip is None else ("ok" if pip["ok"] else f"{len(pip['problems'])} problems")
        conflicts = b["conflicts"]
        conf_cell = "—" if conflicts is None else (str(len(conflicts)) if conflicts else "none")
        failures = b["failures"]
        fail_cell = "—" if failures is None else ("none" if not failures else "; ".join(
            f"{f.get('step')}: {f.get('category')}" for f in failures))
        paper = _cell(r["paper_total"]) + ("" if r["census_counted_by_paper"] in (True, None) else " (not counted)")
        rows.append("| " + " | ".join(_cell(x) for x in (
            r["repo"], r["state"], c0_cell, paper, tp, c1_cell, c5_cell, _seconds(r["agent_s"]), _seconds(r["job_s"]),
            pip_cell, _names(b["imports_missing"]), conf_cell, fail_cell,
            *([_harness_cell(r.get("harness_C0"))] if harness else []))) + " |")
        lines = [f"### {r['repo']}", ""]
        if r["reason"]:
            lines.append(f"- job: {r['state']}: {r['reason']}")
        if c0:
            lines.append(f"- C0 missing: {_names(c0['missing'], 20)}; third-party: {_names(c0['third_party_missing'], 20)}"
                         + (f"; stub-only (reportMissingModuleSource): {_names(c0['missing_source'], 20)}" if c0["missing_source"] else ""))
        if c1:
            lines.append(f"- C1 {c1['status']}/{c1['category'] or '—'}: log `{_rel(c1['log'], base)}`")
            lines.append(f"  - last line: `{c1['last_line']}`" if c1["last_line"] else "  - last line: (empty log)")
        if c5:
            lines.append(f"- C5 {c5['status']}/{c5['category'] or '—'}"
                         + (f": {json.dumps(c5['hallucinations'])}" if c5["hallucinations"] else ""))
        if r.get("harness_C0"):
            lines.append(f"- harness C0 (harness_c0.sh): {_harness_cell(r['harness_C0'])}"
                         + (f" of {r['harness_C0']['scan_total']} in its own import scan" if r["harness_C0"].get("scan_total") else ""))
        lines.append(f"- agent report: `{_rel(r['agent_report'], base)}`" + ("" if b["present"] else " (no `baseline` object)"))
        if pip and pip["problems"]:
            lines += [f"  - pip check: {p}" for p in pip["problems"][:20]]
        for c in conflicts or []:
            lines.append(f"  - conflict: {c.get('package')} for {c.get('for_import')}: {c.get('reason')}")
        for f in failures or []:
            lines.append(f"  - failure {f.get('step')} ({f.get('category')}): {_cell(f.get('message'))[:300]}")
        details.append("\n".join(lines))
    legend = ("\nC0 missing / census: distinct top-level modules pyright could not resolve (reportMissingImports) out "
              "of resenv's census at the pinned commit (stdlib + repo + third-party); paper census: the paper's own "
              "total for that repo; 3rd-party missing also counts stub-only resolutions. `—`: the agent's report "
              "has no such field. Times: the agent phase, and the job from start to end.\n\n## Per repo\n\n")
    return head + "\n".join(rows) + "\n" + legend + "\n\n".join(details) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the run's store (run.sh: run/resenv.db)")
    parser.add_argument("--run", default="latest", help="run id, unique prefix or latest (default)")
    parser.add_argument("--report", type=Path, help="`resenv report --format json` of the run: its id must match")
    parser.add_argument("--out", type=Path, help="write table.md and table.json here")
    parser.add_argument("--harness", type=Path,
                        help="the paper harness (work tree or bare git dir): add its C0 count on each job's env")
    args = parser.parse_args(argv)
    data = collect(args.db, args.run, args.harness)
    if args.report and args.report.exists():
        try:
            report = json.loads(args.report.read_text())
            rid = (report.get("run") or {}).get("id") if isinstance(report.get("run"), dict) else report.get("run_id")
        except ValueError:
            rid = None
        if rid and rid != data["run"]:
            print(f"table.py: {args.report} is of run {rid}, the store's is {data['run']}", file=sys.stderr)
            return 1
    text = markdown(data, args.out)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(text)
        (args.out / "table.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
