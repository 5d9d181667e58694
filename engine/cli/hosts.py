"""`resenv hosts check [BENCHMARK]`: every host of a benchmark, what it has and what is wrong.

The facts of one host come from `hosts.check` (local and SSH hosts) or `hosts.slurm.check` (a cluster);
this module picks by kind and prints them, so the host kinds never depend on the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..hosts.check import HostFacts, local_facts, remote_facts
from ..hosts.slurm.check import format_slurm, slurm_host_facts


async def check_hosts(bench: Any, data_dir: Path, names: list[str] | None = None) -> list[HostFacts]:
    from ..sandbox.remote import SshConnection, SshTarget  # asyncssh: only when a check is asked for

    results = []
    for name, spec in bench.hosts.items():
        if names and name not in names:
            continue
        if spec.kind == "slurm":  # a cluster: read through its Slurm CLI, not probed like a host
            longest = max(bench.defaults.timeouts.agent, *bench.defaults.tier_timeouts.model_dump().values())
            results.append(await slurm_host_facts(name, spec, data_dir, longest))
        elif spec.kind == "ssh":
            connection = SshConnection(SshTarget.from_spec(name, spec))
            try:
                results.append(await remote_facts(connection, spec, data_dir, check_docker=True))
            finally:
                await connection.close()
        else:
            results.append(await local_facts(name, spec, data_dir))
    return results


def format_facts(facts: HostFacts) -> list[str]:
    """Human lines for one host (the CLI prints them)."""
    if facts.kind == "slurm":  # partition, nodes and limits, not a host's GPUs and driver
        return format_slurm(facts)
    if not facts.reachable:
        return [f"{facts.name} ({facts.kind}): UNREACHABLE", *[f"  problem: {p}" for p in facts.problems]]
    gpus = ", ".join(f"{gpu['index']}:{gpu.get('name')}" for gpu in facts.gpus) or facts.gpu_state
    rtt = f", round trip {facts.round_trip_ms} ms" if facts.round_trip_ms is not None else ""
    lines = [
        f"{facts.name} ({facts.kind}): reachable{rtt}",
        f"  os: {facts.os} ({facts.kernel}), hostname {facts.hostname}",
        f"  cpus: {facts.cpus}, memory: {facts.mem_gib} GiB",
        f"  gpus: {gpus}",
        f"  driver: {facts.driver_version or '—'}, CUDA: {facts.cuda_version or '—'}",
        f"  docker: {facts.docker or ('not usable: ' + facts.docker_error if facts.docker_error else 'not installed')}",
        *_docker_lines(facts),
        f"  data dir: {facts.data_dir or '—'}"
        + ("" if facts.data_dir_error else " (can create files there)") + f", free disk: {facts.disk_free_gib} GiB",
        f"  user: {facts.user or '—'}, python3 {facts.python3 or 'missing'}, tools: "
        + ", ".join(f"{tool}{'' if path else ' (missing)'}" for tool, path in facts.tools.items()),
        *[f"  note: {note}" for note in facts.notes],
    ]
    lines += [f"  problem: {problem}" for problem in facts.problems] or ["  problems: none"]
    return lines


def _docker_lines(facts: HostFacts) -> list[str]:
    """For a docker host: where its daemon is and what image its jobs get (the preflight's findings)."""
    preflight = facts.docker_preflight
    if preflight is None:
        return []
    image = f"image {preflight.image_id[:19]}, python3 {preflight.python3 or '—'}" if preflight.image_id else "no image"
    return [f"  docker daemon: {preflight.daemon}; {image}"]


# ---- the CLI group (registered in cli.py) ---------------------------------------------------------
try:
    import click
except ImportError:  # pragma: no cover - click is a dependency
    click = None  # type: ignore[assignment]

if click is not None:

    @click.group("hosts")
    def hosts_group() -> None:
        """Hosts of a benchmark: check what they have and what is wrong."""

    @hosts_group.command("check")
    @click.argument("benchmark", type=click.Path(path_type=Path), default="benchmark.yaml", required=False)
    @click.option("--host", "names", multiple=True, help="Only these hosts (default: all in the benchmark).")
    @click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="Data dir whose free disk counts.")
    @click.option("--json", "as_json", is_flag=True)
    def check_command(benchmark: Path, names: tuple[str, ...], data_dir: Path | None, as_json: bool) -> None:
        """Per host: reachable, OS, CPUs, GPUs, driver and CUDA, docker, free disk, and every problem."""
        import json
        import sys
        from dataclasses import asdict

        from .. import eventloop
        from .load import load_for_cli
        from ..paths import absolute, default_data_dir

        bench = load_for_cli(benchmark)
        unknown = [name for name in names if name not in bench.hosts]
        if unknown:
            raise click.ClickException(f"unknown host(s) {', '.join(unknown)}; known: {', '.join(bench.hosts)}")
        results = eventloop.run(check_hosts(bench, absolute(data_dir) if data_dir else default_data_dir(), list(names) or None))
        if as_json:
            click.echo(json.dumps([asdict(facts) for facts in results], indent=2))
        else:
            for facts in results:
                click.echo("\n".join(format_facts(facts)))
        if any(facts.problems or not facts.reachable for facts in results):
            sys.exit(1)
