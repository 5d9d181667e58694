"""`resenv image build`: an image for docker hosts, made here without pulling (engine/image_build.py)."""

from __future__ import annotations

import click


@click.group("image")
def image_group() -> None:
    """Images for `sandbox: docker` hosts, made without pulling."""


@image_group.command("build")
@click.option("--base", type=click.Choice(["host", "debian"]), default="host", show_default=True,
              help="host: this machine's python3 and tools (seconds, no network); debian: debootstrap of this"
                   " machine's Debian release from its apt mirror, with gcc and Python headers (minutes, root).")
@click.option("--tag", default="resenv-agent:latest", show_default=True, help="The image's name:tag.")
@click.option("--socket", "socket_path", default=None,
              help="The daemon's unix socket (default: DOCKER_HOST, else /var/run/docker.sock).")
@click.option("--python", default="/usr/bin/python3", show_default=True, help="With --base host: the system python3 to copy.")
@click.option("--mirror", default=None, help="With --base debian: the Debian mirror (default: this machine's, from /etc/apt).")
@click.option("--release", default=None, help="With --base debian: the release (default: this machine's).")
@click.option("--include", "extra", multiple=True, help="With --base debian: another package to install (repeatable).")
def build_command(base: str, tag: str, socket_path: str | None, python: str, mirror: str | None,
                  release: str | None, extra: tuple[str, ...]) -> None:
    """Make an image with every tool a docker sandbox needs and load it into the daemon."""
    from .image_build import ImageBuildError, build_image
    from .sandbox.docker import local_docker_client
    from .sandbox.docker_preflight import daemon_url, explanation

    where = daemon_url(socket_path)
    try:
        client = local_docker_client(socket_path.removeprefix("unix://") if socket_path else None)
        client.ping()
    except Exception as error:
        raise click.ClickException(f"cannot reach the docker daemon at {where}: {explanation(error)}; start dockerd,"
                                   " or name its socket with --socket (or DOCKER_HOST)") from error
    try:
        built = build_image(client, base=base, tag=tag, python=python, mirror=mirror, release=release, extra=extra,
                            say=lambda line: click.echo(f"  {line}", err=True))
    except ImageBuildError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"built {built.tag} ({built.image_id[:19]}, {built.size_mib} MiB) from base {built.base},"
               f" python3 {built.python}, on the daemon at {where}")
    click.echo(f"use it with: sandbox: docker, image: {built.tag}"
               + (f", docker: {{socket: {socket_path.removeprefix('unix://')}}}" if socket_path else ""))

