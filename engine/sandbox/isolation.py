"""What a command in the local process sandbox can see and touch: a bubblewrap namespace.

The agent is an adversary, and so is every interpreter it leaves behind for the probes, so each
command runs in its own pid, mount, IPC and UTS namespace made by bubblewrap (a well-kept setuid-free
tool) rather than in namespaces made by hand:

* **Files.** An empty root with the system's program directories (``/usr``, ``/etc``, ``/opt`` and
  the ``/bin``, ``/lib`` links) read-only, the Python installation resenv itself runs on read-only
  (so an agent may build on it), a private ``/proc``, ``/dev`` (with the NVIDIA device nodes),
  ``/tmp`` and ``/dev/shm``, and the job's work dir read-write. For the agent's own configured
  command, the paths the benchmark hands it in its environment (a pip config, a wheel folder, a
  certificate bundle) are bound read-only, package caches
  (``*_CACHE_DIR``) read-write (a root engine swaps a cache its sandbox uid does not own for resenv's
  own, ``<resenv home>/sandbox-cache/``); the host's ``expose:`` list adds read-only paths. Nothing else: not
  the store, not the data dir with the pristine copies and the other jobs, not the engine's home.
* **Who.** When the engine is root, the command runs as an unprivileged uid (``nobody`` by default)
  with no capabilities and ``no_new_privs``, so setuid programs cannot give root back. Otherwise a user
  namespace keeps the engine's own uid, which sees only what is bound.
* **Processes.** The command's pid namespace dies with bubblewrap: killing it kills every
  descendant, ``setsid`` or double-forked or not, and ``/proc`` shows no process but its own.
* **Memory-only folders.** An agent CLI's own state (its session transcripts, shell snapshots and
  temp files, which copy its tool outputs and its environment, API key included) is kept on a tmpfs
  of the agent command's namespace (``ProcessSandbox.keep_in_memory``): never on disk, invisible
  from outside but through ``/proc/<pid>/root`` of a process inside (``ProcessSandbox.live_path``).
* **Environment.** bubblewrap starts from the command's clean environment, so its own ``/proc/1``
  holds nothing the command was not given.
* **Network.** The host's ``network:`` setting: ``host`` (the default, agents install packages) or
  ``none`` (a namespace with loopback only).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import default_home

SYSTEM_DIRS = ("usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level directories of the host seen read-only (a merged-/usr link stays a link)."""

NOBODY = 65534

SANDBOX_HOSTNAME = "localhost"
"""The namespace's own host name: one every machine's /etc/hosts resolves to itself. Programs look
their host name up (git for a reflog's identity, torch.distributed for its store's address); a
name only the namespace knows sent that lookup to the network's resolver, which may answer after
seconds or never."""


class IsolationUnavailable(Exception):
    """bubblewrap is missing or cannot make namespaces on this machine (one clear line)."""


def check_available(bwrap: str | None = None) -> None:
    """Raise IsolationUnavailable unless bubblewrap can make a namespace here (asked once per run,
    before anything starts: otherwise every job would fail the same way)."""
    program = bwrap or shutil.which("bwrap")
    hint = "or set `sandbox: unsafe-process` on the host (see README, The sandbox)"
    if program is None:
        raise IsolationUnavailable(f"bubblewrap is not installed (apt-get install bubblewrap), {hint}")
    try:
        done = subprocess.run([program, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--dev", "/dev",
                               "true"], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError) as error:
        raise IsolationUnavailable(f"bubblewrap cannot run here ({error}), {hint}") from error
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        raise IsolationUnavailable(f"bubblewrap cannot make a namespace here ({why}), {hint}")


@dataclass(frozen=True)
class Isolation:
    """The settings of one host's isolated process sandboxes."""

    network: str = "host"  # "host" | "none"
    uid: int = NOBODY  # the uid (and gid) commands run as when the engine is root
    expose: tuple[str, ...] = ()  # extra host paths seen read-only
    devices: tuple[str, ...] = ()  # extra device nodes (or a driver's folder) passed through read-write
    bwrap: str = field(default_factory=lambda: shutil.which("bwrap") or "bwrap")

    @property
    def drops_to_uid(self) -> bool:
        """A root engine runs commands as ``uid``; any other engine keeps its own uid."""
        return os.geteuid() == 0

    def owner(self) -> tuple[int, int] | None:
        """The (uid, gid) files the engine writes into a work dir must belong to, or None."""
        return (self.uid, self.uid) if self.drops_to_uid else None

    def argv(self, argv: list[str], *, workdir: Path, cwd: Path, read_only: Iterable[Path] = (),
             writable: Iterable[Path] = (), in_memory: Iterable[Path] = ()) -> list[str]:
        """bubblewrap's command line that runs ``argv`` inside the namespace; each folder of
        ``in_memory`` (inside the work dir) is an empty tmpfs of the namespace's own, over what the disk
        holds there, gone when the command ends."""
        out = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--hostname", SANDBOX_HOSTNAME]
        if self.network == "none":
            out.append("--unshare-net")
        if not self.drops_to_uid:
            out.append("--unshare-user")
        out += system_view()
        ro: list[Path] = []
        for path in [*python_installation(), *map(Path, self.expose), *read_only]:
            if _outside_system(path) and path not in ro and path_exists(path):
                ro.append(path)
        # A path inside another bound one is seen already (and a mount point cannot be made in it).
        ro = [path for path in ro if not any(_below(path.parts, other.parts) for other in ro)]
        rw = [workdir, *writable]
        devices = [Path(device) for device in self.devices]
        out += _traversable_parents((*ro, *rw, *devices))
        for path in ro:
            out += ["--ro-bind", str(path), str(path)]
        for path in rw:
            out += ["--bind", str(path), str(path)]
        for device in devices:
            out += ["--dev-bind-try", str(device), str(device)]
        for folder in in_memory:
            # world-writable and sticky, as /tmp: the namespace's processes all run as one uid, and the
            # mount (made by bubblewrap, before the uid is dropped) cannot be given to it
            out += ["--perms", "01777", "--tmpfs", str(folder)]
        out += ["--chdir", str(cwd), "--"]
        if self.drops_to_uid:
            out += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return out + argv

    def cache_for(self, key: str, path: Path) -> Path:
        """The package cache a ``*_CACHE_DIR`` variable names, as the sandbox's uid can write it.

        A root engine never changes the owner of a cache it was handed (the engine user's own
        ``~/.cache/pip`` stays theirs): one the uid does not own is replaced by resenv's shared
        sandbox cache of that tool."""
        owner = self.owner()
        if owner is None or (path.is_dir() and path.stat().st_uid == owner[0]):
            path.mkdir(parents=True, exist_ok=True)
            return path
        private = default_home() / "sandbox-cache" / key.removesuffix("_CACHE_DIR").lower()
        private.mkdir(parents=True, exist_ok=True)
        if private.stat().st_uid != owner[0]:
            chown_tree(private, owner)
        return private


@functools.cache
def system_view() -> tuple[str, ...]:
    """bubblewrap arguments for what every command sees of the machine itself: fresh kernel and temp
    folders, the system dirs read-only (a merged-/usr link stays a link), the NVIDIA device nodes.
    Read once per engine process: every command of every job gets the same, and making them anew
    was a tenth of the engine's own time per command."""
    out = ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--tmpfs", "/var/tmp"]
    for name in SYSTEM_DIRS:
        path = Path("/", name)
        if path.is_symlink():
            out += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            out += ["--ro-bind", str(path), str(path)]
    out += ["--ro-bind-try", "/sys", "/sys"]
    for device in sorted(Path("/dev").glob("nvidia*")):
        out += ["--dev-bind-try", str(device), str(device)]
    return tuple(out)


@functools.cache
def python_installation() -> tuple[Path, ...]:
    """The Python resenv runs on (its venv and the installation under it), outside the system dirs."""
    return tuple(sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}))


def env_paths(env: Mapping[str, str], workdir: Path) -> tuple[list[Path], list[Path]]:
    """(caches to bind read-write, other paths to bind read-only) named in a configured command's
    environment: the engine calls this only for what the benchmark's configuration declares, never for
    an environment built from anything an agent wrote (a ``:`` in a reported interpreter's path would
    otherwise name any host folder).

    Only absolute paths that exist outside the work dir count; a value may be a ``:``-list; ``PATH``
    is left out (its folders are the system's)."""
    writable: list[Path] = []
    readable: list[Path] = []
    for key, value in env.items():
        if key == "PATH":
            continue
        for part in value.split(os.pathsep):
            if not part.startswith("/"):
                continue
            path = Path(part)
            if path == workdir or workdir in path.parents or path in workdir.parents:
                continue  # the work dir is bound anyway; a folder above it would show other jobs
            if key.endswith("_CACHE_DIR"):
                writable.append(path)
            elif path_exists(path):
                readable.append(path)
    return writable, readable


def path_exists(path: Path) -> bool:
    """Whether a path is an existing file or folder; a word too long to be a file name (a ``python -c``
    program) is none, and neither is a device, a socket or a FIFO."""
    try:
        return path.is_file() or path.is_dir()
    except OSError:
        return False


@functools.lru_cache(maxsize=256)
def _traversable_parents(targets: tuple[Path, ...]) -> tuple[str, ...]:
    """bubblewrap arguments that make the folders leading to each bound path traversable.

    bubblewrap gives a folder it creates on the way the mode of the host's folder, and a 0700 parent
    (``/root``, a ``mkdtemp`` folder) would lock the sandbox's uid out of what lies below it; those
    folders are empty stand-ins in the namespace's own root, so opening them shows nothing."""
    parents: set[Path] = set()
    bound = [target.parts for target in targets]
    skipped = {Path("/"), Path("/tmp"), Path("/dev")}
    for target in targets:
        for parent in target.parents:
            if parent in parents or parent in skipped or not _outside_system(parent):
                continue
            parts = parent.parts
            if any(parts == t or _below(parts, t) for t in bound):
                continue
            parents.add(parent)
    out: list[str] = []
    for parent in sorted(parents, key=lambda p: len(p.parts)):
        out += ["--perms", "0755", "--dir", str(parent)]
    return tuple(out)


def _below(parts: tuple[str, ...], folder: tuple[str, ...]) -> bool:
    """Whether the path of ``parts`` lies strictly inside the folder of ``folder`` (both as
    ``Path.parts``): a tuple comparison, as ``folder in path.parents`` is, without making every parent."""
    return len(parts) > len(folder) and parts[: len(folder)] == folder


KERNEL_DIRS = ("dev", "proc", "sys")
"""Made by the namespace itself; a path under them is never bound again (a device bound read-only
loses its device-ness)."""


def _outside_system(path: Path) -> bool:
    """Whether a path is not already seen through a system or kernel dir (binding it again is pointless)."""
    parts = path.parts
    return len(parts) > 1 and parts[1] not in SYSTEM_DIRS + KERNEL_DIRS


def chown_tree(root: Path, owner: tuple[int, int]) -> None:
    """Give a tree the sandbox's uid; links are changed themselves, never what they point at."""
    uid, gid = owner
    os.lchown(root, uid, gid)
    if root.is_symlink() or not root.is_dir():
        return
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, gid)


def chown_new_parents(path: Path, stop: Path, owner: tuple[int, int]) -> None:
    """Give the sandbox's uid the folders between ``stop`` and ``path`` (both included)."""
    for folder in [path, *path.parents]:
        if folder == stop or stop in folder.parents:
            os.lchown(folder, *owner)
        if folder == stop:
            break
