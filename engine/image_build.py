"""Images for docker hosts, made without pulling: `resenv image build`.

resenv never pulls, and many machines that run it reach no image registry at all, so it makes an
image from packages or files this machine already has access to, as a root filesystem turned into
an image with ``docker import`` (through the SDK):

* ``host`` — this machine's own ``python3`` (its interpreter, standard library, the wheels its
  ``ensurepip`` installs, so ``python3 -m venv`` gives venvs with pip), ``sh``, coreutils,
  ``setsid``, ``git`` and ``tar``, with the shared libraries ``ldd`` names. Seconds, no network, a
  few dozen MiB; the Python is exactly the engine machine's. What the tests use.
* ``debian`` — ``debootstrap --variant=minbase`` of this machine's Debian release from this
  machine's own apt mirror (``/etc/apt``), with python3, venv, pip, a C compiler and the Python
  headers, git and CA certificates: what agents that build C extensions need. Minutes; needs root,
  ``debootstrap`` and the mirror. The image trusts the CA bundle this machine trusts (a site's
  TLS-inspecting proxy, say), as a lab's images would.

Either holds every tool a docker sandbox runs (engine/sandbox/docker_preflight.py: NEEDED_TOOLS).
The image is labelled ``resenv.image=<base>``; it is never removed by `resenv prune` (which removes
only a run's own labels).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST_BINARIES = (
    "/bin/sh", "/bin/dash", "/usr/bin/env", "/usr/bin/sleep", "/usr/bin/mkdir", "/usr/bin/cat", "/usr/bin/timeout",
    "/usr/bin/readlink", "/usr/bin/ls", "/usr/bin/rm", "/usr/bin/cp", "/usr/bin/mv", "/usr/bin/chmod",
    "/usr/bin/test", "/usr/bin/true", "/usr/bin/false", "/usr/bin/echo", "/usr/bin/printf", "/usr/bin/id",
    "/usr/bin/head", "/usr/bin/tail", "/usr/bin/sort", "/usr/bin/wc", "/usr/bin/pwd", "/usr/bin/dirname",
    "/usr/bin/basename", "/usr/bin/setsid", "/usr/bin/tar", "/usr/bin/git", "/usr/bin/kill", "/usr/bin/nproc",
    "/usr/bin/grep", "/usr/bin/sed", "/usr/bin/stat", "/usr/bin/touch", "/usr/bin/yes", "/usr/bin/dd",
    "/usr/bin/ln", "/usr/bin/df", "/usr/bin/uname", "/usr/bin/hostname",
)
SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "pydoc_data", "__pycache__"}
WHEELS = Path("/usr/share/python-wheels")  # Debian's ensurepip takes pip from here
DEBIAN_PACKAGES = ("python3", "python3-venv", "python3-pip", "python3-dev", "gcc", "libc6-dev", "git",
                   "ca-certificates", "procps")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
BASES = ("host", "debian")
DEFAULT_TAG = "resenv-agent:latest"


class ImageBuildError(Exception):
    """Why no image was made, with what to do about it (one line)."""


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str
    base: str
    python: str  # the image's python3 version
    size_mib: float


# ---------------------------------------------------------------- base `host`: this machine's files
def shared_libraries(binary: str) -> list[str]:
    """The libraries `ldd` says `binary` loads (its loader included)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(parts[2])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def copy_into(src: str, root: Path) -> None:
    """`src` at the same path under `root`; a symlink stays a link, and its target is copied too."""
    dest = root / src.lstrip("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(src):
        dest.symlink_to(os.readlink(src))
        copy_into(os.path.realpath(src), root)
    else:
        shutil.copy2(src, dest)


def python_layout(python: str) -> tuple[str, Path, str]:
    """(the interpreter's real path, its standard library, its version) for a system python3."""
    real = os.path.realpath(shutil.which(python) or python)
    if not os.path.isfile(real):
        raise ImageBuildError(f"no python3 at {python}: name one with --python")
    probe = subprocess.run([real, "-I", "-c", "import sys, sysconfig; print(sysconfig.get_paths()['stdlib']);"
                            " print('%d.%d.%d' % sys.version_info[:3]); print(sys.prefix == sys.base_prefix)"],
                           capture_output=True, text=True)
    lines = probe.stdout.split()
    if probe.returncode != 0 or len(lines) != 3:
        raise ImageBuildError(f"{real} does not run: {probe.stderr.strip()[-200:]}")
    stdlib, version, base = Path(lines[0]), lines[1], lines[2] == "True"
    if not base or not str(stdlib).startswith("/usr/"):
        raise ImageBuildError(f"{real} is not the system's python3 (its standard library is {stdlib}): name the"
                              " system one with --python (/usr/bin/python3), or use --base debian")
    return real, stdlib, version


def host_rootfs(root: Path, python: str = "/usr/bin/python3") -> str:
    """A root filesystem of this machine's python3 and tools under `root`; returns the python version."""
    real, stdlib, version = python_layout(python)
    for sub in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "tmp", "proc", "sys", "dev", "etc", "root", "run",
                "var/tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):  # merged /usr, as on the machine the files come from
        if not (root / link).is_symlink():
            (root / link).symlink_to(f"usr/{link}")
    os.chmod(root / "tmp", 0o1777)
    needed: set[str] = set()
    for binary in (*HOST_BINARIES, real):
        if os.path.exists(binary):
            needed.add(binary)
            needed.update(shared_libraries(binary))
    for path in sorted(needed):
        copy_into(path, root)
    for name in ("python3", "python"):
        link = root / "usr/bin" / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(os.path.basename(real))
    shutil.copytree(stdlib, root / stdlib.relative_to("/"), symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if n in SKIP_STDLIB or n.startswith("config-")])
    if WHEELS.is_dir():
        shutil.copytree(WHEELS, root / WHEELS.relative_to("/"), dirs_exist_ok=True)
    for ext in (stdlib / "lib-dynload").glob("*.so"):
        for lib in shared_libraries(str(ext)):
            copy_into(lib, root)
    git_core = root / "usr/lib/git-core"
    git_core.mkdir(parents=True, exist_ok=True)
    for name in ("git-upload-pack", "git-receive-pack", "git-upload-archive"):
        if not (git_core / name).is_symlink():
            (git_core / name).symlink_to("../../bin/git")
    if CA_BUNDLE.is_file():
        copy_into(str(CA_BUNDLE), root)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    return version


# ---------------------------------------------------------------- base `debian`: debootstrap
def apt_mirror() -> str:
    """This machine's own Debian mirror (the first `URIs:` or `deb` source), so nothing is hard-coded."""
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for line in deb822.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    classic = Path("/etc/apt/sources.list")
    if classic.exists():
        for line in classic.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                return parts[1] if not parts[1].startswith("[") else parts[2]
    raise ImageBuildError("no Debian mirror in /etc/apt: name one with --mirror URL")


def debian_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ImageBuildError("this machine's /etc/os-release names no Debian release: name one with --release")


def debian_rootfs(root: Path, *, mirror: str | None = None, release: str | None = None,
                  extra: Sequence[str] = ()) -> str:
    """Debian minbase with python3, venv, pip, gcc and git under `root`; returns the python version."""
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed: `apt-get install debootstrap` (or use --base host)")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root: run `resenv image build --base debian` as root (or use --base host)")
    packages = ",".join(dict.fromkeys((*DEBIAN_PACKAGES, *extra)))
    done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={packages}", release or debian_codename(),
                           str(root), mirror or apt_mirror()], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise ImageBuildError(f"debootstrap failed (exit {done.returncode}): {tail}")
    if CA_BUNDLE.is_file():
        (root / CA_BUNDLE.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CA_BUNDLE, root / CA_BUNDLE.relative_to("/"))
    version = subprocess.run(["chroot", str(root), "python3", "-c",
                              "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True, text=True)
    return version.stdout.strip() or "unknown"


# ---------------------------------------------------------------- the image
def import_rootfs(client: Any, root: Path, tag: str, labels: dict[str, str], work: Path) -> str:
    """`docker import` of `root` as `tag`, streamed from a tar file; returns the image id."""
    archive = work / "rootfs.tar"
    with tarfile.open(archive, mode="w") as tar:
        tar.add(str(root), arcname=".")
    repository, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    changes = [*(f"ENV {item}" for item in ENV), *(f"LABEL {key}={value}" for key, value in labels.items()),
               'CMD ["/bin/sh"]']
    client.api.import_image_from_file(str(archive), repository=repository, tag=version or "latest", changes=changes)
    archive.unlink()
    return client.images.get(tag).id


def build_image(client: Any, *, base: str = "host", tag: str = DEFAULT_TAG, python: str = "/usr/bin/python3",
                mirror: str | None = None, release: str | None = None, extra: Sequence[str] = (),
                say: Callable[[str], None] = lambda line: None, work_dir: Path | None = None) -> BuiltImage:
    """Make the image and load it into `client`'s daemon (see the module docstring)."""
    if base not in BASES:
        raise ImageBuildError(f"unknown base {base!r}; choose from {', '.join(BASES)}")
    with tempfile.TemporaryDirectory(prefix="resenv-image-", dir=work_dir) as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        if base == "host":
            real, _, version = python_layout(python)  # a wrong --python is told before any work
            say(f"copying this machine's python3 {version} ({real}) and tools")
            version = host_rootfs(root, python)
        else:
            say("debootstrap of this machine's Debian release (minutes)")
            version = debian_rootfs(root, mirror=mirror, release=release, extra=extra)
        say(f"importing as {tag}")
        image_id = import_rootfs(client, root, tag, {"resenv.image": base}, work)
    size = client.images.get(image_id).attrs.get("Size") or 0
    return BuiltImage(tag=tag, image_id=image_id, base=base, python=version, size_mib=round(size / 2**20, 1))
