"""Why a docker container could not start, in the daemon's words, and whether a retry can mend it.

Shared by the sandbox (a job's own container) and the preflight (a throwaway one before any job), so
both name the same deterministic failures with the same fix; it imports neither of them.
"""

from __future__ import annotations

import re
from typing import Any

IMAGE_FIX = ("build one there with `resenv image build --tag {image}` (README: A docker host, step by step),"
             " or `docker load` it; resenv never pulls")


def explanation(error: BaseException) -> str:
    """The daemon's own words for an SDK error, on one line (not the request URL around them)."""
    text = getattr(error, "explanation", None) or str(error)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())


def setup_failure(error: BaseException, options: Any) -> str | None:
    """Cause and fix when starting a container failed in a way that no retry can mend, else None."""
    text = explanation(error)
    if re.search(r"setting rlimit|rlimit type 8", text):
        limit = "unlimited" if options.memlock == -1 else f"{options.memlock} bytes"
        return (f"the docker daemon may not raise the containers' memlock limit to {limit} ({text}): it lacks "
                "CAP_SYS_RESOURCE or its own limit is lower; leave `docker.memlock` unset (the default) or set it"
                " no higher than the daemon's limit")
    if re.search(r"could not select device driver|unknown or invalid runtime", text):
        return (f"the docker daemon cannot give containers GPUs ({text}): install the NVIDIA Container Toolkit and"
                " register its runtime (`nvidia-ctk runtime configure --runtime=docker`), then restart dockerd")
    if re.search(r"No such image|not found: manifest unknown|pull access denied", text, re.I):
        return None  # the caller names the image (a job's or a checkpoint's)
    if re.search(r"invalid (argument|user)|unable to find user|no matching entries in passwd", text, re.I):
        return f"the docker daemon refuses the container's settings ({text}): fix the host's `docker:` options"
    return None
