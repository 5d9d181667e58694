"""Reading benchmark.yaml for a command: every spec problem becomes one clear CLI error."""

from __future__ import annotations

from pathlib import Path

import click

from ..spec import Benchmark, SpecError, format_issues, load_benchmark


def load_for_cli(path: Path) -> Benchmark:
    """The benchmark at `path`, or a ClickException listing each problem with file:line and field:
    a file that cannot be read is that one line, one problem is one line, several are one line each."""
    if path == Path("benchmark.yaml") and not path.exists():  # the default, outside a benchmark's folder
        raise click.ClickException("no benchmark.yaml here; pass a path (such as path/to/benchmark.yaml)")
    try:
        return load_benchmark(path)
    except SpecError as error:
        issues = error.issues
        if len(issues) == 1 and issues[0].line is None and not issues[0].path:  # the file itself: unreadable
            raise click.ClickException(str(issues[0])) from error
        if len(issues) == 1:
            raise click.ClickException(f"invalid benchmark: {issues[0]}") from error
        raise click.ClickException(f"invalid benchmark ({len(issues)} problems):\n" + format_issues(issues)) from error
    except OSError as error:
        raise click.ClickException(f"cannot read {path}: {error.strerror}") from error
