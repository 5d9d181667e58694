"""Assets: the weights and data files a repo's entrypoints need, cached per host before scoring.

Why a cache filled before the run: probes must judge the agent's environment, not the network. So
`resenv assets fetch` downloads every declared asset (pinned in benchmark.yaml) ahead of time, checks
it byte for byte, and the C1/C3/C4 probes then run offline against the cache (`probe_env`). A hub
outage during a run cannot be scored as an agent failure, and an asset that is not in the cache is an
infrastructure error (`error`/`infra`), never a `fail`.

Layout of one host's cache, ``<data root>/assets`` (the data root is the folder above the runs' data
dirs, so on SSH hosts the cache has the same absolute path as on the engine's machine, like runs)::

    hf/hub/                 a Hugging Face hub cache (HF_HUB_CACHE): <type>s--<org>--<name>/
                            {blobs/, snapshots/<revision>/, refs/main}
    url/<sha256>/<name>     one file per URL asset, stored under its content hash (the name is kept
                            so code that looks at the file's extension still works)
    manifest/<key>.json     one record per asset that was fetched *and verified*; written last and
                            atomically, so its presence is what "cached" means (a download cut short
                            leaves no record)

Verification: every Hugging Face file is checked against the hub's tree listing at the pinned revision
(size, and the LFS sha256 or the git blob sha1 of small files); the declared ``size`` must equal the
files' total. A URL asset is streamed to ``<name>.partial`` (resumed with an HTTP range request when a
partial file is there), its size and sha256 checked, then renamed into place; a mismatch deletes it.

Tokens: the hub client reads ``HF_TOKEN`` from the engine's environment for gated repos; it is never
passed to a probe, and fetch writes nothing to the store. Messages shown to the user go through
`redact_text` with the token registered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shlex
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .secrets import Redactor
from .spec import Asset, HfAsset, UrlAsset
from .spec.repos import _size as human_size  # the format asset labels use
from .wording import counted

CHUNK = 1 << 20
URL_TIMEOUT_S = 60.0

Say = Callable[[str], None]


class AssetError(Exception):
    """This asset could not be fetched or verified; the message says why and what to do."""


def redact_text(text: str) -> str:
    """`text` with the hub token (if the engine has one) masked: error messages can quote headers."""
    token = os.environ.get("HF_TOKEN")
    return Redactor({"HF_TOKEN": token}).redact_text(text) if token else text


def unique_assets(assets: Iterable[Asset]) -> list[Asset]:
    """Assets in first-seen order, each once (two repos may declare the same one)."""
    seen: dict[str, Asset] = {}
    for asset in assets:
        seen.setdefault(asset_key(asset), asset)
    return list(seen.values())


def asset_key(asset: Asset) -> str:
    """A file-name-safe identity: what was asked for, not where it came from."""
    if isinstance(asset, UrlAsset):
        return f"url--{asset.sha256}"
    key = f"hf--{_repo_folder(asset)}--{asset.revision}"
    if asset.files:
        key += "--" + hashlib.sha256("\n".join(sorted(asset.files)).encode()).hexdigest()[:12]
    return key


def _repo_folder(asset: HfAsset) -> str:
    """The hub cache's folder name for a repo (the layout huggingface_hub's `repo_folder_name` uses)."""
    return f"{asset.repo_type}s--" + asset.repo.replace("/", "--")


def url_file_name(url: str) -> str:
    name = posixpath.basename(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    return name if name not in ("", ".", "..") else "file"


@dataclass(frozen=True)
class AssetCache:
    """One host's asset cache (see the module docstring for the layout)."""

    root: Path

    @classmethod
    def under(cls, data_root: Path) -> AssetCache:
        return cls(Path(os.path.abspath(data_root)) / "assets")

    @classmethod
    def for_run(cls, run_dir: Path) -> AssetCache:
        """The cache beside a run's data dir (run dirs are ``<data root>/<run id>``)."""
        return cls.under(Path(run_dir).parent)

    @property
    def hub(self) -> Path:
        return self.root / "hf" / "hub"

    def record_path(self, asset: Asset) -> Path:
        return self.root / "manifest" / f"{asset_key(asset)}.json"

    def location(self, asset: Asset) -> Path:
        """What a probe uses: the snapshot folder of a hub asset, the file of a URL asset."""
        if isinstance(asset, UrlAsset):
            return self.root / "url" / asset.sha256 / url_file_name(asset.url)
        return self.hub / _repo_folder(asset) / "snapshots" / asset.revision

    def trees(self, asset: Asset) -> list[Path]:
        """What must travel to another host or into a container for `location` to work there."""
        if isinstance(asset, UrlAsset):
            return [self.root / "url" / asset.sha256]
        return [self.hub / _repo_folder(asset)]  # snapshots link into blobs/: both go

    def record(self, asset: Asset) -> dict[str, Any] | None:
        try:
            return json.loads(self.record_path(asset).read_text())
        except (OSError, ValueError):
            return None

    def is_cached(self, asset: Asset) -> bool:
        """A verified record, and every file it lists still there (a cheap stat, no rehash)."""
        record, base = self.record(asset), self.location(asset)
        if record is None or not base.exists():
            return False
        if isinstance(asset, UrlAsset):
            return base.stat().st_size == asset.size
        return all((base / name).is_file() for name in record.get("files", {}))

    def probe_env(self) -> dict[str, str]:
        """Environment of the C1/C3/C4 probes: hub libraries offline, reading this cache.

        HF_HUB_CACHE (not HF_HOME): HF_HOME also holds state that libraries write while loading
        (the datasets library's arrow cache, the token), which must stay in the job's own HOME.
        HUGGINGFACE_HUB_CACHE is the older spelling that pinned research repos' versions read.
        """
        hub = str(self.hub)
        return {
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_CACHE": hub, "HUGGINGFACE_HUB_CACHE": hub, "HF_HUB_DISABLE_TELEMETRY": "1",
        }

    def _write_record(self, asset: Asset, files: dict[str, dict[str, Any]]) -> None:
        record = {
            "key": asset_key(asset), "label": asset.label(), "spec": asset.model_dump(mode="json"),
            "location": str(self.location(asset).relative_to(self.root)), "bytes": asset.size,
            "files": files, "verified_at": time.time(),
        }
        _write_atomically(self.record_path(asset), json.dumps(record, indent=1, sort_keys=True))


def _write_atomically(path: Path, text: str) -> None:
    """Readers (a probe, a concurrent fetch) see the old file or the new one, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)


# -- fetch ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fetched:
    asset: Asset
    status: str  # cached (nothing to do) | fetched
    seconds: float = 0.0


def fetch(asset: Asset, cache: AssetCache, *, say: Say = lambda _: None, endpoint: str | None = None) -> Fetched:
    """Put `asset` into `cache`, verified; a no-op (no network) when it is already there.

    `endpoint` is the hub's address (default: huggingface_hub's own, i.e. ``HF_ENDPOINT``).
    Raises AssetError with a message that says what went wrong.
    """
    if cache.is_cached(asset):
        return Fetched(asset, "cached")
    started = time.monotonic()
    if isinstance(asset, UrlAsset):
        try:
            _fetch_url(asset, cache, say)
        except AssetError:
            with contextlib.suppress(OSError):  # an empty folder is no trace worth keeping
                cache.location(asset).parent.rmdir()
            raise
    else:
        _fetch_hf(asset, cache, say, endpoint)
    return Fetched(asset, "fetched", time.monotonic() - started)


def _fetch_hf(asset: HfAsset, cache: AssetCache, say: Say, endpoint: str | None) -> None:
    from huggingface_hub import HfApi, hf_hub_download  # heavy; only fetch and pin need it

    where = f"{asset.repo_type} {asset.repo} at {asset.revision[:12]}"
    try:
        listing = _hub_files(HfApi(endpoint=endpoint), asset.repo, asset.repo_type, asset.revision)
    except Exception as error:  # the hub client raises many types (HTTP, transport, files): all mean "not fetched"
        raise AssetError(f"cannot list {where}: {describe(error)}") from error
    wanted = select_files(listing, asset.files, where)
    total = sum(entry["size"] for entry in wanted.values())
    if total != asset.size:
        raise AssetError(f"{where}: the selected files total {total} bytes, the benchmark declares size "
                         f"{asset.size}; fix `size:` (resenv assets pin prints the right one)")
    say(f"    {counted(len(wanted), 'file')}, {human_size(total)}")
    files: dict[str, dict[str, Any]] = {}
    for name, entry in wanted.items():
        try:
            path = Path(hf_hub_download(asset.repo, name, repo_type=asset.repo_type, revision=asset.revision,
                                        cache_dir=cache.hub, endpoint=endpoint))
        except Exception as error:  # as above: any failure of the client is this file not fetched
            raise AssetError(f"{where}: {name}: {describe(error)}") from error
        files[name] = _verify_hub_file(path, entry, f"{where}: {name}")
        say(f"    {name} ({human_size(entry['size'])}) verified")
    # Code that names the repo without a revision asks for `main`: offline, that is the pinned revision.
    _write_atomically(cache.hub / _repo_folder(asset) / "refs" / "main", asset.revision)
    cache._write_record(asset, files)


def _hub_files(api: Any, repo: str, repo_type: str, revision: str) -> dict[str, dict[str, Any]]:
    """Path -> {size, sha256 (LFS files) or git_sha1 (others)} of every file of a repo at a revision."""
    from huggingface_hub.hf_api import RepoFile

    out: dict[str, dict[str, Any]] = {}
    for entry in api.list_repo_tree(repo, recursive=True, revision=revision, repo_type=repo_type):
        if isinstance(entry, RepoFile):
            out[entry.path] = ({"size": entry.size, "sha256": entry.lfs.sha256} if entry.lfs is not None
                               else {"size": entry.size, "git_sha1": entry.blob_id})
    return out


def select_files(listing: dict[str, dict[str, Any]], patterns: Sequence[str], where: str) -> dict[str, dict[str, Any]]:
    """The files `patterns` (huggingface_hub's allow patterns: fnmatch, `*` crosses folders) select;
    every pattern must match something, or the pin is wrong."""
    from huggingface_hub.utils import filter_repo_objects

    if not patterns:
        return dict(listing)
    unmatched = [p for p in patterns if not list(filter_repo_objects(listing, allow_patterns=[p]))]
    if unmatched:
        raise AssetError(f"{where}: no file matches {', '.join(map(repr, unmatched))}")
    return {name: listing[name] for name in filter_repo_objects(listing, allow_patterns=list(patterns))}


def _verify_hub_file(path: Path, entry: dict[str, Any], where: str) -> dict[str, Any]:
    size = path.stat().st_size
    if size != entry["size"]:
        raise AssetError(f"{where}: {size} bytes on disk, the hub lists {entry['size']}")
    if "sha256" in entry:
        digest = file_digest(path, hashlib.sha256())
        expected = entry["sha256"]
    else:  # a small (non-LFS) file: the hub gives its git blob id
        digest = file_digest(path, hashlib.sha1(b"blob %d\0" % size))
        expected = entry["git_sha1"]
    if digest != expected:
        raise AssetError(f"{where}: content hash {digest} differs from the hub's {expected}")
    return entry


def file_digest(path: Path, digest: Any) -> str:
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _fetch_url(asset: UrlAsset, cache: AssetCache, say: Say) -> None:
    target = cache.location(asset)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    have = partial.stat().st_size if partial.exists() else 0
    if have > asset.size:
        partial.unlink()
        have = 0
    # Resume: the bytes already there count towards the hash.
    digest = _hash_prefix(partial) if have else hashlib.sha256()
    if have < asset.size:
        digest = _download(asset, partial, digest, have, say)
    got_size, got = partial.stat().st_size, digest.hexdigest()
    if got_size != asset.size or got != asset.sha256:
        partial.unlink()
        raise AssetError(f"{asset.url}: got {got_size} bytes with sha256 {got}, the benchmark declares "
                         f"{asset.size} bytes with sha256 {asset.sha256}; nothing was kept")
    os.replace(partial, target)
    cache._write_record(asset, {target.name: {"size": got_size, "sha256": got}})
    say(f"    {target.name} ({human_size(got_size)}) verified")


def _hash_prefix(path: Path) -> Any:
    digest = hashlib.sha256()
    file_digest(path, digest)
    return digest


def _download(asset: UrlAsset, partial: Path, digest: Any, have: int, say: Say) -> Any:
    """Stream the URL into `partial` (appending from byte `have` when the server honours the
    range), hashing as it goes; returns the hash of the whole file."""
    request = urllib.request.Request(asset.url, headers={"User-Agent": f"resenv/{__version__}"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        with urllib.request.urlopen(request, timeout=URL_TIMEOUT_S) as response:
            if have and response.status != 206:  # the server ignored the range: start over
                digest, have = hashlib.sha256(), 0
            elif have:
                say(f"    resuming at {human_size(have)}")
            with partial.open("ab" if have else "wb") as out:
                while block := response.read(CHUNK):
                    have += len(block)
                    if have > asset.size:
                        break
                    digest.update(block)
                    out.write(block)
    except urllib.error.HTTPError as error:
        raise AssetError(f"{asset.url}: HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise AssetError(f"{asset.url}: {reason} (the partial download is kept and resumed next time)") from error
    if have > asset.size:
        partial.unlink()
        raise AssetError(f"{asset.url}: more than the declared {asset.size} bytes; nothing was kept")
    return digest


def describe(error: BaseException) -> str:
    """Type and first line of an error, and of its cause: the hub client often wraps the real
    reason (a 403, a refused connection) in a generic "cannot find the file" error."""
    def one(err: BaseException) -> str:
        text = str(err).strip()
        return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
    cause = error.__cause__ or error.__context__
    return one(error) + (f" (caused by {one(cause)})" if cause is not None else "")


# -- probes ----------------------------------------------------------------------------------------

# place SRC DEST: a file becomes a link at DEST; a folder's files become links under DEST, its
# subfolders real folders (so a repo's own files beside them stay). Only sh, mkdir and ln: minimal
# container images have no `find`.
_PLACE = [
    'place() { if [ -d "$1" ] && [ ! -L "$1" ]; then mkdir -p "$2" || return 1',
    '  for f in "$1"/* "$1"/.[!.]*; do [ -e "$f" ] || [ -L "$f" ] || continue',
    '    place "$f" "$2/${f##*/}" || return 1; done',
    'else mkdir -p "${2%/*}" && ln -sfn "$1" "$2"; fi; }',
]


def presence_script(cache: AssetCache, assets: Sequence[Asset], place_into: Path | None = None) -> str:
    """A POSIX sh script, run on a host or in a job's sandbox: prints ``missing <index>`` for each
    asset without a verified copy in the cache there. With `place_into` (the job's checkout) it also
    links the assets that have a ``dest:`` into it — symlinks into the cache, so nothing is copied
    and a hub snapshot keeps its own links to blobs — and exits non-zero if placing fails."""
    lines = ["set -u", *_PLACE]
    for index, asset in enumerate(assets):
        record, location = shlex.quote(str(cache.record_path(asset))), shlex.quote(str(cache.location(asset)))
        line = f"if ! {{ [ -f {record} ] && [ -e {location} ]; }}; then echo missing {index}; "
        if place_into is not None and asset.dest:
            line += f"else place {location} {shlex.quote(str(place_into / asset.dest))} || exit 3; "
        lines.append(line + "fi")
    return "\n".join(lines) + "\n"


def missing_indexes(output: str, count: int | None = None) -> list[int]:
    """The indexes a `presence_script` printed as missing (below `count`, when given: the host's
    output is read as it comes, never trusted to name an asset that was not asked about)."""
    found = [int(line.split()[1]) for line in output.splitlines()
             if line.startswith("missing ") and len(line.split()) > 1 and line.split()[1].isdecimal()]
    return [index for index in found if count is None or index < count]
