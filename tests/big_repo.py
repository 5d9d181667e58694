"""A generated repo that makes the import census slow: many small modules importing each other and
third-party names, and a few large generated modules (a parser holds the GIL for the whole of each
such file: one to three seconds per megabyte on a loaded 2-core machine). Shared by the loop-stall test and its perf script."""

from __future__ import annotations

import sys

MAIN = "import sys\nsys.exit(0)\n"


def _large_module(index: int, size: int) -> str:
    parts, total, line = [], 0, 0
    while total < size:
        text = (f"def f{line}(a, b=({line}, 'x{line}')):\n"
                f"    return [a + k for k in range(b[0]) if k % 3] or {{'k': a, 'v': b}}\n")
        parts.append(text)
        total += len(text)
        line += 1
    return f"# generated table {index}\nimport numpy\n" + "".join(parts)


def big_repo(small: int = 2000, large: int = 1, large_bytes: int = 1_000_000) -> dict[str, str]:
    """{path: source} of a repo with `small` small modules in packages of 50 and `large` modules of
    about `large_bytes` each, plus ``main.py`` (exits 0: the entrypoint passes)."""
    files = {"main.py": MAIN}
    for index in range(small):
        package = f"pkg{index // 50:03d}"
        files.setdefault(f"{package}/__init__.py", "")
        files[f"{package}/mod{index:05d}.py"] = (
            f"import os\nimport json\nimport torch\nfrom {package} import mod{max(index - 1, 0):05d}\n"
            + "".join(f"def g{k}(x):\n    return os.path.join(str(x), json.dumps({k}))\n" for k in range(20)))
    for index in range(large):
        files[f"tables/table{index}.py"] = _large_module(index, large_bytes)
    return files


REPORTING_AGENTS = "".join(f"""\
{name}:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s"}}}}' {sys.executable} > {{report}}
""" for name in ("a", "b"))
"""Two command agents (`a`, `b`) that only report this interpreter: their jobs share one repo and commit."""
