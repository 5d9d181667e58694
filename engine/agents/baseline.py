"""The `baseline` agent: resenv's built-in rule-based agent (no LLM), honest about what it measured.

The work is done by ONE stdlib-only script, `baseline_agent.py` beside this file (its docstring has
the steps and the event schema), and its parts in `baseline_kit/`. The adapter stages both into the
job's work dir, with the judges'
modules it shares (`probes/buildinfo.py`, `probes/classifier.py`, `probes/localroots.py`) beside
it as one package, and runs it there, so the
sandbox's timeout, pause and kill reach it and everything it starts. Its driver (Python >=
3.11, for tomllib) is `driver:`, else the engine's own interpreter on the local process sandbox and
the sandbox's `python3` on an SSH host or in a container. The env itself is built from `python:`
(default: the driver).

The sandbox gives every command a clean environment and a private HOME, which would hide the
operator's package configuration; the adapter passes on exactly what an install needs to reach the
same package sources the operator's pip/uv use, and nothing else (no API keys):

* index, find-links, certificate and proxy variables (`FORWARDED_ENV`) when set;
* the user's pip config file as `PIP_CONFIG_FILE` (pip would read it from the real HOME);
* the user's pip and uv caches (`PIP_CACHE_DIR`, `UV_CACHE_DIR`), so jobs share one warm download
  cache (both tools lock or write atomically; concurrent jobs are safe);
* where uv is, when it is on the engine's PATH but not on the sandbox's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ... import probes
from ..sandbox.base import OutputLine
from .base import AgentCommand, JobPaths
from .baseline_kit.shared import SHARED_MODULES, SHARED_STAGED

SCRIPT = Path(__file__).with_name("baseline_agent.py")
KIT = Path(__file__).with_name("baseline_kit")
STAGED = ".resenv-agent/baseline_agent.py"

# Event types and the fields the script emits (see baseline_agent.py); anything else is kept raw.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("step", "text"),
    "tool_call": ("id", "name", "step", "command", "cwd", "timeout_s"),
    "output": ("id", "text"),
    "tool_result": ("id", "exit_code", "seconds", "timed_out", "output_tail", "lines_dropped"),
    "error": ("step", "category", "message"),
}

FORWARDED_ENV = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_CERT",
    "PIP_CLIENT_CERT", "PIP_CONFIG_FILE", "PIP_CONSTRAINT",
    "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS",
    "UV_NATIVE_TLS", "UV_PYTHON_DOWNLOADS",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)


def _user_pip_config(environ: dict[str, str]) -> str | None:
    """The per-user pip config file pip would read with the real HOME (first that exists)."""
    home = Path(environ.get("HOME") or Path.home())
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    for candidate in (config_home / "pip" / "pip.conf", home / ".pip" / "pip.conf"):
        if candidate.is_file():
            return str(candidate)
    return None


def _cache_dir(environ: dict[str, str], tool: str) -> str:
    home = Path(environ.get("HOME") or Path.home())
    return str(Path(environ.get("XDG_CACHE_HOME") or home / ".cache") / tool)


def forwarded_env(environ: dict[str, str] | None = None, *, remote: bool = False) -> dict[str, str]:
    """What the baseline passes from the engine's environment into the sandbox (see the module doc).

    `remote`: the sandbox is on another machine (an SSH host, a container), where a path of this
    machine names nothing or something else: only values that are no local paths travel (index
    URLs, proxies, flags), never a config file, certificate, cache or wheel folder of the engine's."""
    environ = dict(os.environ if environ is None else environ)
    out = {name: environ[name] for name in FORWARDED_ENV if environ.get(name)}
    if remote:
        return {name: value for name, value in out.items() if not _names_local_path(value)}
    if "PIP_CONFIG_FILE" not in out and (config := _user_pip_config(environ)):
        out["PIP_CONFIG_FILE"] = config
    out["PIP_CACHE_DIR"] = environ.get("PIP_CACHE_DIR") or _cache_dir(environ, "pip")
    out["UV_CACHE_DIR"] = environ.get("UV_CACHE_DIR") or _cache_dir(environ, "uv")
    return out


def _names_local_path(value: str) -> bool:
    """Whether a variable's value (possibly a space- or colon-separated list) names a local path."""
    for word in value.split():
        if "://" in word:
            if word.startswith("file:"):
                return True
            continue
        if any(part.startswith(("/", "~", ".")) for part in word.split(os.pathsep)):
            return True
    return False


def staged_files() -> dict[str, bytes]:
    """The script, its kit beside it (`baseline_kit/`), and, beside both as one package, the judges'
    modules it shares (build reader, failure classifier, the repo's own modules): relative path in
    the work dir -> content."""
    probes_dir = Path(probes.__file__).parent
    shared = Path(STAGED).with_name(SHARED_STAGED)
    files = {STAGED: SCRIPT.read_bytes()}
    for part in sorted(KIT.glob("*.py")):
        files[str(Path(STAGED).with_name(KIT.name) / part.name)] = part.read_bytes()
    files[str(shared / "__init__.py")] = b'"""resenv\'s judge modules, staged for the baseline agent."""\n'
    for name in SHARED_MODULES:
        files[str(shared / f"{name}.py")] = (probes_dir / f"{name}.py").read_bytes()
    return files


class BaselineAgent:
    def __init__(self, name: str, spec: Any) -> None:
        self.name = name
        self.spec = spec

    def command(self, paths: JobPaths) -> AgentCommand:
        # The script travels into the sandbox: on an SSH host or in a container the engine's files
        # are not there, and neither is its interpreter, so the sandbox's own `python3` drives it.
        script = paths.workdir / STAGED
        driver = self.spec.driver or ("python3" if paths.remote else sys.executable)
        argv = [driver, "-u", str(script), "--repo", str(paths.repo), "--env", str(paths.env),
                "--report", str(paths.report), "--installer", self.spec.installer]
        if self.spec.python:  # else the script's own interpreter (the driver) is the base
            argv += ["--python", self.spec.python]
        if self.spec.offline:
            argv.append("--offline")
        uv = None if paths.remote else shutil.which("uv")
        if uv:
            argv += ["--uv", uv]
        budget = getattr(paths, "budget_s", None)
        if budget:
            argv += ["--budget-s", f"{float(budget):g}"]
        return AgentCommand(argv=argv, env=forwarded_env(remote=paths.remote), files=staged_files())

    def parse(self, line: OutputLine) -> list[dict[str, Any]]:
        """The script's jsonl events, kept whole (every field it emits); anything else as output."""
        if line.stream != "stdout":
            return [{"type": "output", "stream": line.stream, "text": line.text}]
        try:
            event = json.loads(line.text)
        except ValueError:
            return [{"type": "output", "stream": line.stream, "text": line.text}]
        if not isinstance(event, dict) or event.get("type") not in EVENT_FIELDS:
            return [{"type": "unknown", "raw": line.text}]
        return [event]
