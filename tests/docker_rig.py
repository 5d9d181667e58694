"""A private Docker engine for tests, and a small image built from this machine's own files.

* `Dockerd`: ``dockerd`` with its own ``--host unix://<tmp>/docker.sock``, ``--data-root``,
  ``--exec-root`` and ``--pidfile``, no bridge and no iptables rules (containers use network mode
  ``none`` or ``host`` only); stopped by its PID. Nothing is ever pulled.
* `build_rootfs`: copies ``sh``, coreutils, ``setsid``, ``tar``, ``git`` and ``python3`` with the
  shared libraries ``ldd`` names, Python's stdlib and the wheels its ``ensurepip`` installs (so
  ``python3 -m venv`` makes venvs with pip) into a directory, which `import_image` turns
  into an image with ``docker import`` (through the SDK), labelled ``resenv.test=1``.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
TEST_IMAGE = "resenv-test/tiny:1"

BINARIES = [
    "/bin/sh", "/bin/dash", "/usr/bin/env", "/usr/bin/sleep", "/usr/bin/mkdir", "/usr/bin/cat", "/usr/bin/timeout",
    "/usr/bin/readlink", "/usr/bin/ls", "/usr/bin/rm", "/usr/bin/cp", "/usr/bin/mv", "/usr/bin/chmod", "/usr/bin/test",
    "/usr/bin/true", "/usr/bin/false", "/usr/bin/echo", "/usr/bin/printf", "/usr/bin/id", "/usr/bin/head",
    "/usr/bin/tail", "/usr/bin/sort", "/usr/bin/wc", "/usr/bin/pwd", "/usr/bin/dirname", "/usr/bin/basename",
    "/usr/bin/setsid", "/usr/bin/tar", "/usr/bin/git", "/usr/bin/python3.11", "/usr/bin/kill", "/usr/bin/nproc",
    "/usr/bin/grep", "/usr/bin/sed", "/usr/bin/stat", "/usr/bin/touch", "/usr/bin/yes", "/usr/bin/dd",
    "/usr/bin/ln", "/usr/bin/df", "/usr/bin/uname", "/usr/bin/hostname",
]
SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "pydoc_data", "__pycache__"}
WHEELS = Path("/usr/share/python-wheels")  # Debian's ensurepip takes pip from here: `python3 -m venv` works


def docker_available() -> bool:
    if os.geteuid() != 0 or not os.path.exists(DOCKERD):
        return False
    try:
        import docker  # noqa: F401
    except ImportError:
        return False
    return True


def _libs(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(parts[2])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def _copy(src: str, root: Path) -> None:
    dest = root / src.lstrip("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    real = os.path.realpath(src)
    if os.path.islink(src):
        target = os.readlink(src)
        dest.symlink_to(target)
        _copy(real, root)
    else:
        shutil.copy2(src, dest)


def build_rootfs(root: Path) -> Path:
    for sub in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "tmp", "proc", "sys", "dev", "etc", "root", "run",
                "var/tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):  # merged /usr, as on the machine the files come from
        if not (root / link).is_symlink():
            (root / link).symlink_to(f"usr/{link}")
    os.chmod(root / "tmp", 0o1777)
    needed: set[str] = set()
    for binary in BINARIES:
        if os.path.exists(binary):
            needed.add(binary)
            needed.update(_libs(binary))
    for path in sorted(needed):
        _copy(path, root)
    (root / "usr/bin/python3").symlink_to("python3.11")
    stdlib = Path("/usr/lib/python3.11")
    shutil.copytree(stdlib, root / "usr/lib/python3.11", symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in SKIP_STDLIB or n.startswith("config-")])
    if WHEELS.is_dir():
        shutil.copytree(WHEELS, root / WHEELS.relative_to("/"), dirs_exist_ok=True)
    for extra in _libs(str(next(stdlib.glob("lib-dynload/_ssl*.so"), "/usr/bin/true"))):
        _copy(extra, root)
    for ext in (stdlib / "lib-dynload").glob("*.so"):
        for lib in _libs(str(ext)):
            _copy(lib, root)
    git_core = root / "usr/lib/git-core"
    git_core.mkdir(parents=True, exist_ok=True)
    for name in ("git-upload-pack", "git-receive-pack", "git-upload-archive"):
        (git_core / name).symlink_to("../../bin/git")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    return root


def import_image(client, root: Path, tag: str = TEST_IMAGE) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(root), arcname=".")
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=version or "latest",
                                      changes=["LABEL resenv.test=1", "ENV PATH=/usr/local/bin:/usr/bin:/bin"])
    return client.images.get(tag).id


@dataclass
class Dockerd:
    root: Path
    proc: subprocess.Popen | None = None

    @property
    def socket(self) -> str:
        return f"unix://{self.root}/docker.sock"

    def start(self) -> None:
        argv = [DOCKERD, "--host", self.socket, "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "docker.pid"),
                "--bridge=none", "--iptables=false", "--ip6tables=false"]
        log = open(self.root / "dockerd.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        import docker

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {(self.root / 'dockerd.log').read_text()[-2000:]}")
            try:
                docker.DockerClient(base_url=self.socket).ping()
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("dockerd did not come up")

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.socket, timeout=120)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)  # dockerd stops its containers and containerd
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        self.proc = None
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True)
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True)


def start_dockerd() -> Dockerd:
    # unix socket paths are limited to 108 bytes: keep the root short
    root = Path(tempfile.mkdtemp(prefix="rsvd-", dir="/tmp"))
    daemon = Dockerd(root)
    daemon.start()
    return daemon


# ------------------------------------------------------------- opt-in: a real Debian + Python image
DEBIAN_IMAGE = "resenv-test/debian-python:1"
DEBIAN_PACKAGES = ["python3", "python3-venv", "python3-pip", "python3-dev", "gcc", "libc6-dev", "git",
                   "ca-certificates", "procps"]


def debian_images_wanted() -> bool:
    """The Debian image tier is opt-in (RESENV_DEBIAN_IMAGE=1): debootstrap takes minutes."""
    return os.environ.get("RESENV_DEBIAN_IMAGE") == "1"


def apt_mirror() -> str:
    """This machine's own Debian mirror (the first `URIs:` / `deb` source), so nothing is hard-coded."""
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
    raise RuntimeError("no Debian mirror configured in /etc/apt")


def build_debian_image(dockerd: Dockerd, work: Path, tag: str = DEBIAN_IMAGE) -> str:
    """A Debian (this machine's release) image with Python, venv, pip, a C compiler and git, built
    by debootstrap from this machine's own mirror and imported into the private daemon."""
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "debootstrap"], check=True, capture_output=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    codename = next(line.split("=", 1)[1] for line in Path("/etc/os-release").read_text().splitlines()
                    if line.startswith("VERSION_CODENAME="))
    root = work / "debian-root"
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", codename,
                    str(root), apt_mirror()], check=True, capture_output=True)
    # the image trusts what this machine trusts (a site's TLS-inspecting proxy, say), as a lab's images would
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/ca-certificates.crt")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "-H", dockerd.socket, "import", "--change", "LABEL resenv.test=1",
                    "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "-", tag],
                   stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()
    return tag
