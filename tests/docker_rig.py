"""A private Docker engine for tests, and a small image built from this machine's own files.

* `Dockerd`: ``dockerd`` with its own ``--host unix://<tmp>/docker.sock``, ``--data-root``,
  ``--exec-root`` and ``--pidfile``, no bridge and no iptables rules (containers use network mode
  ``none`` or ``host`` only); stopped by its PID. Nothing is ever pulled.
* `build_rootfs`: this machine's ``python3`` and tools in a directory, exactly as ``resenv image
  build --base host`` copies them (engine/image_build.py), which `import_image` turns into an image
  with ``docker import`` (through the SDK), labelled ``resenv.test=1``.
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

from resenv.engine.image_build import build_image, host_rootfs

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
TEST_IMAGE = "resenv-test/tiny:1"


def docker_available() -> bool:
    if os.geteuid() != 0 or not os.path.exists(DOCKERD):
        return False
    try:
        import docker  # noqa: F401
    except ImportError:
        return False
    return True


def build_rootfs(root: Path) -> Path:
    """This machine's python3 and tools under `root`, as `resenv image build --base host` makes them."""
    host_rootfs(root)
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


def debian_images_wanted() -> bool:
    """The Debian image tier is opt-in (RESENV_DEBIAN_IMAGE=1): debootstrap takes minutes."""
    return os.environ.get("RESENV_DEBIAN_IMAGE") == "1"


def build_debian_image(dockerd: Dockerd, work: Path, tag: str = DEBIAN_IMAGE) -> str:
    """A Debian (this machine's release) image with Python, venv, pip, a C compiler and git, as
    `resenv image build --base debian` makes it, in the private daemon."""
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "debootstrap"], check=True, capture_output=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    build_image(dockerd.client(), base="debian", tag=tag, work_dir=work)
    return tag
