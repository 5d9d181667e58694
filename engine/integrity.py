"""Carrying out the integrity rules on a job's sandbox: the checkout verified after checkout, and
after the agent the tracked files restored, shadowing files quarantined, start-up hooks found.

The rules themselves are pure data in ``probes/integrity.py``; this module runs the scans where the
files are (in the engine's own process when the sandbox is on this machine, with the host's
``python3`` when it is another machine or a container), applies the restore and the quarantine
through the sandbox, and records each finding in the store.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

from ..probes.capture import last_json_line, read_tail
from ..probes.census import Census
from ..probes.integrity import (
    Finding,
    Integrity,
    bytecode_paths,
    judge_hooks,
    judge_tree,
    scan_problems,
    unified_diff,
)
from ..probes.kit import hookscan, script_source, treescan
from ..probes.outcome import canary_problem, canary_source
from .attempt import Attempt
from .checkout import CheckoutError, Manifest, Pristine, blob_bytes
from .sandbox.base import SandboxError, engine_sees_work_dir, host_path, shares_engine_view
from .wording import counted


PROBE_DIR = ".resenv-probes"
QUARANTINE_DIR = ".resenv-quarantine"
EPOCH_FILE = "checkout-epoch"
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
"""PATH for the host's own tools, without the agent's bin directory in front."""
SCAN_BYTES = 8 * 2**20
DIFF_FILES = 50
DIFF_SOURCE_BYTES = 2**20


class ScanError(OSError):
    """A scan could not run or gave no answer: the host's fault, never the agent's."""


async def _host_script(attempt: Attempt, script: str, args: list[str], timeout: float) -> Any:
    """Run a kit script with the host's own python3 in the sandbox; its last line is the answer: any
    JSON value (in a container the python3 there is the agent's to replace; `scan_problems` types it).
    No answer at all is the host's failure (`ScanError`)."""
    probe_dir = f"{attempt.paths.workdir}/{PROBE_DIR}"
    result = await attempt.run_command(
        "probes", ["sh", "-c", 'exec python3 -I -B "$@" "$HOME"', "sh", f"{probe_dir}/{script}", *args],
        env={"PATH": HOST_PATH}, timeout=timeout, log_name=script.removesuffix(".py"))
    if not result.ok:
        raise ScanError(f"{script} exited {result.returncode} on the host")
    data = read_tail(result.stdout_path, SCAN_BYTES)  # never the whole of what it printed
    try:
        answer = last_json_line(data.decode(errors="replace"))
    except ValueError as error:
        raise ScanError(f"{script} gave no readable answer: {error}") from error
    return answer


async def scan_tree(attempt: Attempt, manifest: Manifest, dirs: list[str], timeout: float, *,
                    fresh: bool = False) -> Any:
    """How the checkout differs from the pinned commit (``kit/treescan.py``). ``fresh``: no agent has
    run in this work dir yet, so a local sandbox's tree is scanned by the engine itself (in a thread),
    sparing a sandboxed interpreter per job."""
    payload = {"files": manifest.to_json(), "import_dirs": dirs, "submodules": list(manifest.submodules)}
    if shares_engine_view(attempt.sandbox) or (fresh and engine_sees_work_dir(attempt.sandbox)):
        return await asyncio.to_thread(treescan.scan, str(attempt.paths.repo), payload)
    await attempt.sandbox.put(f"{PROBE_DIR}/treescan.py", script_source("treescan.py"))
    await attempt.sandbox.put(f"{PROBE_DIR}/manifest.json", json.dumps(payload).encode())
    return await _host_script(attempt, "treescan.py",
                              [str(attempt.paths.repo), f"{attempt.paths.workdir}/{PROBE_DIR}/manifest.json"], timeout)


async def scan_hooks(attempt: Attempt, python: str, timeout: float) -> Any:
    """Start-up hooks in the reported interpreter's site directories (``kit/hookscan.py``)."""
    sandbox = attempt.sandbox
    if shares_engine_view(sandbox):
        home = str(getattr(sandbox, "home", "") or "")
        return await asyncio.to_thread(hookscan.scan, python, home)
    await sandbox.put(f"{PROBE_DIR}/hookscan.py", script_source("hookscan.py"))
    return await _host_script(attempt, "hookscan.py", [python], timeout)


async def verify_checkout(attempt: Attempt, pristine: Pristine, manifest: Manifest, timeout: float) -> None:
    """The job's tree must be the pinned commit: every object present, no path missing or different.
    Anything else is the infrastructure's failure (a broken source), named path by path."""
    if manifest.missing_objects:
        raise CheckoutError(_name_paths(f"the source of {pristine.commit[:12]} lacks the objects of",
                                        manifest.missing_objects), "infra")
    scan = await scan_tree(attempt, manifest, [], timeout, fresh=True)
    # checking a scan of every tracked file costs tens of ms on a big repo: in a thread, off the loop
    if problems := await asyncio.to_thread(scan_problems, scan):  # before the agent: the host's fault
        raise ScanError("the checkout scan answered wrong types: " + "; ".join(problems))
    changed = scan.get("changed")
    if not isinstance(changed, list):
        raise ScanError("the checkout scan gave no list of changes")
    if changed:
        raise CheckoutError(_name_paths(f"the checkout differs from {pristine.commit[:12]} at",
                                        [f"{c.get('path')} ({c.get('change')})" for c in changed]), "infra")
    if isinstance(scan.get("now"), (int, float)) and not isinstance(scan["now"], bool):
        await asyncio.to_thread((attempt.base / EPOCH_FILE).write_text, repr(float(scan["now"])))  # a file made: off the loop


def checkout_epoch(attempt: Attempt) -> float | None:
    """The host's clock when the checkout was verified, before the agent started (None: unknown)."""
    try:
        return float((attempt.base / EPOCH_FILE).read_text())
    except (OSError, ValueError):
        return None


def _name_paths(what: str, paths: Iterable[str], most: int = 10) -> str:
    paths = list(paths)
    shown = ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")
    return f"{what} {counted(len(paths), 'path')}: {shown}"


async def secure(attempt: Attempt, *, pristine: Pristine, manifest: Manifest, census: Census,
                 compiled: Iterable[str], import_dirs: list[str], python: str | None,
                 timeout: float) -> Integrity:
    """Before any probe: restore tracked files, quarantine shadows, find start-up hooks; record all."""
    scan = await scan_tree(attempt, manifest, import_dirs, timeout)
    # judging a scan of every tracked file costs tens of ms on a big repo: in a thread, off the loop
    findings = await asyncio.to_thread(lambda: judge_tree(scan, census, compiled) + _malformed("tree", scan))
    findings = await _with_diffs(attempt, pristine, manifest, findings)
    caches = bytecode_paths(scan)
    if findings or caches:
        try:
            await _apply(attempt, pristine, manifest, findings, caches, timeout)
        except (SandboxError, ScanError) as error:
            # The agent left a tree that cannot be put back: its doing, so its tiers fail, never infra.
            findings.append(Finding("unrestorable", ".", "tier_failed", {"error": str(error)[:500]}))
    if python is not None:
        # the hook scan names files as the sandbox sees them: so do the folders the job owns
        owned = [host_path(attempt.sandbox, attempt.paths.workdir),
                 host_path(attempt.sandbox, getattr(attempt.sandbox, "home", "") or attempt.paths.workdir)]
        hooks = await scan_hooks(attempt, python, timeout)
        findings += judge_hooks(hooks, since=checkout_epoch(attempt), owned=owned) + _malformed("hooks", hooks)
    integrity = Integrity(findings)
    _record(attempt, integrity, caches=len(caches))
    return integrity


def _malformed(which: str, scan: Any) -> list[Finding]:
    """A scan after the agent whose answer has entries of the wrong type (run where the agent worked,
    it may be the agent's python3 that answered): what it hid cannot be restored or judged, so the
    tiers it guards fail, never the engine."""
    problems = scan_problems(scan)
    if not problems:
        return []
    return [Finding("malformed_scan", f"({which} scan)", "tier_failed", {"problems": problems[:10]})]


async def _with_diffs(attempt: Attempt, pristine: Pristine, manifest: Manifest,
                      findings: list[Finding]) -> list[Finding]:
    """Keep what the agent changed, as a diff, before the restore overwrites it."""
    out, diffs = [], 0
    for finding in findings:
        entry = manifest.entry(finding.path)
        if finding.kind == "tracked_modified" and entry is not None and entry.mode != "120000" and diffs < DIFF_FILES:
            diffs += 1
            try:
                found = await attempt.sandbox.get(f"repo/{finding.path}", max_bytes=DIFF_SOURCE_BYTES)
            except (SandboxError, OSError):
                found = None
            diff = unified_diff(finding.path, await blob_bytes(pristine, entry.blob), found)
            finding = Finding(finding.kind, finding.path, finding.action, finding.detail | {"diff": diff})
        out.append(finding)
    return out


_APPLY_SCRIPT = r"""
set -e
cd "$1"; shift
mode=remove
for arg in "$@"; do
  case "$arg" in
    --quarantine) mode=quarantine; continue ;;
  esac
  if [ "$arg" = . ]; then
    rm -rf -- repo; mkdir -- repo
  elif [ "$mode" = remove ]; then
    rm -rf -- "repo/$arg"
  elif [ -e "repo/$arg" ] || [ -L "repo/$arg" ]; then
    mkdir -p -- "$(dirname -- "QUARANTINE/$arg")"
    rm -rf -- "QUARANTINE/$arg"
    mv -- "repo/$arg" "QUARANTINE/$arg"
  fi
done
"""


async def _apply(attempt: Attempt, pristine: Pristine, manifest: Manifest, findings: list[Finding],
                 caches: list[str], timeout: float) -> None:
    """Remove every changed tracked entry and write the pinned one back; move shadows and bytecode
    caches aside."""
    restore = sorted({f.path for f in findings if f.action == "restored"})
    quarantine = sorted({f.path for f in findings if f.action == "quarantined"} | set(caches))
    script = _APPLY_SCRIPT.replace("QUARANTINE", QUARANTINE_DIR)
    result = await attempt.run_command(
        "probes", ["sh", "-c", script, "sh", str(attempt.paths.workdir), *restore, "--quarantine", *quarantine],
        env={"PATH": HOST_PATH}, timeout=timeout, log_name="integrity")
    if not result.ok:
        raise ScanError(f"restoring the checkout failed (exit {result.returncode})")
    links, executables = [], []
    for entry in manifest.entries:
        if "." not in restore and not any(entry.path == path or entry.path.startswith(path + "/") for path in restore):
            continue
        data = await blob_bytes(pristine, entry.blob)
        if entry.mode == "120000":
            links.append((data.decode(errors="surrogateescape"), entry.path))
            continue
        await attempt.sandbox.put(f"repo/{entry.path}", data)
        if entry.mode == "100755":
            executables.append(entry.path)
    if links or executables:
        lines = [f"ln -sfn -- {_q(target)} {_q('repo/' + path)}" for target, path in links]
        lines += [f"chmod +x -- {_q('repo/' + path)}" for path in executables]
        result = await attempt.run_command(
            "probes", ["sh", "-c", f'set -e; cd "$1"\n' + "\n".join(lines), "sh", str(attempt.paths.workdir)],
            env={"PATH": HOST_PATH}, timeout=timeout, log_name="integrity")
        if not result.ok:
            raise ScanError(f"restoring links and modes failed (exit {result.returncode})")


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _store_findings(attempt: Attempt, findings: list[Finding]) -> None:
    now = time.time()
    for finding in findings:
        attempt.ctx.writer.execute(
            "INSERT INTO findings (run_id, job_id, attempt_id, kind, path, action, detail_json, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (attempt.ctx.run_id, attempt.job["id"], attempt.attempt_id, finding.kind, finding.path,
             finding.action, json.dumps(finding.detail, default=str), now))


def _record(attempt: Attempt, integrity: Integrity, *, caches: int) -> None:
    _store_findings(attempt, integrity.findings)
    attempt.sink.emit("integrity", {
        "summary": integrity.summary(), "bytecode_caches_moved": caches,
        "findings": [{"kind": f.kind, "path": f.path, "action": f.action} for f in integrity.findings[:50]]})


async def exit_canary(attempt: Attempt, python: str, env: dict[str, str], nonce: str,
                      timeout: float) -> Finding | None:
    """Run a program that fails on purpose with the agent's interpreter, from the checkout, as an
    entrypoint runs: a start-up hook that forces exit status 0 or hides tracebacks shows as a finding
    whatever file it hides in. The program gets a random name and is removed afterwards."""
    name = f"_{nonce[:16]}.py"
    await attempt.sandbox.put(f"repo/{name}", canary_source(nonce).encode())
    try:
        result = await attempt.run_command("probes", [python, "-B", name], env=env, timeout=timeout,
                                           cwd=attempt.paths.repo, log_name="probe-canary")
    finally:
        await attempt.run_command("probes", ["/bin/rm", "-f", f"{attempt.paths.repo}/{name}"],
                                  env={"PATH": HOST_PATH}, timeout=timeout, log_name="probe-canary-cleanup")
    if result.timed_out:
        return None  # a slow host is no evidence either way
    stderr = read_tail(result.stderr_path, SCAN_BYTES).decode(errors="replace")
    problem = canary_problem(result.returncode, stderr, nonce)
    if problem is None:
        return None
    finding = Finding("startup_hook", "(interpreter start-up)", "tier_failed",
                      {"canary": problem, "returncode": result.returncode})
    _store_findings(attempt, [finding])
    return finding
