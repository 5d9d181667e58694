"""Probe: what interpreter is this? Prints one JSON object (its last line).

Usage: python interpreter.py [NONCE] - the nonce is echoed back, so only a program that really ran
this Python code can give the answer the judge expects; ``exe`` is the program the kernel runs as
this process, which a wrapper around a real Python cannot make its own.
"""
import json
import os
import platform
import sys
import sysconfig

print(json.dumps({
    "nonce": sys.argv[1] if len(sys.argv) > 1 else None,
    "executable": sys.executable,
    "exe": os.path.realpath("/proc/self/exe") if os.path.exists("/proc/self/exe") else None,
    "realpath": os.path.realpath(sys.executable),
    "version": platform.python_version(),
    "implementation": platform.python_implementation(),
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    "purelib": sysconfig.get_paths().get("purelib"),
    "platform": platform.platform(),
}))
