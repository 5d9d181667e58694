"""Scripts for the scripted model (`scripted_model.py`): what the fake hosted model answers.

Every command runs in the job's work dir (the CLI's cwd), where resenv puts the repo at ``repo/``,
suggests ``env/`` for the environment and expects ``report.json``. The repos these scripts set up
are stdlib-only, so ``pip install --no-index`` needs no package index.
"""

from __future__ import annotations

import copy
from typing import Any

PLANTED_KEY = "sk-ant-api03-PLANTED-TEST-KEY-0123456789abcdefXYZ"
"""A fake API key the tests plant in the engine's environment; it must never reach the store."""

WRITE_REPORT = (
    "env/bin/python -c \"import json, sys, platform; json.dump({'python_path': sys.executable, "
    "'python_version': platform.python_version(), 'framework': None, 'cuda_available': None, "
    "'gpu_count': None, 'ddp_expected_ok': None, 'notes': 'stdlib-only repo; main.py runs'}, "
    "open('report.json', 'w'))\" && cat report.json"
)

# Usage per step (the fake reports these; the real CLIs add them up): deliberately different per
# step, so sums and de-duplication are checkable.
SETUP: dict[str, Any] = {
    "model": "scripted-model",
    "steps": [
        {"thinking": "The repository is small; look at it first.", "text": "Let me look at the repository.",
         "commands": ["ls repo && cat repo/main.py"],
         "usage": {"input": 1000, "cache_read": 0, "cache_write": 2000, "output": 100, "reasoning": 30}},
        {"text": "Creating a virtual environment.", "commands": ["python3 -m venv env && env/bin/python -m pip --version"],
         "usage": {"input": 200, "cache_read": 3000, "cache_write": 100, "output": 60, "reasoning": 0}},
        {"text": "Installing the requirements without a package index.",
         "commands": ["env/bin/python -m pip install --no-index -r repo/requirements.txt"],
         "usage": {"input": 150, "cache_read": 3100, "cache_write": 50, "output": 50, "reasoning": 0}},
        {"text": "Verifying: run the entry point, and one command that fails.",
         "commands": ["(cd repo && ../env/bin/python main.py)", "echo 'something failed' >&2; exit 3"],
         "usage": {"input": 120, "cache_read": 3200, "cache_write": 40, "output": 80, "reasoning": 10}},
        {"text": "Writing the report.", "commands": [WRITE_REPORT],
         "usage": {"input": 100, "cache_read": 3300, "cache_write": 30, "output": 200, "reasoning": 0}},
        {"text": "Done: the environment is in env/ and the report in report.json.",
         "usage": {"input": 90, "cache_read": 3400, "cache_write": 0, "output": 40, "reasoning": 0}},
    ],
}

# The same, each tool call taking a second, as real ones do (budget stops land while it runs).
SLOW_SETUP = copy.deepcopy(SETUP)
for _step in SLOW_SETUP["steps"]:
    _step["commands"] = [f"sleep 1; {command}" for command in _step.get("commands", [])]

# The same, with transient server errors first: overloaded twice (Claude: api_retry lines; Codex
# retries requests silently), then a stream dropped twice (Codex: "Reconnecting... n/m" errors).
RETRY = copy.deepcopy(SETUP)
RETRY["steps"][0]["fail"] = {"status": 529, "times": 2}
RETRY["steps"][1]["fail"] = {"status": "drop", "times": 2}

# An API that refuses the key every time.
AUTH_FAILURE: dict[str, Any] = {"steps": [{"text": "never sent", "commands": ["true"],
                                           "fail": {"status": 401, "times": 1000}}]}

# An API that answers every request with a server error (HTTP 500), and one that forbids the key (403).
SERVER_ERROR: dict[str, Any] = {"steps": [{"text": "never sent", "commands": ["true"],
                                           "fail": {"status": 500, "times": 1000}}]}
FORBIDDEN: dict[str, Any] = {"steps": [{"text": "never sent", "commands": ["true"],
                                        "fail": {"status": 403, "times": 1000, "type": "permission_error"}}]}

# A key whose quota is spent (HTTP 429 every time), and an API whose streams always break off.
QUOTA: dict[str, Any] = {"steps": [{"text": "never sent", "commands": ["true"],
                                    "fail": {"status": 429, "times": 1000, "type": "insufficient_quota",
                                             "code": "insufficient_quota",
                                             "message": "You exceeded your current quota."}}]}
DROPPED: dict[str, Any] = {"steps": [{"text": "never sent", "commands": ["true"], "fail": {"status": "drop", "times": 1000}}]}

# More tool turns than a --max-turns 2 allows.
MAX_TURNS: dict[str, Any] = {"steps": [
    {"text": f"Step {i}.", "commands": [f"echo step {i}"]} for i in range(5)
] + [{"text": "Never reached."}]}

# A command Claude Code's permission checks refuse in mode `default` (it touches a path outside
# the work dir), then the agent gives up.
PERMISSION_DENIED: dict[str, Any] = {"steps": [
    {"text": "Cleaning a cache outside the work dir.", "commands": ["rm -rf /tmp/resenv-denied-probe && echo removed"]},
    {"text": "I could not run that: permission denied."},
]}

# A tool that prints 5 MB, and one that prints bytes that are not UTF-8.
BIG_OUTPUT: dict[str, Any] = {"steps": [
    {"text": "Printing a lot.", "commands": ["python3 -c \"import sys; sys.stdout.write('x' * 5_000_000 + '\\\\n')\""]},
    {"text": "Printing bytes that are not UTF-8.", "commands": ["printf 'bad bytes: \\377\\376 \\303\\050 end\\n'"]},
    {"text": "Done."},
]}

# The agent reads its own API key and writes it around: every copy must be redacted.
SECRET_LEAK: dict[str, Any] = {"steps": [
    {"text": "Checking the credentials.",
     "commands": ["echo \"the key is $ANTHROPIC_API_KEY $OPENAI_API_KEY\"; echo \"$ANTHROPIC_API_KEY$OPENAI_API_KEY\" > "
                  "leaked-key.txt; echo \"$ANTHROPIC_API_KEY$OPENAI_API_KEY\" >&2"]},
    {"text": "Creating a virtual environment.", "commands": ["python3 -m venv --without-pip env"]},
    {"text": "Writing the report.",
     "commands": ["env/bin/python -c \"import json, os, sys; k = os.environ.get('ANTHROPIC_API_KEY') or "
                  "os.environ.get('OPENAI_API_KEY'); json.dump({'python_path': sys.executable, 'notes': 'key ' + k}, "
                  "open('report.json', 'w'))\""]},
    {"text": "Done. For the record, I used the key from the environment."},
]}

# A tool only PRINTS the agent's API key (it writes it to no file), then sleeps so that a poller can
# look at every file while the CLI is live; then a normal report. No file may ever hold the key: not
# the raw logs, not the CLI's own session transcripts, caches or temp files.
PRINT_KEY: dict[str, Any] = {"steps": [
    {"text": "Checking the credentials.", "commands": ["echo \"the key is $ANTHROPIC_API_KEY$OPENAI_API_KEY\"; sleep 5"]},
    {"text": "Writing the report.",
     "commands": ["python3 -c \"import json, sys; json.dump({'python_path': sys.executable, 'notes': 'printed the key "
                  "only'}, open('report.json', 'w'))\" && sleep 2"]},
    {"text": "Done."},
]}

SCENARIOS = {
    "setup": SETUP, "slow-setup": SLOW_SETUP, "retry": RETRY, "auth-failure": AUTH_FAILURE, "server-error": SERVER_ERROR,
    "forbidden": FORBIDDEN, "quota": QUOTA, "dropped": DROPPED, "max-turns": MAX_TURNS,
    "permission-denied": PERMISSION_DENIED, "big-output": BIG_OUTPUT, "secret-leak": SECRET_LEAK,
    "print-key": PRINT_KEY,
}

# --------------------------------------------------------------------------------------------------
# a stdlib-only repo for the scripts above

REPO_FILES = {
    "main.py": "import json\nprint(json.dumps({'ok': True}))\n",
    "requirements.txt": "# stdlib only: nothing to install\n",
    "README.md": "Run `python main.py`.\n",
}
