"""`resenv assets fetch|status|pin`: fill each host's asset cache before scoring, show it, pin new assets.

Remote hosts: every asset is downloaded and verified **once, on the engine's machine**, then copied
to each SSH host's cache (the same absolute path) as one tar stream over the host's existing SSH
connection (`SshHost.push_tree`), its manifest record last. Why not download on each host: GPU hosts
often have no route to the hub (or a different token), the hub is asked once however many hosts
there are, verification happens in one place with one client version, and the engine's copy is what
docker sandboxes are given at probe time anyway. Why tar rather than SFTP: a hub snapshot is a tree
of symlinks into ``blobs/``, which a tar stream carries as links in one channel. SSH protects the
bytes in transit; the record arrives only after the tree was unpacked without error.

Hosts with ``sandbox: docker`` need nothing on the host: a container sees nothing of its host, so
the probes copy the engine's verified copy into it (see `TierRunner._stage_assets`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import urllib.request
from pathlib import Path
from typing import Any

import click

from .. import __version__, eventloop
from ..assets import (
    AssetCache, AssetError, Say, describe, fetch, human_size, missing_indexes, presence_script, redact_text, select_files,
    unique_assets,
)
from .load import load_for_cli
from ..paths import UnusablePath, absolute, default_data_dir, writable_dir
from ..sandbox.base import SandboxError
from ..spec import Asset, Benchmark, SpecLookupError
from ..wording import counted


@click.group("assets")
def assets_group() -> None:
    """Model weights and data files the repos' entrypoints need: fetched before scoring, used offline."""


def _selection(bench: Benchmark, suite: str | None, repos: tuple[str, ...], hosts: tuple[str, ...],
               ) -> tuple[str, list[Asset], list[str]]:
    """The suite, its repos' assets (each once) and the hosts, defaulting as `resenv run` does."""
    name = suite or bench.defaults.suite
    try:
        chosen = bench.suite(name)
        tasks = [chosen.repo(repo_id) for repo_id in repos] if repos else list(chosen.repos)
        host_names = list(hosts) or [bench.defaults.host]
        for host in host_names:
            bench.host(host)
    except SpecLookupError as error:
        raise click.ClickException(str(error)) from error
    return name, unique_assets(asset for task in tasks for asset in task.assets), host_names


def _needs_host_copy(spec: Any) -> bool:
    """Only SSH hosts running process sandboxes read a cache of their own."""
    return spec.kind == "ssh" and getattr(spec, "sandbox", "process") != "docker"


benchmark_argument = click.argument("benchmark", type=click.Path(path_type=Path), default="benchmark.yaml",
                                    required=False)
suite_option = click.option("--suite", help="Suite whose assets (default: the benchmark's defaults.suite).")
repo_option = click.option("--repo", "repos", multiple=True, help="Only these repo ids; repeat for several.")
host_option = click.option("--host", "hosts", multiple=True,
                           help="Host(s) whose cache to fill or show; repeat (default: defaults.host).")
data_dir_option = click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                               help="The runs' data dir, as given to `resenv run`; the cache is DIR/assets "
                                    "(default: $RESENV_DATA_DIR or the user data dir).")


def _cache(data_dir: Path | None) -> AssetCache:
    return AssetCache.under(absolute(data_dir) if data_dir else default_data_dir())


@assets_group.command("fetch")
@benchmark_argument
@suite_option
@repo_option
@host_option
@data_dir_option
def fetch_command(benchmark: Path, suite: str | None, repos: tuple[str, ...], hosts: tuple[str, ...],
                  data_dir: Path | None) -> None:
    """Download and verify every asset of a suite into the cache, then copy it to each SSH host."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # one line per file from resenv instead of a bar per file
    bench = load_for_cli(benchmark)
    suite_name, assets, host_names = _selection(bench, suite, repos, hosts)
    cache = _cache(data_dir)
    try:  # one line before any download, not a traceback after one
        writable_dir(cache.root, "the asset cache")
    except UnusablePath as error:
        raise click.ClickException(str(error)) from error
    total = sum(asset.size for asset in assets)
    click.echo(f"suite {suite_name}: {counted(len(assets), 'asset')}, {human_size(total)}; cache {cache.root}; "
               f"hosts {', '.join(host_names)}")
    failed = 0
    for number, asset in enumerate(assets, 1):
        click.echo(f"[{number}/{len(assets)}] {asset.label()}")
        try:
            result = fetch(asset, cache, say=click.echo)
        except AssetError as error:
            failed += 1
            click.echo(f"    FAILED: {redact_text(str(error))}")
            continue
        click.echo("    already cached and verified" if result.status == "cached"
                   else f"    fetched and verified in {result.seconds:.1f} s")
    for name in host_names:
        spec = bench.host(name)
        if not _needs_host_copy(spec):
            where = ("containers get the engine's copy at probe time" if spec.sandbox == "docker"
                     else "reads this machine's cache")
            click.echo(f"host {name}: {where}")
            continue
        failed += eventloop.run(_copy_to_host(name, spec, cache, assets, click.echo))
    if not assets:
        click.echo("nothing to fetch: no repo of the selection declares assets")
    elif failed:
        click.echo(f"{counted(failed, 'problem')}; the probes of a repo whose assets are missing score error/infra", err=True)
        sys.exit(1)
    else:
        click.echo(f"all {counted(len(assets), 'asset')} ready on {', '.join(host_names)}")


async def _copy_to_host(name: str, spec: Any, cache: AssetCache, assets: list[Asset], say: Say) -> int:
    """Copy the engine's verified copies that `name` lacks; returns how many are still missing there."""
    from ..hosts.ssh import build_ssh_host
    from ..sandbox.remote import HostDown

    host = build_ssh_host(name, spec)
    missing = 0
    try:
        await host.connection.connect()
        absent = set(await _remote_missing(host.connection, cache, assets))
        for index, asset in enumerate(assets):
            if index not in absent:
                say(f"host {name}: {asset.label()}: already there")
            elif not cache.is_cached(asset):
                missing += 1
                say(f"host {name}: {asset.label()}: NOT COPIED (not in the engine's cache)")
            else:
                await _push(host, cache, asset)
                say(f"host {name}: {asset.label()}: copied")
    except (HostDown, SandboxError, OSError) as error:  # OSError: timeouts too
        say(f"host {name}: FAILED: {redact_text(str(error))}")
        return max(missing, 1)
    finally:
        await host.close()
    return missing


async def _remote_missing(connection: Any, cache: AssetCache, assets: list[Asset]) -> list[int]:
    result = await connection.run("sh -c " + shlex.quote(presence_script(cache, assets)), timeout=60)
    if result.returncode != 0:  # without its answer, nothing is known to be there
        raise SandboxError(f"checking the cache failed ({result.returncode}): "
                           f"{result.stderr.decode(errors='replace').strip()[-300:]}")
    return missing_indexes(result.stdout.decode(errors="replace"), len(assets))


async def _push(host: Any, cache: AssetCache, asset: Asset) -> None:
    """The asset's trees, then its record under a temporary name, renamed once everything is there."""
    for tree in cache.trees(asset):
        await host.push_tree(tree, str(tree))
    record = cache.record_path(asset)
    partial = f"{record}.partial"
    await host.push_tree(record, partial)
    done = await host.connection.run(f"mv -f {shlex.quote(partial)} {shlex.quote(str(record))}", timeout=60)
    if done.returncode != 0:
        raise SandboxError(f"cannot place {record}: {done.stderr.decode(errors='replace').strip()[-300:]}")


@assets_group.command("status")
@benchmark_argument
@suite_option
@repo_option
@host_option
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object: per host, each asset cached or missing.")
def status_command(benchmark: Path, suite: str | None, repos: tuple[str, ...], hosts: tuple[str, ...],
                   data_dir: Path | None, as_json: bool) -> None:
    """Per host, which assets of a suite are cached and verified and which are missing (exit 1 if any);
    assets the repos need but do not pin yet are named, and fetching cannot help them."""
    bench = load_for_cli(benchmark)
    suite_name, assets, host_names = _selection(bench, suite, repos, hosts)
    unpinned = _unpinned(bench, suite_name, repos)
    cache = _cache(data_dir)
    local = [cache.is_cached(asset) for asset in assets]
    report: list[dict[str, Any]] = []
    for name in host_names:
        spec = bench.host(name)
        entry: dict[str, Any] = {"name": name, "kind": spec.kind, "reachable": True, "error": None,
                                 "sandbox": getattr(spec, "sandbox", "process")}
        there: list[bool | None] = list(local)
        if _needs_host_copy(spec):
            from ..sandbox.remote import HostDown

            try:
                there = list(eventloop.run(_remote_status(name, spec, cache, assets)))
            except (HostDown, SandboxError, OSError) as error:  # OSError: timeouts too
                entry |= {"reachable": False, "error": redact_text(str(error))}
                there = [None] * len(assets)  # unknown: counted as missing
        entry["assets"] = [{"label": asset.label(), "cached": present} for asset, present in zip(assets, there)]
        report.append(entry)
    missing = sum(1 for entry in report for item in entry["assets"] if not item["cached"])
    if as_json:
        click.echo(json.dumps({"suite": suite_name, "cache": str(cache.root), "hosts": report, "missing": missing,
                               "unpinned": unpinned}, indent=2))
    else:
        _print_status(suite_name, cache, assets, report, unpinned)
    if missing:
        click.echo(f"{missing} missing: run `resenv assets fetch` with the same options", err=True)
        sys.exit(1)


def _unpinned(bench: Benchmark, suite_name: str, repos: tuple[str, ...]) -> list[dict[str, str]]:
    """Each asset a selected repo needs but does not pin yet (`unpinned_assets`), with its repo."""
    chosen = bench.suite(suite_name)
    tasks = [chosen.repo(repo_id) for repo_id in repos] if repos else list(chosen.repos)
    return [{"repo": task.id, "label": label} for task in tasks for label in task.unpinned_assets]


def _print_status(suite_name: str, cache: AssetCache, assets: list[Asset], report: list[dict[str, Any]],
                  unpinned: list[dict[str, str]]) -> None:
    click.echo(f"suite {suite_name}: {counted(len(assets), 'asset')}; cache {cache.root}")
    for entry in report:
        if not entry["reachable"]:
            click.echo(f"{entry['name']} ({entry['kind']}): UNREACHABLE: {entry['error']}")
            continue
        click.echo(f"{entry['name']} ({entry['kind']}{', docker: copied into each container' if entry['sandbox'] == 'docker' else ''}):")
        for item in entry["assets"]:
            click.echo(f"  {'cached ' if item['cached'] else 'MISSING'} {item['label']}")
    if unpinned:
        click.echo(f"{counted(len(unpinned), 'asset')} not pinned yet (nothing fetches them; `resenv assets pin` "
                   "makes an entry for `assets:`):")
        for item in unpinned:
            click.echo(f"  unpinned {item['repo']}: {item['label']}")


async def _remote_status(name: str, spec: Any, cache: AssetCache, assets: list[Asset]) -> list[bool]:
    from ..hosts.ssh import build_ssh_host

    host = build_ssh_host(name, spec)
    try:
        await host.connection.connect()
        absent = set(await _remote_missing(host.connection, cache, assets))
    finally:
        await host.close()
    return [index not in absent for index in range(len(assets))]


@assets_group.command("pin")
@click.option("--hf", "hf_specs", multiple=True, metavar="REPO[:FILE,...]",
              help="A hub repo, optionally only some files (allow patterns, e.g. 'org/m:config.json,*.safetensors').")
@click.option("--repo-type", type=click.Choice(["model", "dataset", "space"]), default="model", show_default=True)
@click.option("--branch", default="main", show_default=True, help="Branch or tag whose current commit to pin.")
@click.option("--url", "urls", multiple=True, help="A plain URL: downloaded once to measure its sha256 and size.")
def pin_command(hf_specs: tuple[str, ...], repo_type: str, branch: str, urls: tuple[str, ...]) -> None:
    """Resolve assets to pinned entries (commit sha, sizes, sha256) and print YAML to paste under `assets:`."""
    if not hf_specs and not urls:
        raise click.UsageError("give at least one --hf or --url")
    lines: list[str] = []
    for text in hf_specs:
        lines.append(_pin_hf(text, repo_type, branch))
    for url in urls:
        lines.append(_pin_url(url))
    click.echo("\n".join(lines))


def _pin_hf(text: str, repo_type: str, branch: str) -> str:
    from huggingface_hub import HfApi

    repo, _, patterns_text = text.partition(":")
    patterns = [p for p in patterns_text.split(",") if p]
    where = f"{repo_type} {repo} at {branch}"
    api = HfApi()
    info_of = {"model": api.model_info, "dataset": api.dataset_info, "space": api.space_info}[repo_type]
    try:
        info = info_of(repo, revision=branch, files_metadata=True)
    except Exception as error:  # the hub client raises many types; any of them means this pin failed
        raise click.ClickException(f"cannot resolve {where}: {redact_text(describe(error))}") from error
    listing = {sibling.rfilename: {"size": sibling.size or 0} for sibling in info.siblings or []}
    try:
        chosen = select_files(listing, patterns, where)
    except AssetError as error:
        raise click.ClickException(str(error)) from error
    size = sum(entry["size"] for entry in chosen.values())
    fields = [f"kind: hf, repo: {json.dumps(repo)}"]
    if repo_type != "model":
        fields.append(f"repo_type: {repo_type}")
    fields.append(f"revision: {json.dumps(info.sha)}, size: {size}")
    if patterns:
        fields.append(f"files: {json.dumps(patterns)}")
    return f"- {{{', '.join(fields)}}}  # {branch} · {counted(len(chosen), 'file')} · {human_size(size)}"


def _pin_url(url: str) -> str:
    digest, size = hashlib.sha256(), 0
    request = urllib.request.Request(url, headers={"User-Agent": f"resenv/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            while block := response.read(1 << 20):
                digest.update(block)
                size += len(block)
    except OSError as error:  # URLError and HTTPError are OSErrors
        raise click.ClickException(f"cannot download {url}: {getattr(error, 'reason', error)}") from error
    return (f"- {{kind: url, url: {json.dumps(url)}, sha256: {json.dumps(digest.hexdigest())}, size: {size}}}"
            f"  # {human_size(size)}")
