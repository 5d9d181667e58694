"""The benchmark spec: `benchmark.yaml` as typed, frozen pydantic models, with precise errors.

`load_benchmark(path)` reads the file with source positions (see `yamlsource`), validates it and
raises one `SpecError` listing *every* problem as ``file:line: field.path: message``.

One module per part of the file: `fields` (the base model, templates, checked scalar types),
`defaults`, `hosts`, `agents`, `repos` (suites, sources, entrypoints, assets), `benchmark` (the
whole file and the rules across its sections) and `loading`. This package's names are the spec's
public interface; the rest of resenv imports them from here.

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

from .yamlsource import SpecError, SpecIssue, format_issues
from .agents import AgentExtras, BaselineAgent, ClaudeCodeAgent, CodexAgent, CommandAgent
from .benchmark import Benchmark
from .defaults import Budgets, Defaults, Price, Retries, TierTimeouts, Timeouts
from .fields import PROMPT_FIELDS, TEMPLATE_FIELDS, TIER_CODES, TIERS, SpecLookupError, TemplateError, render
from .hosts import DockerOptions, LocalHost, SlurmHost, SlurmLogin, SshHost
from .loading import benchmark_from_snapshot, issues_from_validation, load_benchmark, loads_benchmark
from .repos import (
    Asset, CpuEntrypoint, Entrypoint, Entrypoints, GitSource, HfAsset, LocalSource, MultiGpuEntrypoint, NotApplicable,
    RepoTask, SingleGpuEntrypoint, Suite, UrlAsset,
)

__all__ = [
    "AgentExtras", "Asset", "BaselineAgent", "HfAsset", "UrlAsset", "Benchmark", "Budgets", "ClaudeCodeAgent", "CodexAgent", "CommandAgent", "CpuEntrypoint", "Defaults", "Entrypoint",
    "DockerOptions", "Entrypoints", "GitSource", "LocalHost", "SshHost", "SlurmHost", "SlurmLogin", "LocalSource", "MultiGpuEntrypoint", "NotApplicable",
    "Price", "RepoTask", "Retries", "SingleGpuEntrypoint", "SpecError", "SpecIssue",
    "SpecLookupError", "Suite", "PROMPT_FIELDS", "TEMPLATE_FIELDS", "TIERS", "TIER_CODES", "TemplateError",
    "TierTimeouts", "Timeouts", "benchmark_from_snapshot", "format_issues", "load_benchmark",
    "issues_from_validation", "loads_benchmark", "render",
]

