"""Assets end to end: the real CLI and engine, the real huggingface_hub client against a fake hub
on loopback, a loopback URL host, and (where sshd is available) a real SSH host that sees nothing of
the engine's data dir, and a private dockerd whose containers see nothing of the host.

The starter-like repo's entrypoint loads its model file through huggingface_hub by repo name (so it
needs the cache's `main` ref), offline, and reads the two `dest:` assets from its checkout.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import textwrap
from pathlib import Path

import pytest

from resenv.engine.spec import HfAsset, UrlAsset, loads_benchmark

from ..conftest import cli_environ, resenv, rows
from ..docker_rig import TEST_IMAGE, build_rootfs, docker_available, import_image, start_dockerd
from ..fakes.hf_hub import FakeHub, FakeRepo
from ..fakes.http_files import HttpFiles
from ..sshd_rig import make_sshd, sshd_available

CONFIG = b'{"hidden": 4}\n'
WEIGHTS = bytes(range(256)) * 16
TABLE = b"a,b\n1,2\n"

MAIN = """\
import os
from huggingface_hub import hf_hub_download
print("offline:", os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
print("token:", os.environ.get("HF_TOKEN"))
path = hf_hub_download("org/tiny", "config.json")
print("config:", open(path).read().strip())
print("weights:", len(open("ckpt/weights/model.bin", "rb").read()))
print("table:", open("data/t.csv").read().splitlines()[0])
"""

# The "agent" reports the engine's own interpreter, which has huggingface_hub.
AGENT = f"""\
a:
  kind: command
  command: >-
    printf '{{{{"python_path": "%s", "python_version": null}}}}' {sys.executable} > {{report}}
"""


def tiny_repo() -> FakeRepo:
    return FakeRepo("org/tiny", {"config.json": CONFIG, "weights/model.bin": WEIGHTS, "README.md": b"# tiny\n"})


def write_bench(root: Path, assets: list[str], hosts: str = "", main: str = MAIN, agent: str = AGENT) -> Path:
    repo = root / "suites" / "tiny"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "main.py").write_text(main)
    text = textwrap.dedent("""\
        version: 1
        defaults: {suite: s, agent: a, host: local, retries: {infra: 0, backoff_s: 0.1}, timeouts: {teardown: 20}}
        hosts:
          local: {kind: local, slots: 2, gpus: 0}
        """) + hosts
    text += "agents:\n" + textwrap.indent(agent, "  ")
    text += textwrap.dedent("""\
        suites:
          s:
            repos:
              - id: tiny
                source: {path: suites/tiny}
                entrypoints: {cpu: {command: "{python} main.py"}}
                not_applicable: {single_gpu: no GPU code, multi_gpu: no GPU code}
                assets:
        """)
    text += "".join(f"          - {asset}\n" for asset in assets)
    path = root / "benchmark.yaml"
    path.write_text(text)
    return path


def good_assets(repo: FakeRepo, files: HttpFiles) -> list[str]:
    size = len(CONFIG) + len(WEIGHTS)
    return [
        f'{{kind: hf, repo: org/tiny, revision: "{repo.commit}", size: {size}, files: [config.json, "weights/*"], dest: ckpt}}',
        f'{{kind: url, url: "{files.url}/t.csv", sha256: "{hashlib.sha256(TABLE).hexdigest()}", size: {len(TABLE)}, '
        f'dest: data/t.csv}}',
    ]


def hub_env(tmp_path: Path, hub: FakeHub | None) -> dict[str, str]:
    env = cli_environ(tmp_path)
    env.pop("HF_TOKEN", None)
    env["HF_HOME"] = str(tmp_path / "hf-home")  # nothing of the user's own hub setup
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    return env


def c1(db: Path) -> list[dict]:
    found = rows(db, "SELECT t.status, t.category, t.evidence_json FROM tier_results t WHERE t.tier = 'C1' ORDER BY t.id")
    return [row | {"evidence": json.loads(row["evidence_json"])} for row in found]


@pytest.mark.timeout(240)
def test_missing_assets_are_infra_errors_and_fetched_ones_are_used_offline(tmp_path):
    repo = tiny_repo()
    with FakeHub([repo]) as hub, HttpFiles({"/t.csv": TABLE}) as files:
        bench = write_bench(tmp_path, good_assets(repo, files))
        env = hub_env(tmp_path, hub)
        status = resenv("assets", "status", str(bench), env=env, cwd=tmp_path)
        assert status.returncode == 1 and status.stdout.count("MISSING") == 2, status.stdout + status.stderr

        # Nothing fetched: C1 cannot be judged, and that is not the agent's failure.
        first = resenv("run", str(bench), "--display", "plain", "--tiers", "C1", env=env, cwd=tmp_path)
        assert first.returncode == 0, first.stdout + first.stderr
        [missing] = c1(tmp_path / "store.db")
        assert (missing["status"], missing["category"]) == ("error", "infra"), missing
        assert missing["evidence"]["missing_assets"] == [f"hf:org/tiny@{repo.commit[:12]} (4.0 KiB)",
                                                        f"url:{files.url}/t.csv (8 B)"]
        assert "resenv assets fetch" in missing["evidence"]["reason"]

        fetched = resenv("assets", "fetch", str(bench), env=env, cwd=tmp_path)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        out = fetched.stdout
        assert "[1/2] hf:org/tiny@" in out and "weights/model.bin (4.0 KiB) verified" in out
        assert out.count("fetched and verified in") == 2 and "all 2 assets ready on local" in out
        asked = len(hub.requests) + len(hub.cdn.requests) + len(files.requests)
        again = resenv("assets", "fetch", str(bench), env=env, cwd=tmp_path)
        assert again.returncode == 0 and again.stdout.count("already cached and verified") == 2, again.stdout
        assert len(hub.requests) + len(hub.cdn.requests) + len(files.requests) == asked
        status = resenv("assets", "status", str(bench), env=env, cwd=tmp_path)
        assert status.returncode == 0 and status.stdout.count("cached ") == 2, status.stdout
    # The hub and the URL host are gone now: the probe must not need them (nor see the engine's token).
    env["HF_TOKEN"] = "hf_enginetoken_never_leaks"
    second = resenv("run", str(bench), "--display", "plain", "--tiers", "C1", env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    passed = c1(tmp_path / "store.db")[-1]
    assert passed["status"] == "pass", passed["evidence"].get("log_tail")
    log = passed["evidence"]["log_tail"]
    assert "offline: 1 1" in log and 'config: {"hidden": 4}' in log, log
    assert "weights: 4096" in log and "table: a,b" in log, log
    assert "token: None" in log
    assert not rows(tmp_path / "store.db", "SELECT id FROM events WHERE data LIKE '%hf_enginetoken%'")


def test_fetch_failures_exit_non_zero_with_what_went_wrong(tmp_path):
    with HttpFiles({"/t.csv": TABLE}) as files:
        bench = write_bench(tmp_path, [
            f'{{kind: url, url: "{files.url}/t.csv", sha256: "{"0" * 64}", size: {len(TABLE)}}}',
            f'{{kind: url, url: "{files.url}/gone.csv", sha256: "{"1" * 64}", size: 3}}',
        ])
        done = resenv("assets", "fetch", str(bench), env=hub_env(tmp_path, None), cwd=tmp_path)
    assert done.returncode == 1
    assert f"FAILED: {files.url}/t.csv: got 8 bytes with sha256 {hashlib.sha256(TABLE).hexdigest()}" in done.stdout
    assert "nothing was kept" in done.stdout
    assert f"FAILED: {files.url}/gone.csv: HTTP 404" in done.stdout
    assert "2 problems" in done.stderr


def test_pin_prints_entries_that_validate_and_match_the_hub(tmp_path):
    repo = tiny_repo()
    with FakeHub([repo]) as hub, HttpFiles({"/t.csv": TABLE}) as files:
        env = hub_env(tmp_path, hub)
        done = resenv("assets", "pin", "--hf", "org/tiny:config.json,weights/*", "--hf", "org/tiny",
                      "--url", f"{files.url}/t.csv", env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        unknown = resenv("assets", "pin", "--hf", "org/nope", env=env, cwd=tmp_path)
    assert unknown.returncode == 1 and "cannot resolve model org/nope at main: RepositoryNotFoundError" in unknown.stderr
    lines = done.stdout.strip().splitlines()
    assert all(line.startswith("- {kind: ") for line in lines), lines  # list items, ready to paste
    text = write_bench(tmp_path, [line.removeprefix("- ") for line in lines]).read_text()
    selected, whole, url = loads_benchmark(text, tmp_path).suite("s").repo("tiny").assets
    assert isinstance(selected, HfAsset) and isinstance(url, UrlAsset)
    assert selected.revision == repo.commit and selected.size == len(CONFIG) + len(WEIGHTS)
    assert selected.files == ("config.json", "weights/*")
    assert whole.size == sum(len(data) for data in repo.files.values()) and not whole.files
    assert url.sha256 == hashlib.sha256(TABLE).hexdigest() and url.size == len(TABLE)


@pytest.mark.skipif(not sshd_available(), reason="needs root and openssh-server")
@pytest.mark.timeout(240)
def test_ssh_host_gets_the_engines_copy_and_its_probe_runs_offline(tmp_path):
    repo = tiny_repo()
    data = tmp_path / "data"
    data.mkdir()
    server = make_sshd(tmp_path / "sshd", hide=[data])  # the host sees none of the engine's data dir
    try:
        with FakeHub([repo]) as hub, HttpFiles({"/t.csv": TABLE}) as files:
            bench = write_bench(tmp_path, good_assets(repo, files), hosts=server.host_yaml("remote", gpus=0))
            env = hub_env(tmp_path, hub)
            before = resenv("assets", "status", str(bench), "--host", "remote", env=env, cwd=tmp_path)
            assert before.returncode == 1 and before.stdout.count("MISSING") == 2, before.stdout + before.stderr
            fetched = resenv("assets", "fetch", str(bench), "--host", "remote", "--host", "local", env=env, cwd=tmp_path)
            assert fetched.returncode == 0, fetched.stdout + fetched.stderr
            assert fetched.stdout.count("host remote: ") == 2 and fetched.stdout.count(": copied") == 2, fetched.stdout
            again = resenv("assets", "fetch", str(bench), "--host", "remote", env=env, cwd=tmp_path)
            assert again.stdout.count(": already there") == 2, again.stdout
        after = resenv("assets", "status", str(bench), "--host", "remote", env=env, cwd=tmp_path)
        assert after.returncode == 0 and after.stdout.count("cached ") == 2, after.stdout + after.stderr
        run = resenv("run", str(bench), "--host", "remote", "--display", "plain", "--tiers", "C1",
                     env=env, cwd=tmp_path, timeout=180)
        assert run.returncode == 0, run.stdout + run.stderr
        [result] = c1(tmp_path / "store.db")
        assert result["status"] == "pass", result["evidence"]
        assert "weights: 4096" in result["evidence"]["log_tail"] and "table: a,b" in result["evidence"]["log_tail"]
    finally:
        server.stop()


# The test image has a bare python3.11 (no huggingface_hub): the entrypoint reads the cache's files itself.
CONTAINER_MAIN = """\
import os
hub = os.environ["HF_HUB_CACHE"]
commit = open(os.path.join(hub, "models--org--tiny", "refs", "main")).read()
print("offline:", os.environ.get("HF_HUB_OFFLINE"), "config:", open(os.path.join(
    hub, "models--org--tiny", "snapshots", commit, "config.json")).read().strip())
print("weights:", len(open("ckpt/weights/model.bin", "rb").read()))
print("table:", open("data/t.csv").read().splitlines()[0])
"""
CONTAINER_AGENT = """\
a:
  kind: command
  command: >-
    printf '{{"python_path": "/usr/bin/python3.11", "python_version": null}}' > {report}
"""


@pytest.mark.skipif(not docker_available(), reason="needs root, docker.io and the docker SDK")
@pytest.mark.timeout(300)
def test_a_container_gets_the_engines_copy_of_the_assets(tmp_path):
    daemon = start_dockerd()
    try:
        import_image(daemon.client(), build_rootfs(tmp_path / "rootfs"))
        repo = tiny_repo()
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]  # the daemon may not raise it past its own
        memlock = -1 if memlock == resource.RLIM_INFINITY else memlock
        hosts = (f"  box: {{kind: local, gpus: 0, sandbox: docker, image: {TEST_IMAGE},"
                 f" docker: {{network: none, memlock: {memlock}}}}}\n")
        env = hub_env(tmp_path, None) | {"DOCKER_HOST": daemon.socket}
        with FakeHub([repo]) as hub, HttpFiles({"/t.csv": TABLE}) as files:
            bench = write_bench(tmp_path, good_assets(repo, files), hosts=hosts, main=CONTAINER_MAIN,
                                agent=CONTAINER_AGENT)
            fetched = resenv("assets", "fetch", str(bench), "--host", "box", env=env | {"HF_ENDPOINT": hub.url},
                             cwd=tmp_path)
        assert fetched.returncode == 0 and "host box: containers get the engine's copy" in fetched.stdout, fetched.stdout
        run = resenv("run", str(bench), "--host", "box", "--display", "plain", "--tiers", "C1", env=env,
                     cwd=tmp_path, timeout=240)
        assert run.returncode == 0, run.stdout + run.stderr
        [result] = c1(tmp_path / "store.db")
        assert result["status"] == "pass", result["evidence"]
        log = result["evidence"]["log_tail"]
        assert 'offline: 1 config: {"hidden": 4}' in log and "weights: 4096" in log and "table: a,b" in log, log
    finally:
        daemon.stop()
