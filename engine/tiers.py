"""The verification pyramid for one job: C0–C4 probes, then the C5 audit, by one rule set for every repo.

Probes run only after the agent stopped, with the interpreter the agent reported, inside the job's
sandbox; they never install or write into that environment (bytecode writing is off). Every tier
is judged independently: a failing C1 does not stop C2. A tier the repo does not support is `skip`
with its reason; a tier the host has too few GPUs for is `skip`/`insufficient_hardware`, never a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..probes.audit import Observations, audit
from ..probes.c0 import run_c0
from ..probes.c0reuse import ReuseStore
from ..probes.c2 import judge_c2, primary_framework, read_frameworks
from ..probes.capture import last_json_line, read_tail
from ..probes.census import Census
from ..probes.classifier import absent_from_sources, blamed_download, classify
from ..probes.integrity import TAMPERED, Integrity, import_dirs
from ..probes.outcome import BAD_INTERPRETER, interpreter_problem, uncaught_exception
from ..probes.kit import SCRIPTS, script_source
from ..probes.mirror import Mirror, build_mirror, failed_mirror
from ..probes.report import ReportLoad, load_report
from .assets import AssetCache, missing_indexes, presence_script
from .attempt import Attempt
from .hosts.gpuinfo import DriverInfo, cuda_supported
from .gpuwatch import GpuUse, watch_for
from .integrity import HOST_PATH, exit_canary, secure
from .sandbox.base import ExecResult, SandboxError, engine_path, is_remote, shares_engine_view
from .wording import counted


PROBE_TIERS = ("C0", "C1", "C2", "C3", "C4")
ALL_TIERS = (*PROBE_TIERS, "C5")
ENTRYPOINT_OF = {"C1": "cpu", "C3": "single_gpu", "C4": "multi_gpu"}
GPUS_FOR = {"C2": 1, "C3": 1, "C4": 2}
OUTPUT_TAIL = 4000
CLASSIFY_BYTES = 256 * 1024
PROBE_DIR = ".resenv-probes"
IMPORT_MAP_BYTES = 128 * 2**20  # the compressed import map, read into memory (probes/mirror.py caps its expansion)


@dataclass
class TierResult:
    tier: str
    status: str  # pass | fail | skip | error
    category: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProbeState:
    """What the probes learned, shared between tiers and handed to the C5 audit."""

    report: ReportLoad | None = None
    python: str | None = None
    interpreter: dict[str, Any] | None = None
    python_exists: bool | None = None
    python_executable: bool | None = None
    frameworks: dict[str, Any] | None = None
    interpreter_problem: str | None = None  # why the reported interpreter is no trustworthy Python
    integrity: Integrity | None = None
    results: dict[str, TierResult] = field(default_factory=dict)


def tail_text(*paths: Path, limit: int = CLASSIFY_BYTES) -> str:
    """The last `limit` bytes of each file, decoded: enough to classify, never a whole huge log."""
    return "\n".join(read_tail(path, limit).decode(errors="replace") for path in paths if path.exists())


def directory_size(root: Path) -> int:
    """Bytes on disk under `root`, counting hard-linked files once and not following symlinks."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


# `directory_size` on the host the environment lives on: every file's blocks, a hard-linked file once,
# symlinks not followed (GNU find and awk; the engine cannot walk a tree it does not have).
REMOTE_SIZE_SCRIPT = (
    "[ -d \"$1\" ] || exit 1; find \"$1\" ! -type d -printf '%D:%i %b\\n' | awk '!seen[$1]++ { blocks += $2 } END { printf \"%.0f\\n\", blocks * 512 }'"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TierRunner:
    def __init__(
        self, attempt: Attempt, selected: tuple[str, ...], driver: DriverInfo | None,
        previous: dict[str, Any] | None = None,
    ) -> None:
        self.attempt = attempt
        self.selected = selected
        self.driver = driver
        self.state = ProbeState()
        # A tier re-run judges with what the other tiers found last time (C5 needs C4's verdict).
        for tier, row in (previous or {}).items():
            self.state.results[tier] = TierResult(tier, row["status"], row["category"])
        self.repo = attempt.ctx.suite.repo(attempt.job["repo_id"])
        self.bench = attempt.ctx.bench
        self._assets_missing: list[str] | None = None  # declared assets absent from the cache: checked once, before the first entrypoint

    # -- orchestration ----------------------------------------------------------------------
    async def run_probes(self) -> None:
        """C0–C4, each recorded as soon as it is judged."""
        await self._prepare()
        for tier in PROBE_TIERS:
            if tier in self.selected:
                self.record(await self._judge(tier))

    async def run_audit(self) -> None:
        if "C5" in self.selected:
            self.record(await self._audit())

    async def rerun(self, tier: str) -> TierResult:
        """One tier again on the kept post-agent state (an operator's tier retry)."""
        await self._prepare()
        result = await self._audit() if tier == "C5" else await self._judge(tier)
        self.record(result)
        return result

    async def _judge(self, tier: str) -> TierResult:
        try:
            result = await getattr(self, f"_tier_{tier.lower()}")()
        except OSError as error:  # the sandbox or the host failed, not the agent
            return TierResult(tier, "error", "infra", {"reason": f"{type(error).__name__}: {error}"})
        return self._overrule(result)

    def _overrule(self, result: TierResult) -> TierResult:
        """A verdict stands only if the interpreter is a real Python and no start-up hook could have
        written it: otherwise the tier fails, keeping what it would have said as evidence."""
        if result.status not in ("pass", "fail"):
            return result
        problem = self.state.interpreter_problem if self.state.python else None
        blocking = self.state.integrity.blocking if self.state.integrity else []
        if problem:
            return TierResult(result.tier, "fail", BAD_INTERPRETER, result.evidence | {
                "reason": problem, "python_path": self.state.python,
                "verdict_otherwise": {"status": result.status, "category": result.category}})
        if blocking:
            return TierResult(result.tier, "fail", TAMPERED, result.evidence | {
                "reason": f"{len(blocking)} change(s) the agent left could decide the outcome: "
                          + ", ".join(f"{finding.kind} {finding.path}" for finding in blocking[:5]),
                "findings": [finding.to_dict() for finding in blocking],
                "verdict_otherwise": {"status": result.status, "category": result.category}})
        return result

    def record(self, result: TierResult) -> None:
        self.state.results[result.tier] = result
        attempt = self.attempt
        evidence = json.dumps(result.evidence, default=str)
        attempt.ctx.writer.execute(
            "INSERT INTO tier_results (run_id, job_id, attempt_id, tier, status, category, evidence_json, created_at,"
            " scoring_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (attempt.ctx.run_id, attempt.job["id"], attempt.attempt_id, result.tier, result.status,
             result.category, evidence, time.time(), attempt.scoring_id),
        )
        attempt.sink.emit("tier", {"tier": result.tier, "status": result.status, "category": result.category})

    # -- shared measurements ----------------------------------------------------------------
    async def _prepare(self) -> None:
        """Load the report, stage the probe scripts, and measure the reported interpreter once."""
        if self.state.report is not None:
            return
        paths = self.attempt.paths
        if is_remote(self.attempt.sandbox):
            await self.attempt.sandbox.sync_back(str(paths.report.relative_to(paths.workdir)))
        self.state.report = load_report(paths.report, sandbox_root=paths.workdir)
        report = self.state.report.report or {}
        python = report.get("python_path") if isinstance(report.get("python_path"), str) else None
        sandbox = self.attempt.sandbox
        assert sandbox is not None
        if python is not None:  # the agent named it as its host sees it: the engine's name for it from here on
            python = engine_path(sandbox, python)
        self.state.python = python
        for name in SCRIPTS:
            await sandbox.put(f"{PROBE_DIR}/{name}", script_source(name))
        self.state.integrity = await self._secure(python)
        if python is None:
            return
        target = Path(python)
        if (path_status := getattr(sandbox, "path_status", None)) is not None:  # remote/container: ask where it runs
            self.state.python_exists, self.state.python_executable = await path_status(python)
        else:
            self.state.python_exists = target.exists()
            self.state.python_executable = target.exists() and os.access(target, os.X_OK)
        nonce = secrets.token_hex(16)
        self.state.interpreter = await self._probe_json("interpreter", "interpreter.py", gpus="", args=[nonce])
        magic, resolved = await self._interpreter_file(python)
        self.state.interpreter_problem = interpreter_problem(
            self.state.interpreter, nonce=nonce, magic=magic, resolved=resolved)
        if self.state.interpreter_problem is None and self.state.integrity is not None:
            hooked = await exit_canary(self.attempt, python, self._env(""), nonce,
                                       self.bench.defaults.tier_timeouts.C2)
            if hooked is not None:
                self.state.integrity.findings.append(hooked)
        # What a program that is not a real Python prints is no observation of any framework.
        if self.state.interpreter_problem is None and any(tier in self.selected for tier in ("C2", "C5")):
            visible = ",".join(str(gpu) for gpu in self.attempt.lease.gpus)
            self.state.frameworks = await self._probe_json("frameworks", "frameworks.py", gpus=visible)

    async def _secure(self, python: str | None) -> Integrity:
        """Judge the agent's environment on the repo as pinned (probes/integrity.py says how)."""
        pristine = self.attempt.pristine
        assert pristine is not None
        commands = [spec.command for spec in self.repo.tiers().values() if not isinstance(spec, str)]
        census, _ = await self._framework_census()
        compiled = await self._compiled_modules()
        # the folders every census file imports from: tens of ms on a big repo, in a thread
        dirs = await asyncio.to_thread(import_dirs, commands, census.files if census else ())
        return await secure(
            self.attempt, pristine=pristine, manifest=await self.attempt.ctx.pristines.manifest(pristine),
            census=census or Census(), compiled=compiled, import_dirs=dirs,
            python=python, timeout=self.bench.defaults.tier_timeouts.C2)

    async def _interpreter_file(self, python: str) -> tuple[bytes | None, str | None]:
        """The first bytes of the file the reported interpreter resolves to, and that file's path
        (None: unreadable)."""
        if shares_engine_view(self.attempt.sandbox):
            resolved = os.path.realpath(python)
            try:
                with open(resolved, "rb") as handle:
                    return handle.read(4), resolved
            except OSError:
                return None, resolved
        result = await self.attempt.run_command(
            "probes", ["/bin/sh", "-c", 'r=$(readlink -f "$1") && echo "$r" && [ -f "$r" ] && head -c 4 "$r" | od -An -tx1',
                       "sh", python],
            env={"PATH": HOST_PATH}, timeout=self.bench.defaults.tier_timeouts.C2, log_name="probe-magic")
        lines = tail_text(result.stdout_path, limit=8192).splitlines() if result.ok else []
        if not lines:
            return None, None
        try:
            return bytes.fromhex("".join(lines[1:]).replace(" ", "").strip()), lines[0].strip()
        except ValueError:
            return None, lines[0].strip()

    async def _probe_json(self, name: str, script: str, *, gpus: str, args: list[str] | None = None) -> dict[str, Any] | None:
        assert self.state.python is not None
        result = await self.attempt.run_command(
            "probes", [self.state.python, "-B", f"{self.attempt.paths.workdir}/{PROBE_DIR}/{script}", *(args or [])],
            env=self._env(gpus), timeout=self.bench.defaults.tier_timeouts.C2, log_name=f"probe-{name}",
        )
        if result.ok:
            try:  # the last line of a capped tail: the interpreter is the agent's, it may flood
                answer = last_json_line(tail_text(result.stdout_path))
            except ValueError:
                answer = None
            if isinstance(answer, dict):  # the interpreter is the agent's: its answer may be any JSON
                return answer | {"_exit": 0}
        return {"_exit": result.returncode, "_timed_out": result.timed_out,
                "_output": tail_text(result.stdout_path, result.stderr_path, limit=OUTPUT_TAIL)}

    def _env(self, gpus: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The probes' environment: the reported interpreter first on PATH, GPUs as leased."""
        bin_dir = str(Path(self.state.python).parent) if self.state.python else ""
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin" if bin_dir else "/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PIP_NO_INPUT": "1",
            "CUDA_VISIBLE_DEVICES": gpus,
            # NVLink multicast stays off: it can take a shared host's GPUs out of service.
            "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1",
        }
        return env | (extra or {})

    def _no_interpreter(self, tier: str) -> TierResult | None:
        """Without an interpreter there is nothing to probe: the tier fails, saying why.

        A missing or invalid report keeps its own category (`missing_report`, `invalid_report`). A valid
        report whose `python_path` is absent or null is honest (no claim), but it names no environment
        to run either: `no_interpreter`, never `invalid_report`.
        """
        load = self.state.report
        assert load is not None
        if self.state.python is not None:
            return None
        if load.ok:
            return TierResult(tier, "fail", "no_interpreter",
                              {"reason": "the report names no interpreter (python_path is absent or null)"})
        category = load.category or "invalid_report"
        return TierResult(tier, "fail", category, {"reason": "no interpreter reported", "report_errors": load.errors})

    def _missing_gpus(self, tier: str) -> TierResult | None:
        needed = GPUS_FOR[tier]
        entry = ENTRYPOINT_OF.get(tier)
        if entry:
            spec = self.repo.tiers()[entry]
            needed = getattr(spec, "gpus", needed) if not isinstance(spec, str) else needed
        leased = len(self.attempt.lease.gpus)
        if leased < needed:
            return TierResult(tier, "skip", "insufficient_hardware",
                              {"reason": f"needs {counted(needed, 'GPU')}, host gave {leased}", "needed": needed, "leased": leased})
        return None

    # -- the import census, shared by C0, C2 and C5 -------------------------------------------
    async def census(self) -> Census:
        """The import census of the pinned commit, computed once per (repo, commit) for the run and
        off the event loop (engine/censuses.py): C0 counts its imports, C2 and C5 read from it which
        frameworks the repo runs on."""
        pristine = self.attempt.pristine
        assert pristine is not None
        census, seconds = await self.attempt.ctx.censuses.census(self.repo.id, pristine)
        if seconds is not None:  # this attempt computed it: every other one of the run shares it
            self.attempt.sink.emit("census", {"commit": pristine.commit, "files": len(census.files),
                                              "modules": census.total, "seconds": round(seconds, 3)})
        return census

    async def _framework_census(self) -> tuple[Census | None, str | None]:
        """The census for choosing the framework C2 judges, or (None, why) when there is none: the
        choice then falls back to the first importable framework instead of failing the tier."""
        if self.attempt.pristine is None:
            return None, "no pristine copy of the repo"
        try:
            return await self.census(), None
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as error:
            return None, f"the import census failed: {type(error).__name__}: {error}"

    # -- C0 ---------------------------------------------------------------------------------
    async def _tier_c0(self) -> TierResult:
        census = await self.census()
        python = self.state.python or str(self.attempt.paths.workdir / "no-interpreter-reported")
        repo_dir = self.attempt.paths.repo
        sandbox = self.attempt.sandbox
        timeout = self.bench.tier_timeout(self.repo, "C0")
        notes: tuple[str, ...] = ()
        if not shares_engine_view(sandbox):
            # pyright runs here, on the import map the sandbox recorded (probes/mirror.py says why):
            # the agent's interpreter never runs outside its sandbox
            mirror = await self._mirror(census, timeout)
            python, repo_dir, notes, env = str(mirror.python), mirror.repo, mirror.notes, None
        else:
            # The sandbox's own HOME, so packages the agent installed with `pip --user` are seen.
            env = sandbox.child_env(self._env("")) if hasattr(sandbox, "child_env") else None
        # Kept per job: a tier retry or a rescore of the job reuses a verdict whose inputs are unchanged.
        number = self.attempt.recorded_number or self.attempt.number
        reuse = ReuseStore(self.attempt.base.parent / "c0-reuse", f"attempt {number}")
        result = await run_c0(python, repo_dir, census, work_dir=self.attempt.base / "probes" / "c0",
                              timeout=timeout, env=env, reuse=reuse)
        evidence = asdict(result) | {"census": census.to_dict()}
        if notes:
            evidence["import_map"] = list(notes)
        category = result.category
        if self.state.report is not None and (failed := self._no_interpreter("C0")) is not None:
            category = failed.category
        return TierResult("C0", result.status, category if result.status != "pass" else None, evidence)

    async def _mirror(self, census: Census, timeout: float) -> Mirror:
        """Record the host's import map with the reported interpreter and rebuild it here."""
        paths, sandbox = self.attempt.paths, self.attempt.sandbox
        dest = self.attempt.base / "probes" / "c0-mirror"
        if self.state.python is None:
            return failed_mirror(dest, str(paths.repo), "no interpreter reported")
        probe_dir = f"{paths.workdir}/{PROBE_DIR}"
        await sandbox.put(f"{PROBE_DIR}/census-files.txt", "\n".join(census.files).encode())
        result = await self.attempt.run_command(
            "probes", [self.state.python, "-I", "-B", f"{probe_dir}/importmap.py", f"{probe_dir}/importmap.tar.gz",
                       str(paths.repo), f"{probe_dir}/census-files.txt"],
            env=self._env(""), timeout=timeout, cwd=paths.repo, log_name="probe-importmap",
        )
        if not result.ok:
            return failed_mirror(dest, str(paths.repo), tail_text(result.stdout_path, result.stderr_path,
                                                                  limit=OUTPUT_TAIL))
        try:
            archive = await sandbox.get(f"{PROBE_DIR}/importmap.tar.gz", max_bytes=IMPORT_MAP_BYTES)
        except FileNotFoundError:  # it exited 0 without running the recorder: not a Python
            return failed_mirror(dest, str(paths.repo), f"{self.state.python} ran without recording an import map")
        except SandboxError as error:
            raise OSError(f"the host's import map could not be fetched: {error}") from error
        try:
            return await asyncio.to_thread(build_mirror, archive, dest)
        except (ValueError, KeyError, TypeError, EOFError, tarfile.TarError) as error:
            # What the reported interpreter recorded is its answer: an unusable one fails C0 as an
            # interpreter that cannot answer pyright would, never the engine.
            return failed_mirror(dest, str(paths.repo), "the import map recorded with the reported interpreter is "
                                 f"unusable: {type(error).__name__}: {error}")

    # -- C1 / C3 / C4: the repo's own entrypoints -------------------------------------------
    async def _tier_c1(self) -> TierResult:
        return await self._entrypoint("C1", gpus=())

    async def _tier_c3(self) -> TierResult:
        return await self._entrypoint("C3", gpus=self.attempt.lease.gpus[:1])

    async def _tier_c4(self) -> TierResult:
        spec = self.repo.tiers()["multi_gpu"]
        count = spec.gpus if not isinstance(spec, str) else 2
        return await self._entrypoint("C4", gpus=self.attempt.lease.gpus[:count])

    async def _entrypoint(self, tier: str, gpus: tuple[int, ...]) -> TierResult:
        spec = self.repo.tiers()[ENTRYPOINT_OF[tier]]
        if isinstance(spec, str):
            return TierResult(tier, "skip", "not_applicable", {"reason": spec})
        if tier != "C1" and (missing := self._missing_gpus(tier)):
            return missing
        if (failed := self._no_interpreter(tier)) is not None:
            return failed
        if (unready := await self._assets_unready(tier)) is not None:  # a missing asset is an infra error
            return unready
        paths = self.attempt.paths
        host_ids = ",".join(map(str, gpus))
        # {gpus} in a command names the GPUs as the sandbox sees them (a container renumbers them)
        renumber = getattr(self.attempt.sandbox, "visible_gpus", None)
        values = paths.template_values() | {
            "python": self.state.python or "", "gpus": renumber(host_ids) if renumber else host_ids,
            "ngpus": str(len(gpus)),
        }
        extra = self._asset_cache().probe_env() | spec.render_env(values)  # hub libraries offline, reading the asset cache
        if tier == "C4":
            extra = {"NCCL_DEBUG": "WARN", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), **extra}
        argv = spec.argv(values)
        timeout = self.bench.tier_timeout(self.repo, tier)
        # C3/C4: the driver's process accounting while it runs is the proof that it used the GPUs
        watch = watch_for(self.attempt.lease.host, self.attempt.sandbox, gpus) if tier in ("C3", "C4") else None
        if watch is not None:
            await watch.start()
        try:
            result = await self.attempt.run_command(
                "probes", argv, env=self._env(host_ids, extra), timeout=timeout, cwd=paths.repo, log_name=tier,
                on_start=watch.started if watch is not None else None,
            )
        finally:
            use = await watch.stop() if watch is not None else None
        compiled = await self._compiled_modules()
        judged = self._judge_exec(tier, argv, result, gpus, compiled)
        if judged.status == "pass" and (died := uncaught_exception(tail_text(result.stderr_path))):
            # exit status 0 after a fatal traceback: the exit status was overridden, the run failed
            verdict = classify(tail_text(result.stderr_path), returncode=1, tier=tier,
                               compiled_modules=compiled)
            judged = TierResult(tier, "fail", verdict.category, judged.evidence | {
                "reason": "exited 0, but its output ends in an uncaught exception",
                "uncaught_exception": died, "signature": verdict.signature, "evidence_line": verdict.evidence})
        return judged if use is None else self._judge_gpu_use(judged, use)

    def _judge_gpu_use(self, judged: TierResult, use: GpuUse) -> TierResult:
        """An exit 0 of C3/C4 passes only if the driver saw the entrypoint on every leased GPU
        (engine/gpuwatch.py has the rule); a failure keeps its own category. The evidence is kept."""
        if judged.status != "pass":
            judged.evidence["gpu_use"] = use.evidence()
            return judged
        verdict = use.verdict()
        evidence = judged.evidence | {"gpu_use": use.evidence() | {"verdict": verdict.reason}}
        if verdict.status != "pass":
            evidence["reason"] = verdict.reason
        return TierResult(judged.tier, verdict.status, verdict.category, evidence)

    # -- assets, fetched before scoring ------------------------------------------------------
    def _asset_cache(self) -> AssetCache:
        return AssetCache.for_run(self.attempt.ctx.run_dir)

    async def _assets_unready(self, tier: str) -> TierResult | None:
        """The repo's declared assets must be in the host's cache (`resenv assets fetch`): a missing one
        is the infrastructure's fault, never the agent's, so the tier is `error`/`infra`."""
        if not self.repo.assets:
            return None
        if self._assets_missing is None:
            self._assets_missing = await self._stage_assets()
        if not self._assets_missing:
            return None
        cache = self._asset_cache()
        return TierResult(tier, "error", "infra", {
            "reason": f"asset(s) not in the cache of host {self.attempt.lease.host.name}: "
                      f"{', '.join(self._assets_missing)}; run `resenv assets fetch` before scoring",
            "missing_assets": self._assets_missing, "cache": str(cache.root)})

    async def _stage_assets(self) -> list[str]:
        """Check the cache where the sandbox runs and link `dest:` assets into the checkout; returns
        the labels of missing assets. A container sees nothing of its host, so it first gets a copy of
        the engine's verified assets."""
        cache, assets = self._asset_cache(), self.repo.assets
        if (put_abs := getattr(self.attempt.sandbox, "put_abs", None)) is not None:
            for asset in assets:
                if cache.is_cached(asset):
                    for tree in (*cache.trees(asset), cache.record_path(asset)):
                        await put_abs(tree)
        elif (reveal := getattr(self.attempt.sandbox, "reveal", None)) is not None:
            # A namespaced sandbox sees this repo's verified assets, read-only, for the rest of the job.
            reveal([path for asset in assets if cache.is_cached(asset)
                    for path in (*cache.trees(asset), cache.record_path(asset))])
        script = presence_script(cache, assets, place_into=self.attempt.paths.repo)
        result = await self.attempt.run_command(
            "probes", ["/bin/sh", "-c", script], env=self._env(""), timeout=self.bench.defaults.tier_timeouts.C2,
            log_name="assets")
        if not result.ok:
            raise OSError(f"placing assets into the checkout failed (exit {result.returncode}): "
                          + tail_text(result.stderr_path, limit=OUTPUT_TAIL).strip())
        return [assets[index].label() for index in missing_indexes(tail_text(result.stdout_path), len(assets))]

    def _judge_exec(self, tier: str, argv: list[str], result: ExecResult, gpus: tuple[int, ...],
                    compiled: frozenset[str]) -> TierResult:
        evidence = {
            "command": argv, "exit_code": result.returncode, "timed_out": result.timed_out,
            "duration_s": round(result.active_s, 3), "gpus": list(gpus),
            "log_tail": tail_text(result.stdout_path, result.stderr_path, limit=OUTPUT_TAIL),
            "logs": [str(result.stdout_path), str(result.stderr_path)],
        }
        if result.ok:
            return TierResult(tier, "pass", None, evidence)
        output = tail_text(result.stdout_path, result.stderr_path)
        verdict = classify(output, returncode=result.returncode, timed_out=result.timed_out, tier=tier,
                           compiled_modules=compiled)
        evidence |= {"signature": verdict.signature, "evidence_line": verdict.evidence}
        category = verdict.category
        if category == "deps_missing" and (cause := self._agent_download_failure(verdict.evidence)) is not None:
            # The package is missing because the agent could not get it: that is the root cause. An
            # agent without a package index downloaded nothing: its local sources lacked the package.
            if self._agent_offline() and absent_from_sources(cause):
                category = "offline_miss"
                evidence |= {"root_cause": "agent log (offline: no package index)", "root_cause_line": cause}
            else:
                category = "download_failed"
                evidence |= {"root_cause": "agent log", "root_cause_line": cause}
        return TierResult(tier, "fail", category, evidence)

    async def _compiled_modules(self) -> frozenset[str]:
        """The compiled modules the repo declares at its pinned commit (read once per (repo, commit)
        for the run, from the pristine copy: the agent's edits to its checkout never count). None are
        known when the pinned commit cannot be read; the classifier then decides by its signatures alone."""
        pristine = self.attempt.pristine
        if pristine is None:
            return frozenset()
        try:
            return await self.attempt.ctx.censuses.compiled_modules(self.repo.id, pristine)
        except (RuntimeError, OSError, subprocess.SubprocessError):
            return frozenset()

    def _agent_offline(self) -> bool:
        """Whether the job's agent installs without any package index (the baseline's `offline: true`)."""
        adapter = self.attempt.ctx.agents.get(self.attempt.job["agent"])
        return bool(getattr(getattr(adapter, "spec", None), "offline", False))

    def _agent_download_failure(self, failure: str) -> str | None:
        """The agent log's line showing that the package the probe's `failure` line misses could not
        be downloaded (and was not installed after all), if there is one: only that download failure
        explains this failure; one for another package, or one the agent recovered from, does not."""
        logs = self.attempt.base / "logs"
        return blamed_download(failure, tail_text(logs / "agent.stdout", logs / "agent.stderr"))

    # -- C2: CUDA alignment -----------------------------------------------------------------
    async def _tier_c2(self) -> TierResult:
        """The framework the repo runs on sees the leased GPU with a CUDA build the driver supports.

        The probe observes every framework; which one(s) C2 judges is `probes/c2.py`'s rule: those the
        repo's import census imports (all that it imports unconditionally), else the first importable
        in the order torch, jax, tensorflow - so a CPU-only torch beside a CUDA JAX does not fail a JAX
        repo. The probe's output comes from the agent's interpreter: a field of the wrong type fails
        the tier (`runtime`, the problems in `probe_errors`), never raises.
        """
        if (missing := self._missing_gpus("C2")) is not None:
            return missing
        if (failed := self._no_interpreter("C2")) is not None:
            return failed
        observed = self.state.frameworks or {}
        evidence: dict[str, Any] = {"driver": asdict(self.driver) if self.driver else None}
        if observed.get("_exit", 0) != 0:  # set by the engine: the probe itself failed
            output = observed.get("_output")
            verdict = classify(output if isinstance(output, str) else "", returncode=observed.get("_exit"),
                               timed_out=bool(observed.get("_timed_out")), tier="C2")
            return TierResult("C2", "fail", verdict.category,
                              evidence | {"framework": observed, "evidence_line": verdict.evidence})
        seen, problems = read_frameworks(observed)
        if seen is None:
            return TierResult("C2", "fail", "runtime", evidence | {
                "reason": "the framework probe printed a malformed observation: " + "; ".join(problems[:5]),
                "probe_errors": problems, "frameworks": observed.get("frameworks")})
        census, census_note = await self._framework_census()
        verdict = judge_c2(seen, census, driver_cuda=self.driver.cuda_version if self.driver else None,
                           cuda_supported=cuda_supported)
        table = observed["frameworks"]
        evidence |= {"framework": table.get(verdict.framework), "frameworks": table, "judged": verdict.judged,
                     "judged_by": verdict.basis, "verdicts": verdict.verdicts}
        if census_note:
            evidence["census_error"] = census_note
        if verdict.status == "pass":
            return TierResult("C2", "pass", None, evidence)
        evidence["reason"] = verdict.reason
        if verdict.evidence_line:
            evidence["evidence_line"] = verdict.evidence_line
        return TierResult("C2", "fail", verdict.category, evidence)

    async def _environment(self) -> dict[str, Any]:
        """Size of the agent's own environment: its prefix when that lies in the job's work dir.

        An agent that used a shared base interpreter has no environment of its own to size. On an
        SSH host or in a container the environment exists only there (the engine's mirror of the
        work dir holds the report alone), so it is measured there, by the same rule; a host that
        cannot measure it leaves the size unknown, never 0.
        """
        prefix = (self.state.interpreter or {}).get("prefix")
        if not prefix or not isinstance(prefix, str):
            return {"prefix": None, "size_bytes": None}
        if is_remote(self.attempt.sandbox):  # the host's path, compared in the engine's names (not resolved here)
            workdir = Path(os.path.normpath(self.attempt.paths.workdir))
            root = Path(os.path.normpath(engine_path(self.attempt.sandbox, prefix)))
        else:
            workdir = self.attempt.paths.workdir.resolve()
            root = Path(prefix).resolve()
        if root != workdir and workdir not in root.parents:
            return {"prefix": prefix, "size_bytes": None, "reason": "interpreter outside the job's work dir"}
        if not is_remote(self.attempt.sandbox):
            # sizing walks the whole environment (tens of thousands of files): in a thread, off the loop
            return {"prefix": prefix, "size_bytes": await asyncio.to_thread(directory_size, root)}
        result = await self.attempt.run_command(
            "probes", ["/bin/sh", "-c", REMOTE_SIZE_SCRIPT, "sh", str(root)], env={"PATH": HOST_PATH},
            timeout=self.bench.defaults.tier_timeouts.C2, log_name="probe-envsize")
        text = tail_text(result.stdout_path, limit=256).strip() if result.ok else ""
        if not text.isdecimal():
            return {"prefix": prefix, "size_bytes": None, "reason": "the host could not measure it (find -printf, awk)"}
        return {"prefix": prefix, "size_bytes": int(text)}

    # -- C5: the report audit ---------------------------------------------------------------
    async def _audit(self) -> TierResult:
        """Audit the report's claims against what the probes observed (rules: probes/audit.py).

        Everything the probes printed is read as hostile: a field of the wrong type is not used, and
        it fails the audit (`runtime`) with the problems listed, never raises. A probe that did not
        run or crashed observed nothing: the claims it would have checked are unverifiable. The GPUs
        leased to the job are an observation too: the agent and the probes saw only those.
        """
        state = self.state
        assert state.report is not None
        problems: list[str] = []
        interpreter = state.interpreter if isinstance(state.interpreter, dict) else {}
        version, prefix = interpreter.get("version"), interpreter.get("prefix")
        for key, value in (("version", version), ("prefix", prefix)):
            if value is not None and not isinstance(value, str):
                problems.append(f"interpreter.{key}: expected a string, got {json.dumps(value, default=str)[:60]}")
        version = version if isinstance(version, str) else None
        seen, framework = None, None
        raw = state.frameworks
        if isinstance(raw, dict) and raw.get("_exit") == 0:
            seen, framework_problems = read_frameworks(raw)
            problems += framework_problems
            if seen is not None:
                framework = primary_framework(seen, (await self._framework_census())[0])
        c4 = state.results.get("C4")
        observed = Observations(
            python_path=state.python,
            python_exists=state.python_exists,
            python_executable=state.python_executable,
            python_runs=None if state.python is None else state.interpreter_problem is None,
            python_version=version,
            frameworks=seen,
            framework=framework,
            gpus_leased=len(self.attempt.lease.gpus),
            ddp_ok=None if c4 is None or c4.status not in ("pass", "fail") else c4.status == "pass",
            probe_errors=tuple(problems),
        )
        result = audit(state.report, observed)
        environment = await self._environment() if prefix is None or isinstance(prefix, str) else {
            "prefix": None, "size_bytes": None, "reason": "the interpreter probe printed a prefix that is not a string"}
        evidence = asdict(result) | {"observed": asdict(observed), "claims": state.report.report,
                                     "environment": environment}
        return TierResult("C5", result.status, result.category, evidence)
