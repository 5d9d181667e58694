"""The Slurm command-line tools, run on this machine or on an SSH login node.

resenv talks to a cluster only through the CLI every Slurm site has (``sbatch``, ``squeue``,
``scontrol``, ``scancel``, ``sacct``, ``sinfo``), never through slurmrestd, which few labs run.

* **Runners**: :class:`LocalRunner` runs the tools as subprocesses; :class:`SshRunner` runs them over
  the login node's one multiplexed SSH connection (engine/sandbox/remote.py). Both add ``SLURM_CONF`` when the
  host names one and nothing else of the engine's environment (API keys stay home).
* **The controller's bad moments are not errors of the job.** ``Unable to contact slurm controller``,
  socket time-outs and the like raise :class:`ControllerUnavailable`; callers retry with backoff.
  Anything else is a :class:`SlurmError`.
* **Status in one call.** :meth:`SlurmClient.query` asks ``squeue --me --states=all`` once for every
  job of the user, formatted (``-O``) rather than ``--json``: up to 22.05 ``squeue --json`` ignores
  every filter and serialises the whole cluster's queue, which is what admins ask tools not to poll;
  the formatted query honours ``--me``, and is a tenth of the bytes. (``--jobs`` is avoided too: a
  list whose jobs have all left the controller's memory is an error, not an empty answer.)
  :func:`parse_squeue_json` still reads ``--json`` output for tools and the perf comparison.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .states import Exit, base_state, decode_exit

TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|Communication connection failure|Transport endpoint|Resource temporarily unavailable"
    r"|backup controller in standby|Slurm temporarily unable|Insane message length|connect failure"
    r"|Slurmctld not responding|Error connecting|Unable to establish connection",
    re.IGNORECASE,
)
log = logging.getLogger(__name__)

SQUEUE_FIELDS = ("JobID", "State", "Reason", "exit_code", "NodeList", "Name", "Comment")
COMPLETION_LOG_LINES = 20000  # the newest lines of the completion log are read, never the whole file
SEP = "\x1f"  # unit separator: never in a reason, a node list or a job name resenv chose


class SlurmError(Exception):
    """A Slurm command failed for a reason of its own (bad option, unknown partition, denied)."""


class ControllerUnavailable(SlurmError):
    """slurmctld did not answer (down, restarting, overloaded): try again later."""


@dataclass
class Completed:
    returncode: int | None
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def error(self) -> str:
        return self.stderr.decode(errors="replace").strip()


class Runner(Protocol):
    """Runs one command of the Slurm CLI and returns how it ended (never raises for its exit)."""

    where: str

    async def __call__(self, argv: list[str], *, input: bytes | None = None, timeout: float = 60.0) -> Completed: ...


class LocalRunner:
    """The Slurm tools of this machine (the engine runs on a login or submit node)."""

    where = "local"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or {})

    async def __call__(self, argv: list[str], *, input: bytes | None = None, timeout: float = 60.0) -> Completed:
        environ = {key: value for key, value in os.environ.items()} | self.env
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=environ)
        except FileNotFoundError as error:
            raise SlurmError(f"{argv[0]}: not found on this machine (install slurm-client)") from error
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except asyncio.TimeoutError:
            await _reap(proc)
            raise ControllerUnavailable(f"{argv[0]} did not answer in {timeout:g} s") from None
        except BaseException:  # cancelled: the tool must not outlive its caller
            await asyncio.shield(_reap(proc))
            raise
        return Completed(proc.returncode, out, err)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill a tool we stopped waiting for, and drain its pipes: a cancelled ``communicate`` can leave a
    full pipe unread, and then ``wait()`` (which waits for the pipes to close too) never returns."""
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        await asyncio.wait_for(proc.communicate(), 10)
    except (asyncio.TimeoutError, OSError, ValueError, RuntimeError):
        log.warning("%s: its pipes did not close after SIGKILL", proc.pid)


class SshRunner:
    """The Slurm tools of a login node, over its SSH connection (engine/sandbox/remote.py)."""

    def __init__(self, connection: Any, env: Mapping[str, str] | None = None) -> None:
        self.connection = connection
        self.env = dict(env or {})
        self.where = f"{connection.target.address}:{connection.target.port}"

    async def __call__(self, argv: list[str], *, input: bytes | None = None, timeout: float = 60.0) -> Completed:
        from ...sandbox.remote import HostDown

        words = ["env", *(f"{k}={v}" for k, v in self.env.items()), *argv] if self.env else argv
        try:
            result = await self.connection.run(" ".join(shlex.quote(w) for w in words), input=input,
                                               timeout=timeout)
        except (HostDown, asyncio.TimeoutError) as error:
            raise ControllerUnavailable(f"login node {self.where}: {error}") from error
        return Completed(result.returncode, result.stdout, result.stderr)


@dataclass
class JobInfo:
    """One job as the controller describes it."""

    job_id: str
    state: str
    reason: str = ""
    exit: Exit | None = None
    nodes: str = ""
    name: str = ""
    comment: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """Rows of ``squeue -h -O <SQUEUE_FIELDS with SEP>`` (see :meth:`SlurmClient.query`)."""
    jobs: dict[str, JobInfo] = {}
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) < len(SQUEUE_FIELDS):
            continue
        job_id, state, reason, code, nodes, name, comment = (part.strip() for part in parts[:len(SQUEUE_FIELDS)])
        if not job_id:
            continue
        jobs[job_id] = JobInfo(job_id, base_state(state), "" if reason == "None" else reason,
                               decode_exit(code) if code not in ("", "N/A") else None, nodes, name, comment)
    return jobs


def parse_squeue_json(text: str) -> dict[str, JobInfo]:
    """``squeue --json`` of any version since 21.08 (states as a string or a list, exit codes raw or objects)."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"squeue --json printed {type(data).__name__}, not an object")
    listed = data.get("jobs", [])
    jobs: dict[str, JobInfo] = {}
    for job in listed if isinstance(listed, list) else []:
        if not isinstance(job, dict) or job.get("job_id") in (None, ""):
            continue  # the controller's answer is read as it comes: an entry of the wrong shape is no job
        job_id = str(job.get("job_id"))
        state = job.get("job_state")
        if isinstance(state, list):
            state = [part for part in state if isinstance(part, str)]
        elif not isinstance(state, str):
            state = None
        reason = _text(job.get("state_reason"))
        jobs[job_id] = JobInfo(job_id, base_state(state), "" if reason == "None" else reason,
                               decode_exit(job.get("exit_code")), _text(job.get("nodes")), _text(job.get("name")),
                               _text(job.get("comment")), raw=job)
    return jobs


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def parse_key_values(line: str) -> dict[str, str]:
    """``scontrol show ... -o``: one line of ``Key=Value`` pairs (values may hold spaces: a key starts a pair)."""
    out: dict[str, str] = {}
    for match in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_/:.]*=|\s*$)", line):
        out[match.group(1)] = match.group(2)
    return out


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = Value`` lines."""
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            settings[key.strip()] = value.strip()
    return settings


def find_completion(text: str, job_id: str) -> JobInfo | None:
    """The newest job-completion log line of `job_id` (``JobId=... JobState=... ExitCode=code:signal``)."""
    for line in reversed(text.splitlines()):
        if not line.startswith(f"JobId={job_id} "):
            continue
        values = parse_key_values(line.strip())
        return JobInfo(job_id, base_state(values.get("JobState")), "", decode_exit(values.get("ExitCode")),
                       values.get("NodeList", ""), values.get("Name", ""), raw=dict(values))
    return None


class SlurmClient:
    """The Slurm CLI of one cluster (see the module docstring)."""

    def __init__(self, runner: Runner, *, timeout_s: float = 60.0) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.calls = 0  # commands run (perf and tests)
        self._completion_log: str | None = None  # JobCompLoc of a jobcomp/filetxt site, "" if none

    async def run(self, argv: list[str], *, input: bytes | None = None, check: bool = True,
                  timeout: float | None = None) -> Completed:
        self.calls += 1
        result = await self.runner(argv, input=input, timeout=timeout or self.timeout_s)
        if check and result.returncode != 0:
            message = f"{' '.join(argv[:2])}: {result.error or f'exit {result.returncode}'}"
            if TRANSIENT.search(result.error) or result.returncode in (255, None) and not result.error:
                raise ControllerUnavailable(message)
            raise SlurmError(message)
        return result

    # -- jobs -----------------------------------------------------------------------------------------
    async def submit(self, script: str, options: Iterable[str] = ()) -> str:
        """``sbatch --parsable OPTIONS`` with the script on stdin; the new job's id."""
        result = await self.run(["sbatch", "--parsable", *options], input=script.encode())
        job_id = result.text.strip().split(";")[0]  # "<id>[;<cluster>]"
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed no job id: {result.text[:200]!r} {result.error[:200]}")
        return job_id

    async def query(self) -> dict[str, JobInfo]:
        """Every job of the user the controller still knows (pending, running and recently finished)."""
        fields = ",".join(f"{name}:{SEP}" for name in SQUEUE_FIELDS)
        result = await self.run(["squeue", "--me", "--noheader", "--states=all", f"--Format={fields}"])
        return parse_squeue(result.text)

    async def query_json(self) -> dict[str, JobInfo]:
        """The same through ``squeue --json`` (every job of the cluster up to 22.05)."""
        result = await self.run(["squeue", "--json", "--me", "--states=all"])
        return parse_squeue_json(result.text)

    async def show_job(self, job_id: str) -> JobInfo | None:
        """``scontrol show job -o``: a job the controller still remembers, else None."""
        result = await self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if result.returncode != 0:
            if TRANSIENT.search(result.error):
                raise ControllerUnavailable(result.error)
            return None
        values = parse_key_values(result.text.strip().splitlines()[0] if result.text.strip() else "")
        if not values.get("JobId"):
            return None
        reason = values.get("Reason", "")
        return JobInfo(values["JobId"], base_state(values.get("JobState")), "" if reason == "None" else reason,
                       decode_exit(values.get("ExitCode")), values.get("NodeList", ""), values.get("JobName", ""),
                       values.get("Comment", ""), raw=dict(values))

    async def accounting(self, job_id: str) -> JobInfo | None:
        """``sacct`` for a job the controller forgot; None where the site keeps no accounting."""
        result = await self.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList"],
                                check=False)
        if result.returncode != 0:
            return None
        for line in result.text.splitlines():
            parts = line.split("|")
            if len(parts) >= 4 and parts[0] == job_id:
                return JobInfo(job_id, base_state(parts[1]), "", decode_exit(parts[2]), parts[3])
        return None

    async def completion_log(self, job_id: str) -> JobInfo | None:
        """The job-completion log (``JobCompType=jobcomp/filetxt``), for a job the controller forgot
        at a site that keeps no accounting; None without a readable log or a line for the job."""
        if self._completion_log is None:
            config = await self.run(["scontrol", "show", "config"], check=False)
            settings = parse_config(config.text)
            self._completion_log = (settings.get("JobCompLoc", "")
                                    if settings.get("JobCompType") == "jobcomp/filetxt" else "")
        if not self._completion_log:
            return None
        result = await self.run(["tail", "-n", str(COMPLETION_LOG_LINES), self._completion_log], check=False)
        return find_completion(result.text, job_id) if result.returncode == 0 else None

    async def cancel(self, job_ids: Iterable[str], *, signal: str | None = None, full: bool = False) -> None:
        ids = list(job_ids)
        if not ids:
            return
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), *(["--full"] if full else []), *ids]
        await self.run(argv)

    async def cancel_named(self, name: str) -> int:
        """Cancel every job of the user with this name (a dead engine's leftovers); how many there were."""
        jobs = await self.query()
        ids = [job.job_id for job in jobs.values() if job.name == name and base_state(job.state) not in
               ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                "DEADLINE", "OUT_OF_MEMORY")]
        await self.cancel(ids)
        return len(ids)

    async def control(self, verb: str, job_id: str) -> Completed:
        """``scontrol suspend|resume|uhold|release JOB``; the result, for the caller to judge."""
        return await self.run(["scontrol", verb, job_id], check=False)

    # -- the cluster ----------------------------------------------------------------------------------
    async def version(self) -> str:
        result = await self.run(["sinfo", "--version"])
        return result.text.strip()

    async def partitions(self) -> list[dict[str, str]]:
        result = await self.run(["scontrol", "show", "partition", "-o"])
        return [parse_key_values(line) for line in result.text.splitlines() if line.strip()]

    async def nodes(self) -> list[dict[str, str]]:
        result = await self.run(["scontrol", "show", "node", "-o"])
        return [parse_key_values(line) for line in result.text.splitlines() if line.strip()]


def gres_count(gres: str, name: str = "gpu") -> int:
    """GPUs in a node's ``Gres=`` (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:2``)."""
    total = 0
    for item in (gres or "").split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] != name:
            continue
        tail = parts[-1]
        if tail.isdecimal():
            total += int(tail)
        elif len(parts) == 1:
            total += 1
    return total
