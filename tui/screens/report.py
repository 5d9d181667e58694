"""What the job screen shows of the judges: the tiers table, the agent's report beside what the probes
observed (claim by claim), and the integrity findings.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding

from ..widgets import Column, FitTable, GLYPH, GLYPH_STYLE


def tier_columns(category: int = 8) -> list[Column]:
    """The tiers table's columns: the category as wide as the longest one shown (never cut:
    `insufficient_hardware`), the command taking what is left; a narrow table drops time, then exit."""
    return [Column("tier", "tier", 4), Column("status", "status", 10), Column("category", "category", max(8, category)),
            Column("exit", "exit", 4, keep=3), Column("time", "time", 6, keep=4),
            Column("command", "command/reason", 14, keep=2, min_width=10)]


class TierTable(FitTable):
    """The job screen's tiers: its six rows always fit, so Home/End/PageUp/PageDown (and ←/→, which
    a row cursor does not use) scroll the open tab (transcript, raw log, report, file) instead, as
    they would with that tab focused: long log lines scroll sideways."""

    BINDINGS = [Binding(key, f"screen.scroll_tab('{action}')", show=False)
                for key, action in (("home", "scroll_home"), ("end", "scroll_end"), ("pageup", "page_up"),
                                    ("pagedown", "page_down"), ("left", "scroll_left"), ("right", "scroll_right"))]


CLAIMS = (
    ("python_path", "python_path", "python_path"),
    ("python_version", "python_version", "python_version"),
    ("framework.name", "framework", "framework"),
    ("framework.version", "framework.version", "framework_version"),
    ("cuda_available", "cuda_available", "cuda_available"),
    ("gpu_count", "gpu_count", "gpu_count"),
    ("ddp_expected_ok", "ddp_expected_ok", "ddp_ok"),
)
PAPER_CLAIMS = (("torch_version", "torch_version", "framework_version"),)
"""Claims of ResearchEnvBench's report format: a row only when the report uses them."""


def _framework_entry(observed: dict[str, Any], name: Any) -> dict[str, Any] | None:
    table = observed.get("frameworks")
    if not isinstance(table, dict) or not isinstance(name, str):
        return None
    # imported here: the audit module pulls in the census and classifier, ~0.1 s the dashboard's
    # open would otherwise spend before its first frame, for a screen opened later if ever
    from ...probes.audit import normalize_framework

    entry = table.get(normalize_framework(name))
    return entry if isinstance(entry, dict) else None


def _framework_state(entry: dict[str, Any] | None, field: str) -> str:
    if entry is None:
        return "not observed"
    if not entry.get("importable"):
        if not entry.get("installed"):
            return "not installed"
        if field != "version" or entry.get("version") is None:
            return "installed, does not import"
    return _show(entry.get("version")) if field == "version" else f"{entry.get('name')} {_show(entry.get('version'))}"


def _observed_for(path: str, claims: dict[str, Any], observed: dict[str, Any]) -> Any:
    """What the probes saw for one claim: the observation of the framework the claim is about.

    Evidence written before every framework was observed has no ``frameworks``: its flat keys are shown."""
    if not isinstance(observed.get("frameworks"), dict):
        legacy = {row_path: observed_key for row_path, _, observed_key in CLAIMS + PAPER_CLAIMS}
        value = observed.get(legacy.get(path, path))
        return value if path != "torch_version" or observed.get("framework") == "torch" else None
    framework = claims.get("framework") if isinstance(claims.get("framework"), dict) else {}
    named = framework.get("name")
    if path == "framework.name":
        return _framework_state(_framework_entry(observed, named), "name")
    if path == "framework.version":
        return _framework_state(_framework_entry(observed, named if named is not None else observed.get("framework")),
                                "version")
    if path == "torch_version":
        return _framework_state(_framework_entry(observed, "torch"), "version")
    if path in ("cuda_available", "gpu_count"):
        if observed.get("gpus_leased") == 0:
            return "no GPU leased to the job"
        if named is None and claims.get("torch_version") is not None:
            named = "torch"
        for name in (named, observed.get("framework")):
            entry = _framework_entry(observed, name)
            if entry is not None and entry.get("importable"):
                value = entry.get("cuda_available" if path == "cuda_available" else "device_count")
                return f"{entry.get('name')}: {_show(value)}"
        return "no framework imports" if observed.get("framework") == "none" else None
    return observed.get(path)


def _claim(claims: dict[str, Any], path: str) -> Any:
    if path == "framework":
        value = claims.get("framework")
        return value.get("name") if isinstance(value, dict) else value
    if path == "framework.version":
        value = claims.get("framework")
        return value.get("version") if isinstance(value, dict) else claims.get("framework_version")
    return claims.get(path)


def _claim_at(claims: dict[str, Any], path: str) -> Any:
    """The value of a not-scored key: top-level, or ``framework.KEY``."""
    if path.startswith("framework.") and isinstance(claims.get("framework"), dict):
        return claims["framework"].get(path.split(".", 1)[1])
    return claims.get(path)


def _not_scored(claims: dict[str, Any], evidence: dict[str, Any]) -> Text | None:
    """One line with the keys the audit kept but did not score (env_tool, env_name, unknown keys);
    notes have their own line."""
    keys = [key for key in evidence.get("not_scored") or [] if key != "notes"]
    if not keys:
        return None
    shown = []
    for key in keys:
        value = _claim_at(claims, key)
        shown.append(f"{key}: {value if isinstance(value, str) else json.dumps(value, default=str)}")
    return Text.assemble(("not scored (kept, never a claim): ", "grey62"), (" · ".join(shown), "grey70"))


def _show(value: Any, workdir: str | None = None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if workdir and text.startswith(workdir):
        text = "{workdir}" + text[len(workdir):]
    return text


def report_table(result: dict[str, Any] | None, scored: bool, workdir: str | None = None) -> Any:
    """The agent's report beside what the probes observed; every difference is a hallucination."""
    if result is None:
        return Text("C5 is not scored in this run." if not scored else
                    "No audit yet: C5 runs after the probes, once the agent has stopped.", "grey62")
    evidence = result.get("evidence") or {}
    claims = evidence.get("claims") or {}
    observed = evidence.get("observed") or {}
    halluc = {item.get("claim"): item for item in evidence.get("hallucinations") or []}
    checked = set(evidence.get("checked") or [])
    unverifiable = set(evidence.get("unverifiable") or [])
    table = Table(expand=True, header_style="bold", show_lines=False, box=None, pad_edge=False)
    table.add_column("claim", style="bold", no_wrap=True)
    table.add_column("agent's report.json", overflow="fold", ratio=3)
    table.add_column("probes observed", overflow="fold", ratio=3)
    table.add_column("verdict", ratio=3, overflow="fold")
    rows = CLAIMS + tuple(row for row in PAPER_CLAIMS if row[0] in claims)
    for path, claim_key, _ in rows:
        claim = _claim(claims, claim_key)
        seen = _observed_for(path, claims, observed)
        if path == "python_path" and observed:
            flags = [name for name, key in (("exists", "python_exists"), ("executable", "python_executable"),
                                            ("runs", "python_runs")) if observed.get(key) is False]
            seen = _show(seen, workdir) + (f"  ({', '.join('not ' + flag for flag in flags)})" if flags else "")
        if path in halluc:
            item = halluc[path]
            verdict = Text(f"✗ hallucination ({item.get('kind')}): {item.get('message', '')}", "bold red")
            style = "bold red"
        elif claim is None:
            verdict, style = Text("no claim (null = honest uncertainty)", "grey50"), "grey50"
        elif path in checked:
            verdict, style = Text("✓ matches", "green"), ""
        elif path in unverifiable:
            verdict, style = Text("unverifiable (nothing observed)", "yellow"), "yellow"
        else:
            verdict, style = Text("—", "grey50"), "grey50"
        table.add_row(path, Text(_show(claim, workdir), style),
                      Text(_show(seen, workdir) if not isinstance(seen, str) else seen, style), verdict)
    status = result.get("status")
    head = Text.assemble(("C5 report audit: ", "bold"), (f"{GLYPH.get(status, '?')} {status}", GLYPH_STYLE.get(status, "")))
    if result.get("category"):
        head.append(f" ({result['category']})", "bold red")
    count = len(halluc)
    head.append(f" · {count} hallucination{'s' if count != 1 else ''}", "bold red" if count else "green")
    parts: list[Any] = [head]
    if workdir:
        parts.append(Text(f"{{workdir}} = {workdir}", "grey50"))
    parts += [Text(""), table]
    packages = claims.get("packages")
    if isinstance(packages, dict) and packages:
        listed = ", ".join(f"{name} {version}" for name, version in list(packages.items())[:20])
        parts += [Text(""), Text.assemble(("packages (unverifiable, not counted): ", "grey62"), (listed, "grey70"))]
    if evidence.get("report_errors"):
        parts += [Text(""), Text("report errors: " + "; ".join(map(str, evidence["report_errors"])), "bold red")]
    if evidence.get("probe_errors"):
        parts += [Text(""), Text("probe output not readable (the audit fails on it): "
                                 + "; ".join(map(str, evidence["probe_errors"][:5])), "bold red")]
    if (kept := _not_scored(claims, evidence)) is not None:
        parts += [Text(""), kept]
    if claims.get("notes"):
        parts += [Text(""), Text.assemble(("notes (not a claim): ", "grey62"), (str(claims["notes"]), "grey70"))]
    environment = evidence.get("environment") or {}
    if environment.get("size_bytes"):
        parts.append(Text(f"environment: {environment.get('prefix')} · {environment['size_bytes'] / 2**20:.0f} MiB",
                          "grey62"))
    return Group(*parts)


def integrity_text(findings: list[dict[str, Any]]) -> Any:
    """What the agent changed that the probes did not judge on, and what was done about it: edited
    tracked files restored (with the diff), shadowing files quarantined, start-up hooks failing tiers."""
    if not findings:
        return Text("integrity: clean (the checkout was the pinned commit; no start-up hooks)\n", "green")
    parts: list[Any] = [Text(f"integrity: {len(findings)} finding{'s' if len(findings) != 1 else ''} "
                             "(the probes judged the repo as pinned)", "bold yellow")]
    for finding in findings:
        parts.append(Text.assemble(("  " + finding["kind"], "bold"), f" {finding['path']} ",
                                   (f"→ {finding['action']}", "yellow")))
        diff = (finding.get("detail") or {}).get("diff")
        if diff:
            parts.append(Text("\n".join("    " + line for line in diff.splitlines()[:40]), "grey70"))
        line = (finding.get("detail") or {}).get("line")
        if line:
            parts.append(Text("    " + line[:200], "grey70"))
    parts.append(Text(""))
    return Group(*parts)
