"""Probe: what interpreter is this? Prints one JSON object (its last line)."""
import json
import os
import platform
import sys
import sysconfig

print(json.dumps({
    "executable": sys.executable,
    "realpath": os.path.realpath(sys.executable),
    "version": platform.python_version(),
    "implementation": platform.python_implementation(),
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    "purelib": sysconfig.get_paths().get("purelib"),
    "platform": platform.platform(),
}))
