"""What a probe's process really did, beyond its exit status.

An exit status is one byte the agent's environment can set: an interpreter that is ``/bin/true``, a
script that prints noise and exits 0, or an environment whose start-up code swallows a traceback
would all "pass" on status alone. So a tier trusts an interpreter only after it has answered as a
Python (:func:`interpreter_problem`), and an entrypoint that printed an uncaught traceback as its
last words failed, whatever its status (:func:`uncaught_exception`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BAD_INTERPRETER = "bad_interpreter"
ELF_MAGIC = b"\x7fELF"
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?([a-z]+\d*)?\+?$")
_TRACEBACK = "Traceback (most recent call last):"
_IGNORED = "Exception ignored"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")


def interpreter_problem(answer: Mapping[str, Any] | None, *, nonce: str, magic: bytes | None,
                        resolved: str | None = None) -> str | None:
    """Why the reported interpreter is not a Python we can trust, or None when it is.

    ``answer`` is the interpreter probe's parsed last line, ``nonce`` the token the engine handed it
    (a program that is not Python cannot echo it back), ``magic`` the first bytes of the file the
    reported path resolves to (a wrapper script could run a real Python and then override its exit
    status; None when it could not be read), ``resolved`` the file the reported path resolves to: the
    process that answered must be that very program (``/proc/self/exe``), or a wrapper ran a Python
    in its place."""
    if magic is not None and magic[:4] != ELF_MAGIC:
        shown = "a script" if magic.startswith(b"#!") else "not an executable binary"
        return f"the reported interpreter is {shown}, not a Python interpreter binary"
    if not isinstance(answer, Mapping) or answer.get("_exit", 0) != 0:
        return "the reported interpreter did not answer the interpreter probe"
    if answer.get("nonce") != nonce:
        return "the reported interpreter's answer is not the probe's (it is not running Python code)"
    version, prefix = answer.get("version"), answer.get("prefix")
    if not isinstance(version, str) or not _VERSION.match(version):
        return f"the reported interpreter gave no Python version (got {str(version)[:40]!r})"
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        return "the reported interpreter gave no installation prefix"
    if not isinstance(answer.get("executable"), str):
        return "the reported interpreter gave no executable path"
    exe = answer.get("exe")
    if resolved and isinstance(exe, str) and exe != resolved:
        return f"the reported interpreter ({resolved}) did not answer itself: {exe} did (a wrapper)"
    return None


def uncaught_exception(stderr: str) -> str | None:
    """The exception line of a Python traceback that ends the output, or None.

    A traceback the program printed and survived is followed by more output; one printed at
    interpreter shutdown as "Exception ignored in ..." is harmless. What is left is a traceback that
    is the last thing the process said: it died of it, whatever status it exited with."""
    lines = [line.rstrip() for line in stderr.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return None
    start = max((i for i, line in enumerate(lines) if line.strip().endswith(_TRACEBACK)), default=None)
    if start is None:
        return None
    if start > 0 and lines[start - 1].lstrip().startswith(_IGNORED):
        return None
    # After the frames ("  File ...", indented source lines) comes the exception, then the end.
    tail = lines[start + 1:]
    index = 0
    while index < len(tail) and (tail[index].startswith(" ") or not tail[index]):
        index += 1
    if index >= len(tail):
        return None
    exception = tail[index]
    rest = tail[index + 1:]
    if not _EXCEPTION_LINE.match(exception.strip()) or any(line.startswith(_TRACEBACK) for line in rest):
        return None
    # A message may go on for a few lines (a multi-line str of the exception); much more is output.
    return exception.strip()[:300] if len(rest) <= 30 else None


def canary_source(nonce: str) -> str:
    """A program that fails on purpose: an honest interpreter ends it with exit status 1 and the
    traceback on stderr. Start-up code that swallows tracebacks or forces the exit status (however it
    was installed: a .pth line, a customize module, an edited site.py) shows here."""
    return f"import sys\nsys.stdout.write({nonce!r} + '\\n')\nraise RuntimeError({nonce!r})\n"


def canary_problem(returncode: int | None, stderr: str, nonce: str) -> str | None:
    """Why the failing canary did not end as a failing Python program ends, or None."""
    if returncode != 1:
        return f"a program that raises exited with status {returncode}, not 1: start-up code changes how programs end"
    if f"RuntimeError: {nonce}" not in stderr:
        return "a program that raises printed no traceback: start-up code hides how programs end"
    return None
