"""Reading benchmark.yaml for a command: every spec problem becomes one clear CLI error."""

from __future__ import annotations

from pathlib import Path

import click

from .spec import Benchmark, SpecError, format_issues, load_benchmark


def load_for_cli(path: Path) -> Benchmark:
    """The benchmark at `path`, or a ClickException listing each problem with file:line and field."""
    try:
        return load_benchmark(path)
    except SpecError as error:
        raise click.ClickException("invalid benchmark:\n" + format_issues(error.issues)) from error
    except OSError as error:
        raise click.ClickException(f"cannot read {path}: {error.strerror}") from error
