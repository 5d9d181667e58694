"""The benchmark spec: `benchmark.yaml` as typed, frozen pydantic models, with precise errors.

`load_benchmark(path)` reads the file with source positions (see `yamlsource`), validates it and
raises one `SpecError` listing *every* problem as ``file:line: field.path: message``.

Schema (version 1)::

    version: 1                       # required, must be 1
    defaults:                        # all optional, with these defaults
      suite: starter                 # must name a suite / agent / host defined below
      agent: venv-pip
      host: local
      concurrency: 4                 # max jobs at once over all hosts, int >= 1
      timeouts:                      # per job phase, seconds > 0 (float ok)
        provision: 300
        checkout: 600
        agent: 3600
        probes: 3600
        audit: 120
        teardown: 300
      tier_timeouts: {C0: 600, C1: 600, C2: 180, C3: 900, C4: 1200}  # per tier, seconds > 0
      budgets: {wall_clock_s: 3600, tokens: null, dollars: null, run_dollars: null}
                                     # null = no limit; numbers > 0 (tokens: an int)
      retries: {infra: 2, backoff_s: 5.0}    # infra retries per job (int >= 0), backoff > 0
      output: {head_bytes: 4194304, tail_bytes: 262144}   # command output stored as events, per
                                     #   attempt: the first head_bytes as it comes, then the last
                                     #   tail_bytes of each command's stream when it ends; the rest
                                     #   only in the raw logs, counted (ints >= 0; engine/output.py)
      prices: {}                     # model name -> {input, cached_input, cache_write, output:
                                     #   USD per million tokens >= 0, date: YYYY-MM-DD}
                                     #   (all five required)
      prompt: null                   # the task prompt of every LLM/command agent (default: the
                                     #   built-in one, engine/agents/prompt.py); a template over
                                     #   the job placeholders plus {schema} (the report's fields)
    hosts:                           # name -> host; default {local: {kind: local}}
      local:
        kind: local                  # local | ssh | slurm
        slots: 2                     # concurrent jobs on this host, int >= 1
        gpus: auto                   # "auto" (detect), a count >= 0, or a list of unique GPU ids
        sandbox: process             # process | docker (docker needs image:)
        image: null                  # docker: an image present on the host (never pulled)
        docker: {network: none, cpus: null, memory_mib: null, pids: 4096, shm_mib: 2048,
                 memlock: null, user: null, socket: null}   # network: none | host (never a
                                     #   bridge); memlock: null (the daemon's), -1 (unlimited) or
                                     #   bytes; socket: the daemon's (local: $DOCKER_HOST)
      gpu-box:
        kind: ssh                    # public-key auth only, one multiplexed connection
        address: 10.0.0.5            # host name or IP
        port: 22
        user: null                   # default: the engine's user
        key: null                    # private key file (default: ~/.ssh/id_* and the agent)
        known_hosts: null            # default ~/.ssh/known_hosts; strict_host_keys: true
        keepalive_s: 10              # dead after keepalive_s * keepalive_count (3) of silence
        max_sessions: 10             # the server's MaxSessions; channels stay below it
        slots: 2, gpus: auto, sandbox: process, image: null, docker: {...}   # as for local
        data_dir: null               # its runs go there (runs/<run>); default ~/.local/share/resenv of user
      cluster:
        kind: slurm                  # one Slurm job per sandbox command (docs/slurm.md)
        partition: null              # default: the cluster's default partition
        account: null, qos: null
        gpus: auto                   # most GPUs one node gives a job ("auto": read from the partition)
        gres: gpu                    # asked for as --gres=<gres>:N
        agent_gpus: 0                # GPUs of the agent's own job; probes ask for what each tier needs
        cpus: 4                      # --cpus-per-task
        memory_mib: null             # --mem (default: the partition's)
        time_limit_min: null         # cap on --time (default: resenv's own timeout + a minute)
        sbatch_options: []           # e.g. ["--constraint=h100", "--reservation=lab"]
        slots: 16                    # resenv jobs in flight on the cluster
        poll_s: 1.0                  # one squeue per poll for all of the host's jobs
        slurm_conf: null             # SLURM_CONF for sbatch/squeue/... (default: the system's)
        login: null                  # {address, port, user, key, known_hosts, ...} as for ssh hosts:
                                     #   reach the cluster through a login node; paths mirror the
                                     #   engine's data dir, which must be on the cluster's shared FS
    agents:                          # name -> agent (default: none)
      venv-pip:
        kind: command                # command | baseline | claude-code | codex
        command: [...]               # argv template (list of str), or one str run through sh -c
        env: {}                      # NAME -> template
        output: text                 # text | jsonl
        env_from: []                 # secrets: names of engine env variables passed to the agent
                                     #   process only, and redacted from everything stored
        env_file: null               # secrets: a NAME=value file (relative to the yaml's folder)
        prompt: null                 # overrides defaults.prompt (given as $RESENV_PROMPT)
      claude:
        kind: claude-code            # Claude Code: claude -p --output-format stream-json --verbose
        executable: claude           # path or name on the sandbox PATH
        model: null                  # --model (and the model priced when the CLI reports none)
        permission_mode: bypassPermissions   # | acceptEdits | default | dontAsk | plan
        max_turns: null              # --max-turns, int >= 1
        args: []                     # extra argv templates
        env: {}                      # NAME -> template (not secret; e.g. ANTHROPIC_BASE_URL)
        env_from: [ANTHROPIC_API_KEY]   # secrets, as for command agents; env_file: too
        prompt: null                 # overrides defaults.prompt; given on stdin
        completion_grace_s: 30       # kill the CLI this long after it reported completion
      codex:
        kind: codex                  # Codex: codex exec --json ... - (prompt on stdin)
        executable: codex
        model: null                  # -m; Codex reports no model: this one is priced
        sandbox: none                # none (resenv's sandbox only) | read-only | workspace-write
                                     #   | danger-full-access
        config: {}                   # dotted key -> scalar, passed as -c key=value (TOML), e.g.
                                     #   model_providers.local.base_url: http://127.0.0.1:8000/v1
        args: [], env: {}, env_from: [OPENAI_API_KEY], env_file: null, prompt: null,
        completion_grace_s: 30
      baseline:
        kind: baseline               # the built-in rule-based agent (no LLM), stdlib-only script
        offline: false               # true: no package index; reuse what the base interpreter
                                     #   has and the local wheels (pip find-links) only
        python: null                 # base interpreter for the venv (default: the engine's own)
        installer: auto              # auto | uv | pip (auto: uv when on PATH and no pip-only
                                     #   package source is configured, else pip)
    suites:                          # name -> suite, at least one
      starter:
        description: "..."           # optional
        repos:                       # at least one
          - id: tiny-numpy           # unique in the suite
            source: {path: suites/starter/tiny-numpy}   # relative to the yaml's folder, a directory
            # or:   {git: <url>, commit: <full 40-hex sha>}          (exactly one form)
            category: cpu_only       # free text, default "uncategorized"
            entrypoints:             # keys: cpu | single_gpu | multi_gpu; run in the repo checkout
              cpu: {command: "{python} main.py", env: {}, timeout: 120, gpus: 0}
              # gpus: cpu must be 0, single_gpu must be 1 (default), multi_gpu >= 2 (default 2)
              # timeout optional: falls back to defaults.tier_timeouts C1 / C3 / C4
            not_applicable: {single_gpu: "no GPU code path", multi_gpu: "no GPU code path"}
            assets:                  # optional: what the entrypoints need, pinned
              - {kind: hf, repo: <org/name>, revision: <40-hex>, size: <bytes>,
                 repo_type: model, files: [], dest: null}   # dest: relative to the checkout
              - {kind: url, url: <url>, sha256: <64-hex>, size: <bytes>, dest: null}
            unpinned_assets: ["hf:<org/name>"]   # optional: needed, not pinned yet (the plan names them)

Rules beyond types: every tier (cpu, single_gpu, multi_gpu) is in exactly one of `entrypoints`
and `not_applicable` (with a non-empty reason); names of suites, agents and hosts and repo ids
match ``^[A-Za-z0-9][A-Za-z0-9._-]*$`` (they end up in file names); unknown keys are errors.

Templates: commands and env values may use the placeholders in `TEMPLATE_FIELDS`, e.g.
``{python} main.py``; write ``{{`` and ``}}`` for literal braces. A list command is an argv whose
items are rendered as they are; a string command runs through ``sh -c`` with every value
shell-quoted.
"""

from __future__ import annotations

import datetime
import difflib
import math
import re
import shlex
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Strict,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .yamlsource import (
    Positions,
    SpecError,
    SpecIssue,
    format_issues,
    format_path,
    load_yaml,
    load_yaml_file,
)

__all__ = [
    "AgentExtras", "Asset", "BaselineAgent", "HfAsset", "UrlAsset", "Benchmark", "Budgets", "ClaudeCodeAgent", "CodexAgent", "CommandAgent", "CpuEntrypoint", "Defaults", "Entrypoint",
    "DockerOptions", "Entrypoints", "GitSource", "LocalHost", "SshHost", "SlurmHost", "SlurmLogin", "LocalSource", "MultiGpuEntrypoint", "NotApplicable",
    "Price", "RepoTask", "Retries", "SingleGpuEntrypoint", "SpecError", "SpecIssue",
    "SpecLookupError", "Suite", "TEMPLATE_FIELDS", "TIERS", "TIER_CODES", "TemplateError",
    "TierTimeouts", "Timeouts", "benchmark_from_snapshot", "format_issues", "load_benchmark",
    "issues_from_validation", "loads_benchmark", "render",
]

TEMPLATE_FIELDS: frozenset[str] = frozenset(
    {"python", "repo", "workdir", "env", "report", "gpus", "ngpus", "job", "run"}
)
"""Placeholders allowed in commands and env values: the reported interpreter, the repo checkout,
the job's work dir, the suggested env dir (workdir/env), the report.json path, the leased GPU ids
(comma-separated), their count, the job key and the run id."""

TIERS: tuple[str, ...] = ("cpu", "single_gpu", "multi_gpu")
"""The tiers a repo declares entrypoints for, in order."""

TIER_CODES: dict[str, str] = {"cpu": "C1", "single_gpu": "C3", "multi_gpu": "C4"}
"""Which protocol tier runs each entrypoint (C0, C2 and C5 need no entrypoint)."""

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")


# --------------------------------------------------------------------------- templates


class TemplateError(ValueError):
    """A template cannot be rendered (a placeholder has no value)."""


def _placeholders(template: str) -> list[tuple[str, str | None, str | None]]:
    """(name, conversion, format spec) of each placeholder; ValueError on unbalanced braces."""
    return [
        (name, conversion, spec)
        for _, name, spec, conversion in string.Formatter().parse(template)
        if name is not None
    ]


def _check_template(template: str) -> str:
    """Accept a template only if it parses and uses known placeholders, plainly."""
    hint = "write {{ and }} for literal braces"
    try:
        found = _placeholders(template)
    except ValueError as exc:
        raise ValueError(f"invalid template {template!r}: {exc} ({hint})") from None
    unknown = sorted({f"{{{name}}}" for name, _, _ in found if name not in TEMPLATE_FIELDS})
    if unknown:
        allowed = ", ".join(f"{{{name}}}" for name in sorted(TEMPLATE_FIELDS))
        raise ValueError(f"unknown placeholder {', '.join(unknown)}; allowed: {allowed} ({hint})")
    for name, conversion, spec in found:
        if conversion or spec:
            raise ValueError(f"placeholder {{{name}}} may not have a conversion or format spec")
    return template


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill a validated template; raise `TemplateError` naming a placeholder without a value."""
    parts: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        if name not in values:
            given = ", ".join(sorted(values)) or "none"
            raise TemplateError(
                f"{template!r} needs {{{name}}}, which has no value (given: {given})")
        parts.append(str(values[name]))
    return "".join(parts)


# --------------------------------------------------------------------------- scalar types


def _num(value: float) -> str:
    """-3.0 -> "-3": numbers in messages look like the user wrote them."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _above_zero(unit: str):
    def check(value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"expected {unit} > 0, got {_num(value)}")
        return value
    return check


def _at_least(minimum: int, unit: str = "an integer"):
    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"expected {unit} >= {minimum}, got {value}")
        return value
    return check


def _memlock(value: int) -> int:
    if value == -1 or value >= 1:
        return value
    raise ValueError(f"expected -1 (unlimited) or a number of bytes >= 1, got {value}; leave it out (null)"
                     " to keep the docker daemon's own limit")


def _docker_socket(value: str) -> str:
    path = value.removeprefix("unix://")
    if not path.startswith("/"):
        raise ValueError(f"expected the absolute path of the docker daemon's unix socket"
                         f" (/var/run/docker.sock or unix:///var/run/docker.sock), got {value!r}")
    return path


def _non_negative(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {_num(value)}")
    return value


def _name(what: str):
    def check(value: str) -> str:
        if not NAME_PATTERN.match(value):
            raise ValueError(f"invalid {what} {value!r}: use letters, digits, '.', '_' and '-', "
                             "starting with a letter or digit (it is used in file names)")
        return value
    return check


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"invalid environment variable name {value!r}")
    return value


def _date(value: Any) -> Any:
    """YAML gives dates as `date`; quoted ones arrive as text. Anything else is refused."""
    if isinstance(value, datetime.datetime) or not isinstance(value, (str, datetime.date)):
        raise ValueError(f"expected a date YYYY-MM-DD, got {value!r}")
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"expected a date YYYY-MM-DD, got {value!r}") from None
    return value


def _gpu_selection(value: Any) -> Literal["auto"] | int | tuple[int, ...]:
    """Host GPUs: "auto", a count, or explicit unique ids (one readable error, not three)."""
    expected = "expected 'auto', a GPU count >= 0, or a list of unique GPU ids"
    if value == "auto" and isinstance(value, str):
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{expected}, got {value}")
        return value
    if isinstance(value, (list, tuple)):
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            raise ValueError(f"{expected}; the list has an entry that is not an id >= 0")
        repeated = sorted({i for i in value if list(value).count(i) > 1})
        if repeated:
            raise ValueError(f"duplicate GPU id(s): {', '.join(map(str, repeated))}")
        return tuple(value)
    raise ValueError(f"{expected}, got {value!r}")


StrictText = Annotated[str, Strict()]
Text = Annotated[str, Strict(), AfterValidator(_non_empty)]


def _host_dir(value: str) -> str:
    """A folder on a remote host: absolute, one line (its shell and its facts read it as such)."""
    if not value.strip():
        raise ValueError("expected an absolute path on the host, got an empty value")
    if not value.startswith("/"):
        raise ValueError(f"expected an absolute path on the host (it starts with /), got {value!r}")
    if any(char in value for char in "\n\r\x00"):
        raise ValueError(f"expected a path on one line, got {value!r}")
    return value.rstrip("/") or "/"


HostDir = Annotated[str, Strict(), AfterValidator(_host_dir)]
Seconds = Annotated[float, Strict(), AfterValidator(_above_zero("seconds"))]
PositiveNumber = Annotated[float, Strict(), AfterValidator(_above_zero("a number"))]
NonNegativeNumber = Annotated[float, Strict(), AfterValidator(_non_negative)]
PositiveInt = Annotated[int, Strict(), AfterValidator(_at_least(1))]
NonNegativeInt = Annotated[int, Strict(), AfterValidator(_at_least(0))]
Name = Annotated[str, Strict(), AfterValidator(_name("name"))]
RepoId = Annotated[str, Strict(), AfterValidator(_name("repo id"))]
TemplateText = Annotated[str, Strict(), AfterValidator(_check_template)]
Env = dict[Annotated[str, Strict(), AfterValidator(_env_name)], TemplateText]
PriceDate = Annotated[datetime.date, BeforeValidator(_date)]
GpuSelection = Annotated[
    Union[Literal["auto"], int, tuple[int, ...]], BeforeValidator(_gpu_selection)
]


def _command_form(value: Any) -> str | None:
    if isinstance(value, str):
        return "shell"
    if isinstance(value, (list, tuple)):
        return "argv"
    return None


Command = Annotated[
    Union[
        Annotated[Annotated[TemplateText, AfterValidator(_non_empty)], Tag("shell")],
        Annotated[tuple[TemplateText, ...], Field(min_length=1), Tag("argv")],
    ],
    Discriminator(
        _command_form,
        custom_error_type="command_type",
        custom_error_message="expected a command: a string (run through sh -c) "
        "or a list of strings (an argv)",
    ),
]


# --------------------------------------------------------------------------- LLM agents: prompt templates and secret names
PROMPT_FIELDS: frozenset[str] = frozenset({"schema"})
"""Placeholders a prompt may use beyond TEMPLATE_FIELDS: {schema}, the report's fields."""


def _check_prompt(template: str) -> str:
    hint = "write {{ and }} for literal braces"
    try:
        found = _placeholders(template)
    except ValueError as exc:
        raise ValueError(f"invalid prompt template: {exc} ({hint})") from None
    allowed = TEMPLATE_FIELDS | PROMPT_FIELDS
    unknown = sorted({f"{{{name}}}" for name, _, _ in found if name not in allowed})
    if unknown:
        names = ", ".join(f"{{{name}}}" for name in sorted(allowed))
        raise ValueError(f"unknown placeholder {', '.join(unknown)} in prompt; allowed: {names} ({hint})")
    return template


PromptText = Annotated[str, Strict(), AfterValidator(_non_empty), AfterValidator(_check_prompt)]
EnvName = Annotated[str, Strict(), AfterValidator(_env_name)]


# --------------------------------------------------------------------------- base model


@dataclass(frozen=True)
class _Problem:
    """A rule broken inside a model, at `where` (a data path relative to that model)."""

    where: tuple[Any, ...]
    message: str

    def as_error(self, data: Any) -> InitErrorDetails:
        return InitErrorDetails(
            type=PydanticCustomError("spec_rule", self.message), loc=self.where, input=data
        )


def _rewrap(error: Mapping[str, Any]) -> InitErrorDetails:
    """Carry a pydantic error through our re-raise, keeping its type, message and place."""
    return InitErrorDetails(
        type=PydanticCustomError(error["type"], error["msg"]),
        loc=tuple(error["loc"]),
        input=error.get("input"),
    )


class SpecModel(BaseModel):
    """Base of every spec model: frozen, unknown keys refused, every problem reported at once.

    Pydantic stops at a model's own (cross-field) rules when one of its fields is invalid, so
    those rules are written as `_rules` over the raw input and always run; their problems are
    raised together with the field errors. Unknown keys get a message that lists the known ones.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Cross-field rules over the raw mapping; override. Must tolerate ill-typed input."""
        return []

    @classmethod
    def _unknown_keys(cls, data: dict[Any, Any]) -> list[_Problem]:
        known = list(cls.model_fields)
        problems = []
        for key in data:
            if key in cls.model_fields:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(_Problem((key,), f"unknown key {key!r}{hint}; "
                                             f"expected one of: {', '.join(known)}"))
        return problems

    @model_validator(mode="wrap")
    @classmethod
    def _validate_everything(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        problems = cls._unknown_keys(data) + cls._rules(data, info.context)
        try:
            model = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as exc:
            errors = [_rewrap(error) for error in exc.errors()]
        else:
            if not problems:
                return model
            errors = []
        errors += [problem.as_error(data) for problem in problems]
        raise ValidationError.from_exception_data(cls.__name__, errors)


def _present(section: Any) -> set[Any] | None:
    """Keys set (not null) in a raw mapping or a model; None when the type is wrong."""
    if section is None:
        return set()
    if isinstance(section, dict):
        return {key for key, value in section.items() if value is not None}
    if isinstance(section, BaseModel):
        return {name for name in type(section).model_fields if getattr(section, name) is not None}
    return None


# --------------------------------------------------------------------------- defaults


class Timeouts(SpecModel):
    """Per job phase, in seconds."""

    provision: Seconds = 300
    checkout: Seconds = 600
    agent: Seconds = 3600
    probes: Seconds = 3600
    audit: Seconds = 120
    teardown: Seconds = 300


class TierTimeouts(SpecModel):
    """Per tier, in seconds; C1/C3/C4 apply when an entrypoint sets no timeout."""

    C0: Seconds = 600
    C1: Seconds = 600
    C2: Seconds = 180
    C3: Seconds = 900
    C4: Seconds = 1200


class Budgets(SpecModel):
    """Agent limits per job (run_dollars: for the whole run); None means no limit."""

    wall_clock_s: Seconds | None = 3600
    tokens: PositiveInt | None = None
    dollars: PositiveNumber | None = None
    run_dollars: PositiveNumber | None = None


class Retries(SpecModel):
    """Infrastructure retries per job (agent failures are results, never retried)."""

    infra: NonNegativeInt = 2
    backoff_s: Seconds = 5.0


class OutputLimits(SpecModel):
    """How much of an attempt's command output the store keeps as events (the raw logs keep all)."""

    head_bytes: NonNegativeInt = 4 * 2**20
    tail_bytes: NonNegativeInt = 256 * 2**10


class Price(SpecModel):
    """USD per million tokens for one model, and the date the price was read."""

    input: NonNegativeNumber
    cached_input: NonNegativeNumber
    cache_write: NonNegativeNumber
    output: NonNegativeNumber
    date: PriceDate


class Defaults(SpecModel):
    suite: Name = "starter"
    agent: Name = "venv-pip"
    host: Name = "local"
    concurrency: PositiveInt = 4
    timeouts: Timeouts = Field(default_factory=Timeouts)
    tier_timeouts: TierTimeouts = Field(default_factory=TierTimeouts)
    budgets: Budgets = Field(default_factory=Budgets)
    retries: Retries = Field(default_factory=Retries)
    output: OutputLimits = Field(default_factory=OutputLimits)
    prices: dict[StrictText, Price] = Field(default_factory=dict)
    prompt: PromptText | None = None  # the task prompt of LLM/command agents (None: engine/agents/prompt.py's)


# --------------------------------------------------------------------------- hosts and agents


def _kind_tag(value: Any) -> str | None:
    """Tags are "kind=<kind>" so they can never be mistaken for a data key in error paths."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return f"kind={kind}" if isinstance(kind, str) else None


# --------------------------------------------------------------------------- docker sandboxes, ssh hosts


class DockerOptions(SpecModel):
    """Limits of a docker sandbox's container (see engine/sandbox/docker.py)."""

    network: Literal["none", "host"] = "none"  # never a bridge
    cpus: PositiveNumber | None = None  # CPU quota, in CPUs
    memory_mib: PositiveInt | None = None  # hard memory limit (swap included)
    pids: PositiveInt = 4096  # pids limit
    shm_mib: PositiveInt = 2048  # /dev/shm (NCCL needs more than docker's 64 MiB)
    # RLIMIT_MEMLOCK for NCCL over InfiniBand, in bytes; -1 = unlimited. None (the default) leaves
    # the daemon's own: raising it needs CAP_SYS_RESOURCE, which many machines' dockerd lacks.
    memlock: Annotated[int, Strict(), AfterValidator(_memlock)] | None = None
    user: Text | None = None  # user[:group] in the container (default: the image's)
    # The daemon's unix socket (a path or unix:// URL). None: a local host uses $DOCKER_HOST (else
    # the default socket), an ssh host /var/run/docker.sock on that host.
    socket: Annotated[str, Strict(), AfterValidator(_docker_socket)] | None = None
    # Post-agent checkpoint images outlive the run, so any tier can be re-run after it ended
    # (`resenv control retry RUN JOB --tier C3`, then `resenv run --resume RUN`); false removes them
    # at the run's end with its containers.
    keep_checkpoints: bool = True


class ProcessOptions(SpecModel):
    """What a local process sandbox's bubblewrap namespace lets a command reach (engine/sandbox/isolation.py)."""

    network: Literal["none", "host"] = "host"  # host: agents can install packages; none: loopback only
    expose: list[Text] = Field(default_factory=list)  # extra absolute host paths, seen read-only
    devices: list[Text] = Field(default_factory=list)  # device nodes (or a driver's folder) passed through read-write, as /dev/nvidia* are
    uid: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 65534  # commands' uid when resenv is root

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        return [_Problem((key, index), "must be an absolute path")
                for key in ("expose", "devices") for index, path in enumerate(data.get(key) or [])
                if isinstance(path, str) and not path.startswith("/")]


class _SandboxChoice(SpecModel):
    """`sandbox: process | unsafe-process | docker`; docker needs `image:` (built or loaded on the
    host, never pulled). `unsafe-process` runs commands without bubblewrap: they see the whole machine."""

    sandbox: Literal["process", "unsafe-process", "docker"] = "process"
    image: Text | None = None
    docker: DockerOptions = Field(default_factory=DockerOptions)
    process: ProcessOptions = Field(default_factory=ProcessOptions)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        if data.get("sandbox") == "docker" and not data.get("image"):
            return [_Problem(("image",), "sandbox: docker needs `image:` (an image present on the host)")]
        return []


class LocalHost(_SandboxChoice):
    """This machine."""

    kind: Literal["local"]
    slots: PositiveInt = 2
    gpus: GpuSelection = "auto"


class SshHost(_SandboxChoice):
    """A machine reached over SSH (public-key auth only; host keys checked against known_hosts)."""

    kind: Literal["ssh"]
    address: Text
    port: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 22
    user: Text | None = None  # default: the engine's user
    key: Text | None = None  # private key file (default: ~/.ssh/id_* and the ssh agent)
    known_hosts: Text | None = None  # default: ~/.ssh/known_hosts
    strict_host_keys: bool = True  # false: accept any host key (test rigs only)
    slots: PositiveInt = 2
    gpus: GpuSelection = "auto"
    keepalive_s: Seconds = 10.0  # a silent host is dead after keepalive_s * keepalive_count
    keepalive_count: PositiveInt = 3
    connect_timeout_s: Seconds = 15.0
    max_sessions: PositiveInt = 10  # the server's MaxSessions (OpenSSH default 10)
    # where the run's files go on the host (runs/<run>/...); default: ${XDG_DATA_HOME:-$HOME/.local/share}/resenv
    data_dir: HostDir | None = None


# --------------------------------------------------------------------------- slurm hosts
def _gpu_count_or_auto(value: Any) -> Any:
    if value == "auto" and isinstance(value, str):
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"expected 'auto' or a GPU count >= 0 (GPUs one node gives one job), got {value!r}")


SBATCH_OWNED = ("--job-name", "--output", "--error", "--open-mode", "--chdir", "--export", "--parsable", "--wrap",
                "--array", "--requeue", "--no-requeue", "--comment", "--gres", "--gpus", "--nodes", "--ntasks",
                "--partition", "--account", "--qos", "--time", "--cpus-per-task", "--mem", "--input")


class SlurmLogin(SpecModel):
    """The login node a slurm host is reached through: SSH as for `kind: ssh` hosts."""

    address: Text
    port: Annotated[int, Strict(), AfterValidator(_at_least(1))] = 22
    user: Text | None = None
    key: Text | None = None
    known_hosts: Text | None = None
    strict_host_keys: bool = True
    keepalive_s: Seconds = 10.0
    keepalive_count: PositiveInt = 3
    connect_timeout_s: Seconds = 15.0
    max_sessions: PositiveInt = 10


class SlurmHost(SpecModel):
    """A Slurm cluster: each sandbox command that needs the cluster is one Slurm job (docs/slurm.md)."""

    kind: Literal["slurm"]
    partition: Text | None = None  # default: the cluster's default partition
    account: Text | None = None
    qos: Text | None = None
    gpus: Annotated[Union[Literal["auto"], int], BeforeValidator(_gpu_count_or_auto)] = "auto"
    gres: Text = "gpu"  # the GRES asked for as --gres=<gres>:N (e.g. gpu:a100)
    agent_gpus: NonNegativeInt = 0  # GPUs of the agent's own job (0: none idle through an agent's hours)
    cpus: PositiveInt = 4  # --cpus-per-task of every job
    memory_mib: PositiveInt | None = None  # --mem (default: the partition's)
    time_limit_min: PositiveInt | None = None  # a cap on --time (default: resenv's timeout + a margin)
    sbatch_options: tuple[Text, ...] = ()  # more sbatch options, each one `--name[=value]`
    slots: PositiveInt = 16  # resenv jobs in flight on the cluster at once
    poll_s: Seconds = 1.0  # one squeue per poll for every job of the host
    slurm_conf: Text | None = None  # SLURM_CONF for the client commands (default: the system's)
    login: SlurmLogin | None = None  # reach the cluster through this login node (default: this machine)
    sandbox: Literal["process"] = "process"

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        problems = []
        options = data.get("sbatch_options")
        for index, option in enumerate(options if isinstance(options, (list, tuple)) else []):
            if not isinstance(option, str):
                continue
            name = option.split("=", 1)[0]
            if not name.startswith("--") or " " in name:
                problems.append(_Problem(("sbatch_options", index),
                                         f"expected one long option `--name[=value]`, got {option!r}"))
            elif name in SBATCH_OWNED:
                problems.append(_Problem(("sbatch_options", index),
                                         f"{name} is set by resenv (or by a field of this host); "
                                         "use the host's fields (partition, account, qos, cpus, memory_mib, ...)"))
        return problems


Host = Annotated[
    Union[Annotated[LocalHost, Tag("kind=local")], Annotated[SshHost, Tag("kind=ssh")],
          Annotated[SlurmHost, Tag("kind=slurm")]],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known host kinds: local, ssh, slurm"),
]


class Runnable(SpecModel):
    """A command template plus env templates, rendered for one job."""

    command: Command
    env: Env = Field(default_factory=dict)

    def argv(self, values: Mapping[str, str]) -> list[str]:
        """The argv to execute: a list renders item by item, a string via /bin/sh -c (quoted). The shell
        is named by its path: probes put the agent's bin dir first on PATH, and an `sh` there is the
        agent's, not the judge's."""
        if isinstance(self.command, str):
            quoted = {key: shlex.quote(str(value)) for key, value in values.items()}
            return ["/bin/sh", "-c", render(self.command, quoted)]
        return [render(arg, values) for arg in self.command]

    def render_env(self, values: Mapping[str, str]) -> dict[str, str]:
        return {name: render(value, values) for name, value in self.env.items()}


# --------------------------------------------------------------------------- LLM agents: secrets, prompt, claude-code and codex


class AgentExtras(SpecModel):
    """Secrets (passed to the agent process only, redacted from everything stored) and the prompt."""

    env_from: tuple[EnvName, ...] = ()
    env_file: Text | None = None
    prompt: PromptText | None = None

    @field_validator("env_file")
    @classmethod
    def _env_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Kept absolute (a snapshot must not depend on the cwd); must exist when loaded."""
        if value is None:
            return value
        context = info.context or {}
        base_dir = context.get("base_dir")
        where = Path(value) if base_dir is None else Path(base_dir) / value
        if base_dir is not None and context.get("check_paths", True) and not where.is_file():
            raise ValueError(f"env_file {value!r} is not a file (looked at {where})")
        return str(where.absolute()) if base_dir is not None else value


class CliAgentSpec(AgentExtras):
    """What the coding-agent CLIs share (see engine/agents/claude_code.py and codex.py)."""

    executable: Text
    model: Text | None = None
    args: tuple[TemplateText, ...] = ()
    env: Env = Field(default_factory=dict)
    completion_grace_s: Seconds = 30.0

    def render_env(self, values: Mapping[str, str]) -> dict[str, str]:
        return {name: render(value, values) for name, value in self.env.items()}


class ClaudeCodeAgent(CliAgentSpec):
    """Claude Code in print mode (`claude -p --output-format stream-json --verbose`)."""

    kind: Literal["claude-code"]
    executable: Text = "claude"
    permission_mode: Literal["bypassPermissions", "acceptEdits", "default", "dontAsk", "plan"] = "bypassPermissions"
    max_turns: PositiveInt | None = None


CodexConfigValue = Union[TemplateText, Annotated[bool, Strict()], Annotated[int, Strict()], Annotated[float, Strict()]]


class CodexAgent(CliAgentSpec):
    """OpenAI Codex in exec mode (`codex exec --json -`); `config` entries become `-c key=value`."""

    kind: Literal["codex"]
    executable: Text = "codex"
    sandbox: Literal["none", "read-only", "workspace-write", "danger-full-access"] = "none"
    config: dict[StrictText, CodexConfigValue] = Field(default_factory=dict)


class CommandAgent(Runnable, AgentExtras):
    """Any CLI: runs `command` in the job's work dir, then reads the report it wrote."""

    kind: Literal["command"]
    output: Literal["text", "jsonl"] = "text"


class BaselineAgent(SpecModel):
    """The built-in rule-based baseline (no LLM): `engine/agents/baseline_agent.py` reads the repo's
    dependency metadata statically, builds a venv in {env}, installs, scans imports for what is
    still missing, verifies with the new interpreter and reports only what it measured."""

    kind: Literal["baseline"]
    offline: Annotated[bool, Strict()] = False
    python: Text | None = None
    driver: Text | None = None  # the interpreter that runs the script (default: see engine/agents/baseline.py)
    installer: Literal["auto", "uv", "pip"] = "auto"


Agent = Annotated[
    Union[
        Annotated[CommandAgent, Tag("kind=command")],
        Annotated[BaselineAgent, Tag("kind=baseline")],
        Annotated[ClaudeCodeAgent, Tag("kind=claude-code")],
        Annotated[CodexAgent, Tag("kind=codex")],
    ],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known agent kinds: command, baseline, claude-code, codex"),
]


# --------------------------------------------------------------------------- repos


class LocalSource(SpecModel):
    """A directory bundled with the benchmark (relative paths are from the yaml's folder)."""

    path: Text

    @field_validator("path")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        context = info.context or {}
        base_dir = context.get("base_dir")
        if base_dir is None or not context.get("check_paths", True):
            return value  # built in code, or restored from a snapshot: nothing to look at
        where = Path(base_dir) / value
        if not where.exists():
            raise ValueError(f"local source path {value!r} does not exist (looked at {where})")
        if not where.is_dir():
            raise ValueError(f"local source path {value!r} is not a directory ({where})")
        return value

    def resolve(self, base_dir: Path) -> Path:
        return (Path(base_dir) / self.path).absolute()


class GitSource(SpecModel):
    """A repository pinned to a full commit sha (a branch or short sha could move)."""

    git: Text
    commit: StrictText

    @field_validator("commit")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError(f"expected a full 40-hex commit sha, got {value!r}")
        return value.lower()


def _source_form(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return {LocalSource: "local source", GitSource: "git source"}.get(type(value))
    if not isinstance(value, dict) or ("path" in value) == ("git" in value):
        return None
    return "local source" if "path" in value else "git source"


Source = Annotated[
    Union[Annotated[LocalSource, Tag("local source")], Annotated[GitSource, Tag("git source")]],
    Discriminator(_source_form, custom_error_type="source_form",
                  custom_error_message="expected exactly one of {path: <directory>} "
                  "or {git: <url>, commit: <40-hex sha>}"),
]


class Entrypoint(Runnable):
    """How to run one tier of a repo: in the repo checkout, on `gpus` leased GPUs."""

    timeout: Seconds | None = None
    gpus: NonNegativeInt = 0


class CpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 0

    @field_validator("gpus")
    @classmethod
    def _none(cls, value: int) -> int:
        if value != 0:
            raise ValueError(f"the cpu tier runs with GPUs hidden: gpus must be 0, got {value}")
        return value


class SingleGpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 1

    @field_validator("gpus")
    @classmethod
    def _one(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"the single_gpu tier runs on one GPU: gpus must be 1, got {value}")
        return value


class MultiGpuEntrypoint(Entrypoint):
    gpus: NonNegativeInt = 2

    @field_validator("gpus")
    @classmethod
    def _several(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"the multi_gpu tier needs gpus >= 2, got {value}")
        return value


class Entrypoints(SpecModel):
    cpu: CpuEntrypoint | None = None
    single_gpu: SingleGpuEntrypoint | None = None
    multi_gpu: MultiGpuEntrypoint | None = None


class NotApplicable(SpecModel):
    """Tiers that do not apply to a repo, each with the reason why."""

    cpu: Text | None = None
    single_gpu: Text | None = None
    multi_gpu: Text | None = None


# --------------------------------------------------------------------------- repo assets (weights and data, pinned)
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


def _relative_path(value: str) -> str:
    if value.startswith("/") or ".." in Path(value).parts:
        raise ValueError(f"expected a path relative to the repo checkout, got {value!r}")
    return value


RelativePath = Annotated[str, Strict(), AfterValidator(_non_empty), AfterValidator(_relative_path)]


class HfAsset(SpecModel):
    """A Hugging Face Hub repo (model or dataset) at a pinned revision (a full 40-hex commit)."""

    kind: Literal["hf"]
    repo: Text                        # e.g. depth-anything/Depth-Anything-V2-Small
    repo_type: Literal["model", "dataset", "space"] = "model"
    revision: StrictText
    size: PositiveInt                 # bytes, for the plan and disk checks
    files: tuple[Text, ...] = ()      # only these files (default: the whole repo)
    dest: RelativePath | None = None  # where in the checkout it goes (default: the HF cache)

    @field_validator("revision")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _COMMIT.match(value):
            raise ValueError(f"expected a full 40-hex revision sha, got {value!r}")
        return value.lower()

    def label(self) -> str:
        return f"hf:{self.repo}@{self.revision[:12]} ({_size(self.size)})"


class UrlAsset(SpecModel):
    """One file from a URL, checked by its sha256."""

    kind: Literal["url"]
    url: Text
    sha256: StrictText
    size: PositiveInt
    dest: RelativePath | None = None

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not _SHA256.match(value):
            raise ValueError(f"expected a 64-hex sha256, got {value!r}")
        return value.lower()

    def label(self) -> str:
        return f"url:{self.url} ({_size(self.size)})"


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


Asset = Annotated[
    Union[Annotated[HfAsset, Tag("kind=hf")], Annotated[UrlAsset, Tag("kind=url")]],
    Discriminator(_kind_tag, custom_error_type="unknown_kind",
                  custom_error_message="known asset kinds: hf, url"),
]


class RepoTask(SpecModel):
    id: RepoId
    source: Source
    category: Text = "uncategorized"
    entrypoints: Entrypoints = Field(default_factory=Entrypoints)
    not_applicable: NotApplicable = Field(default_factory=NotApplicable)
    assets: tuple[Asset, ...] = ()  # weights/data the entrypoints need, pinned
    # Assets an entrypoint is known to need that are not pinned yet (a hub repo or a URL, named for the
    # record): nothing fetches them, and the plan names them so that no one reads "none declared" as
    # "none needed". Pinning one (`resenv assets pin`) moves it to `assets:`.
    unpinned_assets: tuple[Text, ...] = ()

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Each tier is either runnable or excused, never both and never neither."""
        runnable = _present(data.get("entrypoints"))
        excused = _present(data.get("not_applicable"))
        if runnable is None or excused is None:
            return []  # a type error that pydantic reports
        problems = [
            _Problem(("not_applicable", tier), f"tier {tier} is both in entrypoints and "
                     "not_applicable; keep only one")
            for tier in TIERS if tier in runnable and tier in excused
        ]
        missing = [tier for tier in TIERS if tier not in runnable and tier not in excused]
        if missing:
            where = ("entrypoints",) if "entrypoints" in data else ()
            tiers = (f"tier {missing[0]} is" if len(missing) == 1
                     else f"tiers {', '.join(missing)} are")
            problems.append(_Problem(where, f"{tiers} in neither entrypoints nor not_applicable; "
                                     "give each an entrypoint or a reason "
                                     f'(e.g. not_applicable: {{{missing[0]}: "<reason>"}})'))
        return problems

    def tiers(self) -> dict[str, Entrypoint | str]:
        """Tier name -> its entrypoint, or the reason it does not apply."""
        return {
            tier: getattr(self.entrypoints, tier) or getattr(self.not_applicable, tier)
            for tier in TIERS
        }

    def gpus_needed(self, tiers: Iterable[str] = ("C0", "C1", "C2", "C3", "C4", "C5")) -> int:
        """GPUs a job of this repo leases: the most any entrypoint of the selected `tiers` uses (the
        agent works with them too), and at least one when C2 is judged, since C2 applies to every repo
        (the paper's denominator is all 44): the framework must see a GPU even where the repo runs on
        CPU only. Tiers that are not selected lease nothing: `C0,C1,C5` needs no GPU."""
        tiers = set(tiers)
        needs = [ep.gpus for tier, ep in self.tiers().items()
                 if isinstance(ep, Entrypoint) and TIER_CODES[tier] in tiers]
        if "C2" in tiers:
            needs.append(1)
        return max(needs, default=0)


class Suite(SpecModel):
    description: StrictText | None = None
    repos: tuple[RepoTask, ...] = Field(min_length=1)

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """Repo ids name files and rows, so they are unique within a suite."""
        repos = data.get("repos")
        if not isinstance(repos, (list, tuple)):
            return []
        first: dict[str, int] = {}
        problems = []
        for index, repo in enumerate(repos):
            rid = repo.get("id") if isinstance(repo, dict) else getattr(repo, "id", None)
            if not isinstance(rid, str):
                continue
            if rid in first:
                problems.append(_Problem(("repos", index, "id"), f"duplicate repo id {rid!r} "
                                         f"(already used by repos[{first[rid]}])"))
            else:
                first[rid] = index
        return problems

    def repo(self, repo_id: str) -> RepoTask:
        for repo in self.repos:
            if repo.id == repo_id:
                return repo
        raise SpecLookupError("repo", repo_id, [repo.id for repo in self.repos])


# --------------------------------------------------------------------------- benchmark


class SpecLookupError(KeyError):
    """A name that the benchmark does not define; the message lists the names it does."""

    def __init__(self, what: str, name: str, known: Sequence[str]):
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown {what} {name!r}; known: {listed}")
        self.what, self.name, self.known = what, name, list(known)

    def __str__(self) -> str:
        return str(self.args[0])


class Benchmark(SpecModel):
    version: Annotated[int, Strict()]
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: dict[Name, Host] = Field(default_factory=lambda: {"local": LocalHost(kind="local")})
    agents: dict[Name, Agent] = Field(default_factory=dict)
    suites: dict[Name, Suite] = Field(min_length=1)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source_path: Path | None = PrivateAttr(default=None)

    _DEFAULT_REFS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("suite", "suites"), ("agent", "agents"), ("host", "hosts"),
    )

    @field_validator("version")
    @classmethod
    def _supported(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"unsupported version {value}: this resenv reads version 1")
        return value

    @classmethod
    def _rules(cls, data: dict[Any, Any], context: Any) -> list[_Problem]:
        """defaults.suite / agent / host must name something defined in the file."""
        defaults = data.get("defaults", {})
        if isinstance(defaults, BaseModel):
            defaults = defaults.model_dump()
        if not isinstance(defaults, dict):
            return []
        problems = []
        for field, section in cls._DEFAULT_REFS:
            names = data[section] if section in data else cls.model_fields[section].get_default(
                call_default_factory=True)
            name = defaults.get(field, Defaults.model_fields[field].default)
            if not isinstance(names, dict) or not names or not isinstance(name, str):
                continue  # nothing to check against (a missing section is reported by itself)
            if name not in names:
                implicit = ("" if field in defaults
                            else f" (the built-in default; set defaults.{field})")
                known = ", ".join(sorted(map(str, names))) or "none"
                problems.append(_Problem(("defaults", field), f"default {field} {name!r} is not "
                                         f"defined{implicit}; known {section}: {known}"))
        return problems

    @model_validator(mode="after")
    def _remember_origin(self, info: ValidationInfo) -> Benchmark:
        context = info.context or {}
        if context.get("base_dir") is not None:
            self._base_dir = Path(context["base_dir"])
        if context.get("source_path") is not None:
            self._source_path = Path(context["source_path"])
        return self

    @property
    def base_dir(self) -> Path:
        """The folder of benchmark.yaml: relative paths in the spec start here."""
        return self._base_dir

    @property
    def source_path(self) -> Path | None:
        """The benchmark.yaml this was loaded from (None when built in code or from a snapshot)."""
        return self._source_path

    def snapshot(self) -> dict[str, Any]:
        """The spec as JSON-ready data: a resumed run uses the spec it began with."""
        return self.model_dump(mode="json")

    def suite(self, name: str | None = None) -> Suite:
        """The named suite (default: defaults.suite)."""
        return self._lookup("suite", self.suites, name or self.defaults.suite)

    def agent(self, name: str | None = None) -> CommandAgent | BaselineAgent | ClaudeCodeAgent | CodexAgent:
        """The named agent (default: defaults.agent)."""
        return self._lookup("agent", self.agents, name or self.defaults.agent)

    def host(self, name: str | None = None) -> LocalHost | SshHost:
        """The named host (default: defaults.host)."""
        return self._lookup("host", self.hosts, name or self.defaults.host)

    def tier_timeout(self, repo: RepoTask, tier: str) -> float:
        """Seconds for a tier ("C0".."C4" or cpu/single_gpu/multi_gpu) of one repo."""
        code = TIER_CODES.get(tier, tier)
        name = next((t for t, c in TIER_CODES.items() if c == code), None)
        entrypoint = getattr(repo.entrypoints, name) if name else None
        if entrypoint is not None and entrypoint.timeout is not None:
            return entrypoint.timeout
        try:
            return getattr(self.defaults.tier_timeouts, code)
        except AttributeError:
            raise SpecLookupError("tier", tier, [*TierTimeouts.model_fields, *TIERS]) from None

    @staticmethod
    def _lookup(what: str, table: Mapping[str, Any], name: str) -> Any:
        if name not in table:
            raise SpecLookupError(what, name, list(table))
        return table[name]


# --------------------------------------------------------------------------- loading


def load_benchmark(path: Path) -> Benchmark:
    """Read and validate a benchmark.yaml; raise `SpecError` listing every problem."""
    path = Path(path)
    data, positions = load_yaml_file(path)
    context = {"base_dir": path.absolute().parent, "source_path": path.absolute()}
    return _validate(data, positions, str(path), context)


def loads_benchmark(text: str, base_dir: Path, file: str = "<string>") -> Benchmark:
    """`load_benchmark` for YAML text; relative source paths are resolved from `base_dir`."""
    data, positions = load_yaml(text, file)
    return _validate(data, positions, file, {"base_dir": Path(base_dir).absolute()})


def benchmark_from_snapshot(data: Mapping[str, Any], base_dir: Path) -> Benchmark:
    """Rebuild the spec a run was created with (`Benchmark.snapshot()`).

    Local source folders are not required to exist any more: the run keeps its own pristine
    copies, and a resumed run must not fail because the catalog moved on.
    """
    context = {"base_dir": Path(base_dir).absolute(), "check_paths": False}
    return _validate(dict(data), None, "<snapshot>", context)


def _validate(data: Any, positions: Positions | None, file: str,
              context: dict[str, Any]) -> Benchmark:
    if data is None:
        raise SpecError([SpecIssue(file, None, "", "the file is empty; expected a mapping "
                                   "with at least `version` and `suites`")])
    try:
        return Benchmark.model_validate(data, context=context)
    except ValidationError as exc:
        raise SpecError(issues_from_validation(exc, data, positions, file)) from None


def issues_from_validation(
    exc: ValidationError, data: Any, positions: Positions | None, file: str
) -> list[SpecIssue]:
    """Map pydantic's errors onto the data: a real field path, its line, a plain message."""
    located = []
    for error in exc.errors():
        path = _data_path(error["loc"], data, error["type"])
        located.append((path, error))
    issues = []
    for path, error in located:
        if error["type"] == "too_short" and any(
            other[: len(path)] == path and other != path for other, _ in located
        ):
            continue  # "0 items" after its items failed: the item errors say it better
        line = positions.line(path) if positions is not None else None
        issues.append(SpecIssue(file, line, format_path(path), _message(error, data, path)))
    return issues


def _data_path(loc: Sequence[Any], data: Any, error_type: str) -> tuple[Any, ...]:
    """Keep the loc entries that are real keys/indexes of `data`; drop pydantic's bookkeeping
    (union tags, "[key]", validator names). A missing field keeps its name at the end."""
    path: list[Any] = []
    node = data
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            path.append(part)
        elif position == len(loc) - 1 and error_type == "missing":
            path.append(part)
    if error_type == "unknown_kind" and isinstance(node, dict) and "kind" in node:
        path.append("kind")
    return tuple(path)


_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: Mapping[str, Any], data: Any, path: tuple[Any, ...]) -> str:
    """Pydantic's message, reworded for a YAML author and with the offending value."""
    kind, message, value = error["type"], error["msg"], error.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, got {_show(value)}"
    if kind == "literal_error":
        return f"{message.replace('Input should be', 'expected', 1)}, got {_show(value)}"
    if kind == "unknown_kind":
        given = value.get("kind") if isinstance(value, dict) else None
        return f"unknown kind {_show(given)}; {message}" if given else f"missing `kind`; {message}"
    if kind in ("value_error", "assertion_error"):
        return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    short = re.match(r"^\w+ should have at least (\d+) items? after validation, not (\d+)$",
                     message)
    if kind == "too_short" and short:
        return f"expected at least {short[1]} item(s), got {short[2]}"
    return message
