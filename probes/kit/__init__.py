"""Probe scripts copied into a sandbox and run with the agent's interpreter after the agent stopped.

They use only the standard library and syntax old Pythons accept, import nothing from resenv, never
install or write anything into the environment they measure, and print one JSON object as their
last line of output.
"""

from __future__ import annotations

from importlib import resources

SCRIPTS = ("interpreter.py", "frameworks.py", "importmap.py", "treescan.py", "hookscan.py")


def script_source(name: str) -> bytes:
    """The bytes of one probe script, for `Sandbox.put`."""
    if name not in SCRIPTS:
        raise KeyError(name)
    return resources.files(__name__).joinpath(name).read_bytes()
