"""`resenv image build`: an image made without pulling, loaded into a real private dockerd, on which
jobs then run with the docker defaults (`docker: {socket: ...}` only)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..docker_rig import debian_images_wanted, docker_available
from .test_docker_failures import environ
from .test_docker_sandbox import dockerd  # noqa: F401  (the module's private daemon)
from .test_ssh_hosts import MAIN, bench_text, rows

pytestmark = [pytest.mark.skipif(not docker_available(), reason="needs root, docker.io and the docker SDK"),
              pytest.mark.timeout(300)]

CLI = [sys.executable, "-m", "resenv.engine.cli"]


def test_image_build_from_this_machine_makes_an_image_jobs_run_in(dockerd, tmp_path):
    socket_path = dockerd.socket.removeprefix("unix://")
    env = environ(tmp_path)
    built = subprocess.run([*CLI, "image", "build", "--tag", "resenv-built:1", "--socket", socket_path], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.startswith("built resenv-built:1 (sha256:") and "from base host, python3 3." in built.stdout
    assert f"use it with: sandbox: docker, image: resenv-built:1, docker: {{socket: {socket_path}}}" in built.stdout
    image = dockerd.client().images.get("resenv-built:1")
    assert image.labels.get("resenv.image") == "host"

    hosts = (f"  box: {{kind: local, gpus: 0, slots: 2, sandbox: docker, image: resenv-built:1,"
             f" docker: {{socket: {socket_path}}}}}\n")
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}, "two": {"main.py": MAIN}})
    done = subprocess.run([*CLI, "run", str(bench), "--host", "box", "--display", "plain", "--tiers", "C1,C5"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = tmp_path / "store.db"
    assert [j["state"] for j in rows(db, "SELECT state FROM jobs")] == ["done", "done"]
    assert {r["status"] for r in rows(db, "SELECT status FROM tier_results")} == {"pass"}
    preflight = json.loads(rows(db, "SELECT data FROM events WHERE kind = 'docker_preflight'")[0]["data"])
    assert preflight["image"] == image.id and preflight["problems"] == []
    dockerd.client().images.remove("resenv-built:1", force=True)


def test_image_build_says_in_one_line_why_it_cannot(dockerd, tmp_path):
    env = environ(tmp_path)
    nowhere = subprocess.run([*CLI, "image", "build", "--socket", str(tmp_path / "none.sock")], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith(f"Error: cannot reach the docker daemon at unix://{tmp_path}/none.sock: ")
    assert nowhere.stderr.rstrip().endswith("start dockerd, or name its socket with --socket (or DOCKER_HOST)")
    no_python = subprocess.run([*CLI, "image", "build", "--socket", dockerd.socket, "--python", "/nowhere/python3"],
                               env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert no_python.returncode == 1, no_python.stdout + no_python.stderr
    assert no_python.stderr.strip() == "Error: no python3 at /nowhere/python3: name one with --python"


@pytest.mark.skipif(not debian_images_wanted(), reason="opt-in: RESENV_DEBIAN_IMAGE=1 (debootstrap takes minutes)")
@pytest.mark.timeout(1800)
def test_image_build_from_debian_packages_passes_the_preflight(dockerd, tmp_path):
    socket_path = dockerd.socket.removeprefix("unix://")
    env = environ(tmp_path)
    built = subprocess.run([*CLI, "image", "build", "--base", "debian", "--tag", "resenv-deb:1", "--socket",
                            socket_path], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1700)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "from base debian, python3 3." in built.stdout
    hosts = f"  deb: {{kind: local, gpus: 0, sandbox: docker, image: resenv-deb:1, docker: {{socket: {socket_path}}}}}\n"
    bench = bench_text(tmp_path, hosts, {"one": {"main.py": MAIN}})
    check = subprocess.run([*CLI, "hosts", "check", str(bench), "--host", "deb", "--json"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    facts = json.loads(check.stdout)[0]
    assert check.returncode == 0 and facts["docker_preflight"]["problems"] == [], facts
    dockerd.client().images.remove("resenv-deb:1", force=True)
