"""Pristine copies of repo tasks and per-job checkouts.

Each repo task gets one bare git repository per run, outside every sandbox and made read-only: the
import census reads the pinned commit from it, so nothing an agent does can change what is scored.
A bundled tree becomes a commit with a fixed author and date, so the same tree always has the same id.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

FIXED_IDENTITY = {
    "GIT_AUTHOR_NAME": "resenv",
    "GIT_AUTHOR_EMAIL": "resenv@localhost",
    "GIT_COMMITTER_NAME": "resenv",
    "GIT_COMMITTER_EMAIL": "resenv@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class CheckoutError(Exception):
    """The repo could not be materialized; `category` says whose fault (download vs infra)."""

    def __init__(self, message: str, category: str) -> None:
        super().__init__(message)
        self.category = category


@dataclass(frozen=True)
class Pristine:
    path: Path
    commit: str


@dataclass(frozen=True)
class TreeEntry:
    """One tracked file of the pinned commit, as git records it."""

    mode: str  # 100644 | 100755 | 120000 (a symlink)
    blob: str
    path: str


@dataclass(frozen=True)
class Manifest:
    """Every tracked file of the pinned commit, and the objects of it the pristine copy lacks."""

    entries: tuple[TreeEntry, ...]
    missing_objects: tuple[str, ...]  # paths whose content the pristine copy does not hold
    submodules: tuple[str, ...] = ()  # gitlink paths: the checkout fills them, the commit holds no file

    def to_json(self) -> list[list[str]]:
        return [[entry.mode, entry.blob, entry.path] for entry in self.entries]

    def entry(self, path: str) -> TreeEntry | None:
        for entry in self.entries:
            if entry.path == path:
                return entry
        return None


async def tree_manifest(pristine: Pristine) -> Manifest:
    """The pinned commit's tracked files (submodules left out: they are not the commit's content),
    read from the read-only pristine copy, and which of their objects are missing from it (git
    checks out such a commit without complaint, silently leaving the files out)."""
    env = {**git_env(pristine.path.parent), "GIT_DIR": str(pristine.path)}
    listing = await git("ls-tree", "-r", "-z", "--full-tree", pristine.commit, env=env)
    entries, submodules = [], []
    for record in listing.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, kind, blob = meta.split()
        if kind == "blob":
            entries.append(TreeEntry(mode, blob, path))
        elif kind == "commit":
            submodules.append(path)
    missing = await _missing_objects(entries, env)
    return Manifest(tuple(entries), missing, tuple(submodules))


async def _missing_objects(entries: list[TreeEntry], env: dict[str, str]) -> tuple[str, ...]:
    process = await asyncio.create_subprocess_exec(
        "git", "cat-file", "--batch-check", env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await process.communicate("".join(f"{entry.blob}\n" for entry in entries).encode())
    absent = {line.split()[0] for line in out.decode().splitlines() if line.endswith(" missing")}
    return tuple(entry.path for entry in entries if entry.blob in absent)


async def blob_bytes(pristine: Pristine, blob: str) -> bytes:
    """The content of one blob of the pristine copy."""
    process = await asyncio.create_subprocess_exec(
        "git", "cat-file", "blob", blob, env={**git_env(pristine.path.parent), "GIT_DIR": str(pristine.path)},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    if process.returncode != 0:
        raise CheckoutError(f"git cat-file blob {blob} failed: {err.decode(errors='replace').strip()}", "infra")
    return out


def git_env(home: Path) -> dict[str, str]:
    """A git environment that ignores the user's config and never prompts for credentials."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
        **FIXED_IDENTITY,
    }


async def git(*args: str, env: dict[str, str], category: str = "infra") -> str:
    process = await asyncio.create_subprocess_exec(
        "git", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        tail = err.decode(errors="replace").strip()[-2000:]
        raise CheckoutError(f"git {' '.join(args[:2])} failed ({process.returncode}): {tail}", category)
    return out.decode().strip()


COMPLETE_MARKER = "resenv-complete"
"""Written last into a pristine copy: a host that received it whole has this file."""


class PristineCache:
    """One pristine copy per repo task per run, built once even when several jobs ask at once.

    The commit each copy holds is pinned by the engine (in memory, and from the run's checkout events
    on resume), never read back from the copy, and the copy is verified against it before every
    checkout and tier re-run: every object re-hashed by ``git fsck``, replace refs ignored, unless
    no file or folder of the copy has changed since it last passed (`fingerprint`). A copy that fails
    is rebuilt from its source; a source that no longer gives the pinned commit is an
    infrastructure error, so the jobs of one run are all judged on the same tree."""

    def __init__(self, root: Path, pins: dict[str, str] | None = None) -> None:
        self.root = root
        self.pins: dict[str, str] = dict(pins or {})
        self._locks: dict[str, asyncio.Lock] = {}
        self._manifests: dict[Pristine, Manifest] = {}
        self._passed: dict[Path, Fingerprint] = {}  # each copy as it was when it last proved intact

    async def manifest(self, pristine: Pristine) -> Manifest:
        """The pinned commit's manifest, read once per run (every job of a repo shares it)."""
        if pristine not in self._manifests:
            self._manifests[pristine] = await tree_manifest(pristine)
        return self._manifests[pristine]

    async def get(self, repo_id: str, *, local_tree: Path | None, url: str | None, commit: str | None) -> Pristine:
        lock = self._locks.setdefault(repo_id, asyncio.Lock())
        async with lock:
            path = self.root / f"{repo_id}.git"
            env = git_env(self.root)
            pinned = self.pins.get(repo_id)
            if path.exists():
                if pinned is not None and await self._still_intact(path, pinned, env):
                    return Pristine(path, pinned)
                # unpinned (built before a crash) or changed: build it again (a tree walk: in a thread)
                await asyncio.to_thread(shutil.rmtree, path)
            self.root.mkdir(parents=True, exist_ok=True)
            if local_tree is not None:
                made = await _commit_tree(local_tree, path, env)
            else:
                assert url is not None and commit is not None
                made = await _clone_pinned(url, commit, path, env)
            if pinned is not None and made != pinned:
                raise CheckoutError(f"the source of {repo_id} now gives commit {made[:12]}, not the "
                                    f"{pinned[:12]} this run's jobs were judged on", "infra")
            (path / COMPLETE_MARKER).write_text(made + "\n")  # for hosts that copy it; never read back here
            await asyncio.to_thread(_make_read_only, path)  # a walk of every object file: off the loop
            self._passed[path] = await asyncio.to_thread(fingerprint, path)
            self.pins[repo_id] = made
            return Pristine(path, made)

    async def _still_intact(self, path: Path, commit: str, env: dict[str, str]) -> bool:
        """`_intact`, without re-hashing a copy that is, file by file, as it was when it last passed."""
        now = await asyncio.to_thread(fingerprint, path)  # a walk of every object file: off the loop
        if self._passed.get(path) == now:
            return True
        self._passed.pop(path, None)
        if not await _intact(path, commit, env):
            return False
        self._passed[path] = now
        return True


Fingerprint = frozenset[tuple[str, int, int, int, int, int]]


def fingerprint(root: Path) -> Fingerprint:
    """Every file and folder under ``root`` (itself included) with its inode, mode, size and
    modification and change times. Any write, rename, chmod or new link changes a change time, which
    only the kernel sets (no unprivileged process can put an old one back), so an equal fingerprint
    means an unchanged copy; reading the copy changes nothing here."""
    entries = []
    for directory, folders, files in os.walk(root):
        for name in [".", *folders, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            entries.append((os.path.relpath(path, root), info.st_ino, info.st_mode, info.st_size,
                            info.st_mtime_ns, info.st_ctime_ns))
    return frozenset(entries)


async def _intact(path: Path, commit: str, env: dict[str, str]) -> bool:
    """Whether the copy holds the pinned commit with every object's content matching its name."""
    env = {**env, "GIT_DIR": str(path), "GIT_NO_REPLACE_OBJECTS": "1"}
    # Both at once: this runs before every checkout, and neither reads what the other writes.
    kind, checked = await asyncio.gather(
        git("cat-file", "-t", commit, env=env),
        git("fsck", "--no-dangling", "--no-progress", "--strict", commit, env=env), return_exceptions=True)
    for outcome in (kind, checked):
        if isinstance(outcome, CheckoutError):
            return False
        if isinstance(outcome, BaseException):
            raise outcome
    return kind == "commit"


async def _commit_tree(tree: Path, bare: Path, env: dict[str, str]) -> str:
    """Commit a bundled tree into a fresh bare repo without copying it first."""
    await git("init", "--quiet", "--bare", str(bare), env=env)
    tree_env = {**env, "GIT_DIR": str(bare), "GIT_WORK_TREE": str(tree)}
    await git("add", "--all", "--force", ".", env=tree_env)
    await git("commit", "--quiet", "--no-verify", "-m", f"resenv: bundled tree {tree.name}", env=tree_env)
    return await git("rev-parse", "HEAD", env=tree_env)


async def _clone_pinned(url: str, commit: str, bare: Path, env: dict[str, str]) -> str:
    # --no-hardlinks: a local source's files must not share inodes with the pristine copy, whose
    # modes are changed next (that would change the source's own files).
    await git("clone", "--quiet", "--bare", "--no-hardlinks", url, str(bare), env=env, category="download_failed")
    bare_env = {**env, "GIT_DIR": str(bare)}
    try:
        await git("cat-file", "-e", f"{commit}^{{commit}}", env=bare_env)
    except CheckoutError as error:
        raise CheckoutError(f"pinned commit {commit} is not in {url}", "download_failed") from error
    return commit


def _make_read_only(root: Path) -> None:
    """Nobody may write the pristine copy, and every sandbox user must be able to read it: a sandbox
    runs as another uid, and a source cloned with owner-only files (a partial clone's ``.promisor``
    file is 0400) would otherwise make every checkout fail with "Permission denied"."""
    readable = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            path.chmod((path.stat().st_mode | readable) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def checkout_argv(pristine: Pristine, target: Path) -> list[str]:
    """The command that gives a job its own working copy at the pinned commit (no hard links to the
    pristine): clone and checkout in one sandboxed command, as each costs a namespace of its own.
    The sandbox's uid may not own the pristine copy, which git then refuses to read: these commands
    alone are told to trust it, the clone's upload-pack too (git drops ``-c`` settings for the
    processes of a local transport)."""
    script = ('git -c safe.directory="*" clone --quiet --no-hardlinks --no-checkout '
              '--upload-pack=\'git -c safe.directory="*" upload-pack\' "$1" "$2" && '
              'exec git -C "$2" checkout --quiet --detach "$3"')
    return ["sh", "-c", script, "resenv-checkout", str(pristine.path), str(target), pristine.commit]


def git_fatal_line(stderr_path: Path) -> str:
    """git's own reason for a failed command (its last ``fatal:``/``error:`` line, from the raw log),
    as ``": <line>"`` to append to a one-line error; empty when the log has none."""
    try:
        lines = stderr_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith(("fatal: ", "error: ")):
            return ": " + line.strip()[:300]
    return ""


def submodules_argv(target: Path, upstream: str) -> list[str]:
    """A command that initialises the checkout's submodules at the commits the pinned commit records
    (nothing without ``.gitmodules``). Origin is pointed at the upstream URL first, so relative
    submodule URLs resolve as they do for anyone who clones the repo."""
    script = ('cd "$1" && [ -f .gitmodules ] || exit 0\n'
              'git remote set-url origin "$2" && git submodule update --quiet --init --recursive')
    return ["sh", "-c", script, "resenv-submodules", str(target), upstream]
