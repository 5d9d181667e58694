"""The batch script of one sandbox command, and the sbatch options that size its job.

Why a wrapper and not ``sbatch --wrap ARGV``:

* **resenv's own timeout runs inside the job.** Slurm's ``--time`` is in whole minutes and checked
  about every 30 s, so the script keeps a watchdog that counts the command's seconds and, when they
  are spent, sends SIGTERM to its process group, then SIGKILL after the grace period. The watchdog
  counts in one-second sleeps, so a job Slurm suspends (every process of it stopped) stops its clock
  too: paused time never counts, as in the other sandboxes. ``--time`` is set a minute above, as a
  backstop for an engine that died.
* **Output lands where the engine expects it.** The command's stdout and stderr are appended to the
  engine's raw log paths (on the shared file system they are the same paths), which the engine tails
  live; Slurm's own messages (``CANCELLED ... DUE TO TIME LIMIT``) go to ``slurm.out`` beside them.
* **Its exit status is written to a file** (``exit``, renamed into place), because a controller that is
  restarting or has forgotten the job cannot say how it ended, and Slurm's own exit code is the
  batch shell's, not the command's.
* **The environment is exactly the sandbox's.** ``cmd.sh`` (mode 0700, never in Slurm's state, so API
  keys stay out of the controller's spool) runs ``env -i`` with the sandbox environment; the only
  thing taken from the job is ``CUDA_VISIBLE_DEVICES`` — the GPUs Slurm granted — when the command
  asked for GPUs. ``--export=NONE`` keeps the engine's own environment out of the job.
* **No requeue**: a preempted or failed node ends the job (``--no-requeue``); resenv's infrastructure
  retries decide what runs again, as for every other host kind.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...sandbox.common import DEFAULT_PATH

STARTED, EXIT, TIMED_OUT, SLURM_OUT, CMD, STDIN = "started", "exit", "timed_out", "slurm.out", "cmd.sh", "stdin"
TIME_MARGIN_S = 60.0  # Slurm's limit stays this far above resenv's own


@dataclass(frozen=True)
class JobFiles:
    """Where one command's job keeps its files: the raw logs, and a spool folder beside them."""

    stdout: Path
    stderr: Path
    spool: Path

    @classmethod
    def for_prefix(cls, log_prefix: Path) -> JobFiles:
        return cls(Path(f"{log_prefix}.stdout"), Path(f"{log_prefix}.stderr"), Path(f"{log_prefix}.slurm"))

    def __getitem__(self, name: str) -> Path:
        return self.spool / name


@dataclass(frozen=True)
class Resources:
    """What one job asks Slurm for (the host's spec, and the GPUs this command needs)."""

    gpus: int = 0
    gres: str = "gpu"
    cpus: int | None = None
    memory_mib: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int | None = None  # a cap from the host's spec
    extra: tuple[str, ...] = field(default_factory=tuple)


def command_file(argv: Sequence[str], env: Mapping[str, str], cwd: str, gpus: int) -> str:
    """``cmd.sh``: cd, then exec the command with exactly ``env`` (and Slurm's GPUs if it asked for any)."""
    words = ["exec", "env", "-i"] + [shlex.quote(f"{key}={value}") for key, value in env.items()
                                      if not (gpus and key == "CUDA_VISIBLE_DEVICES")]
    if gpus:
        # Slurm's own value, when it set one (a site that constrains devices by cgroup may not need to).
        words.append('${CUDA_VISIBLE_DEVICES+"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"}')
    words += [shlex.quote(arg) for arg in argv]
    return f"cd {shlex.quote(cwd)} || exit 125\n{' '.join(words)}\n"


def batch_script(files: JobFiles, *, timeout_s: float | None, grace_s: float = 5.0, has_stdin: bool = False) -> str:
    """The batch script: run ``cmd.sh`` in its own group under the watchdog, record how it ended."""
    q = shlex.quote
    spool = q(str(files.spool))
    stdin = q(str(files[STDIN])) if has_stdin else "/dev/null"
    lines = [
        "#!/bin/sh",
        "# resenv: one sandbox command as a Slurm job (see resenv/engine/hosts/slurm/script.py)",
        f"PATH={q(DEFAULT_PATH)}; export PATH",
        f"spool={spool}",
        f'setsid sh "$spool/{CMD}" < {stdin} >> {q(str(files.stdout))} 2>> {q(str(files.stderr))} &',
        "child=$!",
        # started: when (the node's clock), which job, where, and the GPUs Slurm granted. Written once
        # the command's process exists: a suspend sent before this file appeared may have missed it.
        'printf "%s %s %s %s\\n" "$(date +%s.%N)" "${SLURM_JOB_ID:-}" "$(hostname)" "${CUDA_VISIBLE_DEVICES:-}"'
        ' > "$spool/started.part" && mv "$spool/started.part" "$spool/started"',
        # Slurm's TERM (scancel, its time limit) goes to the command's group first.
        "trap 'kill -TERM -\"$child\" 2>/dev/null' TERM INT HUP",
    ]
    if timeout_s is not None:
        seconds = max(1, math.ceil(timeout_s))
        grace = max(1, math.ceil(grace_s))
        lines += [
            "watchdog() {",
            f"  n=0; while [ \"$n\" -lt {seconds} ]; do sleep 1; n=$((n + 1)); done",
            f'  : > "$spool/{TIMED_OUT}"',
            '  kill -TERM -"$child" 2>/dev/null; kill -CONT -"$child" 2>/dev/null',
            f'  sleep {grace}; kill -KILL -"$child" 2>/dev/null',
            "}",
            "watchdog & wd=$!",
        ]
    lines += [
        # wait returns early when a trapped signal arrives: wait again until the child is gone.
        'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done',
    ]
    if timeout_s is not None:
        lines.append('kill "$wd" 2>/dev/null')
    lines += [
        # exit: the command's status and when it ended (the same clock as `started`)
        f'printf "%s %s\\n" "$rc" "$(date +%s.%N)" > "$spool/{EXIT}.part" && mv "$spool/{EXIT}.part" "$spool/{EXIT}"',
        "exit 0",
        "",
    ]
    return "\n".join(lines)


def time_limit_minutes(timeout_s: float | None, grace_s: float, cap_min: int | None) -> int | None:
    """Slurm's ``--time``: resenv's timeout plus grace plus a margin, in whole minutes, within the cap."""
    if timeout_s is None:
        return cap_min
    minutes = math.ceil((timeout_s + grace_s + TIME_MARGIN_S) / 60.0)
    return min(minutes, cap_min) if cap_min else minutes


def sbatch_options(files: JobFiles, resources: Resources, *, name: str, comment: str, timeout_s: float | None,
                   grace_s: float = 5.0) -> list[str]:
    """The options of one command's job (the script itself goes on sbatch's stdin)."""
    options = [
        f"--job-name={name}", f"--comment={comment}",
        f"--output={files[SLURM_OUT]}", f"--error={files[SLURM_OUT]}", "--open-mode=append",
        f"--chdir={files.spool}", "--export=NONE", "--no-requeue", "--nodes=1", "--ntasks=1",
    ]
    if resources.cpus:
        options.append(f"--cpus-per-task={resources.cpus}")
    if resources.memory_mib:
        options.append(f"--mem={resources.memory_mib}M")
    if resources.gpus:
        options.append(f"--gres={resources.gres}:{resources.gpus}")
    minutes = time_limit_minutes(timeout_s, grace_s, resources.time_limit_min)
    if minutes:
        options.append(f"--time={minutes}")
    for flag, value in (("--partition", resources.partition), ("--account", resources.account),
                        ("--qos", resources.qos)):
        if value:
            options.append(f"{flag}={value}")
    options += list(resources.extra)
    return options
