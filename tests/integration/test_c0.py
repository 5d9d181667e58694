"""Tier C0 with real components: the pinned pyright, real venvs, real pip installs of small packages.

The tiny repo imports the stdlib, its own package, and three small pure-Python packages: `idna` and
`tomli` (no stubs bundled with pyright: a missing one is `reportMissingImports`) and `six` (pyright
bundles typeshed stubs for it: a missing one is only `reportMissingModuleSource`, reported apart).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from resenv.probes.c0 import PYRIGHT_PIN, C0Result, Pyright, find_pyright, run_c0
from resenv.probes.census import import_census

pytestmark = pytest.mark.timeout(600)

REPO = {
    "main.py": """\
        import os
        import json
        import mypkg
        from mypkg.sub import value
        import idna
        import six

        def load(path):
            import tomli
            with open(path, "rb") as handle:
                return tomli.load(handle)
        """,
    "mypkg/__init__.py": "from . import sub\nfrom .sub import value\n",
    "mypkg/sub.py": "import collections\nvalue = 1\n",
}
# census: os, json, collections (stdlib) + mypkg (repo) + idna, six, tomli (third party) = 7
TOTAL, THIRD_PARTY = 7, ["idna", "six", "tomli"]


def make_repo(root: Path) -> Path:
    for name, text in REPO.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def census_of(repo: Path):
    return import_census({p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*.py")})


def make_venv(path: Path, *packages: str) -> Path:
    """A real venv (no pip inside: the outer pip installs into it, which is quicker)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    if packages:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--disable-pip-version-check", *packages], check=True, capture_output=True)
    return python


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    root = tmp_path_factory.mktemp("venvs")
    return {
        "full": make_venv(root / "full", "idna", "tomli", "six"),
        "no_tomli": make_venv(root / "no_tomli", "idna", "six"),
        "no_six": make_venv(root / "no_six", "idna", "tomli"),
    }


async def judge(python, repo: Path, tmp_path: Path, census=None, **kwargs) -> C0Result:
    census = census or census_of(repo)
    return await run_c0(str(python), repo, census, work_dir=tmp_path / "c0", timeout=300, **kwargs)


def analyzed_files(tmp_path: Path) -> set[str]:
    config = json.loads((tmp_path / "c0" / "pyrightconfig.json").read_text())
    return set(config["include"])


def test_the_pinned_pyright_is_bundled_and_run_by_node():
    tool = find_pyright()
    assert tool.version == PYRIGHT_PIN
    assert tool.argv[1].endswith("pyright/dist/index.js"), "expected the npm package bundled in the wheel"


async def test_everything_installed_passes(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    census = census_of(repo)
    assert (census.total, census.third_party, census.repo) == (TOTAL, 3, 1)
    result = await judge(venvs["full"], repo, tmp_path, census)
    assert result.status == "pass", result.log_tail
    assert result.category is None
    assert result.missing == [] and result.missing_source == []
    assert result.paper_ratio == 1.0 and result.third_party_ratio == 1.0
    assert result.interpreter_ok and result.pyright_version == PYRIGHT_PIN
    assert result.python_version and result.python_version.startswith("3.")
    assert "--outputjson" in result.command and "--pythonpath" in result.command
    assert not (repo / "pyrightconfig.json").exists(), "the config must never be written into the repo"
    assert C0Result.from_dict(json.loads(json.dumps(result.to_dict()))) == result


async def test_one_missing_package_fails_with_exactly_that_module(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    result = await judge(venvs["no_tomli"], repo, tmp_path)
    assert result.status == "fail" and result.category == "deps_missing"
    assert result.missing == ["tomli"]  # imported inside a function: still counted
    assert result.paper_ratio == pytest.approx(1 - 1 / TOTAL)
    assert result.third_party_ratio == pytest.approx(1 - 1 / 3)


async def test_stub_only_module_is_reported_apart_and_fails_the_corrected_ratio(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    result = await judge(venvs["no_six"], repo, tmp_path)
    assert result.missing == [] and result.missing_source == ["six"]
    assert result.paper_ratio == 1.0  # the paper counts reportMissingImports only
    assert result.status == "fail" and result.category == "deps_missing"
    assert result.third_party_ratio == pytest.approx(1 - 1 / 3)


@pytest.mark.parametrize("broken", ["missing", "not_executable", "crashes", "directory"])
async def test_an_interpreter_that_does_not_run_scores_all_missing(tmp_path, broken):
    repo = make_repo(tmp_path / "repo")
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    if broken == "not_executable":
        python.write_text("#!/bin/sh\nexit 0\n")
    elif broken == "crashes":
        python.write_text("#!/bin/sh\necho 'libpython3.99.so: cannot open shared object file' >&2\nexit 127\n")
        python.chmod(0o755)
    elif broken == "directory":
        python.mkdir()
    result = await judge(python, repo, tmp_path)
    assert result.status == "fail" and result.category == "entrypoint_not_found"
    assert not result.interpreter_ok
    assert result.missing == THIRD_PARTY
    assert result.third_party_ratio == 0.0
    assert result.paper_ratio == pytest.approx(1 - 3 / TOTAL)
    assert str(python) in result.log_tail
    if broken == "crashes":
        assert "libpython3.99" in result.log_tail


async def test_a_venv_inside_the_repo_is_used_but_never_scanned(tmp_path):
    repo = make_repo(tmp_path / "repo")
    census = census_of(repo)  # the pinned commit: before the agent made its .venv
    python = make_venv(repo / ".venv", "idna", "tomli", "six")
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "planted.py").write_text("import idna\nimport definitely_not_installed_zzz\n")
    (repo / "envs" / "conda1" / "conda-meta").mkdir(parents=True)
    (repo / "envs" / "conda1" / "x.py").write_text("import definitely_not_installed_zzz\n")
    result = await judge(python, repo, tmp_path, census)
    assert result.status == "pass", result.log_tail
    assert result.missing == []
    output = json.loads((tmp_path / "c0" / "pyright.json").read_text())
    assert not [d for d in output["generalDiagnostics"] if "/.venv/" in d["file"] or "/envs/" in d["file"]]
    assert output["summary"]["filesAnalyzed"] == 3
    config = json.loads((tmp_path / "c0" / "pyrightconfig.json").read_text())
    assert any(path.endswith("repo/.venv") for path in config["exclude"])
    assert any(path.endswith("envs/conda1") for path in config["exclude"])


async def test_files_the_agent_adds_do_not_count(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    census = census_of(repo)
    (repo / "agent_fix.py").write_text("import brand_new_module_zzz\nimport tomli\n")
    (repo / "mypkg" / "patched.py").write_text("import another_new_one_zzz\n")
    result = await judge(venvs["full"], repo, tmp_path, census)
    assert result.status == "pass" and result.missing == []
    assert not any("agent_fix" in path or "patched" in path for path in analyzed_files(tmp_path))

    # a census file the agent rewrote is judged as it is now, but only census modules count
    (repo / "main.py").write_text((repo / "main.py").read_text() + "import yet_another_new_zzz\n")
    result = await judge(venvs["no_tomli"], repo, tmp_path, census)
    assert result.missing == ["tomli"] and result.ignored == 1


async def test_src_layout_and_sibling_imports_resolve(tmp_path, venvs):
    repo = tmp_path / "repo"
    (repo / "src" / "coolpkg").mkdir(parents=True)
    (repo / "src" / "coolpkg" / "__init__.py").write_text("import idna\n")
    (repo / "scripts").mkdir()
    (repo / "scripts" / "run.py").write_text("import coolpkg\nimport helper\nimport idna.core\n")
    (repo / "scripts" / "helper.py").write_text("import os\n")
    census = census_of(repo)
    assert {m.name: m.kind for m in census.modules} == {
        "coolpkg": "repo", "helper": "repo", "idna": "third_party", "os": "stdlib"}
    result = await judge(venvs["full"], repo, tmp_path, census)
    assert result.status == "pass", result.log_tail


async def test_a_pyright_that_cannot_run_is_an_infra_error_scored_all_missing(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    garbage = Pyright(argv=[sys.executable, "-c", "print('Segmentation fault'); raise SystemExit(1)"], version="x")
    result = await judge(venvs["full"], repo, tmp_path, pyright=garbage)
    assert (result.status, result.category) == ("error", "infra")
    assert result.missing == THIRD_PARTY and result.third_party_ratio == 0.0
    assert "no usable JSON" in result.log_tail

    fatal = Pyright(argv=[sys.executable, "-c", "print('{\"generalDiagnostics\": []}'); raise SystemExit(3)"],
                    version="x")
    result = await judge(venvs["full"], repo, tmp_path, pyright=fatal)
    assert (result.status, result.category) == ("error", "infra")
    assert "exited 3" in result.log_tail and result.missing == THIRD_PARTY

    missing_node = Pyright(argv=[str(tmp_path / "no-node"), "index.js"], version="x")
    result = await judge(venvs["full"], repo, tmp_path, pyright=missing_node)
    assert (result.status, result.category) == ("error", "infra") and result.missing == THIRD_PARTY


async def test_pyright_timeout_kills_the_process_group(tmp_path, venvs):
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "grandchild.pid"
    hang = Pyright(argv=["sh", "-c", f"sleep 300 & echo $! > {marker}; wait", "pyright"], version="x")
    census = census_of(repo)
    result = await run_c0(str(venvs["full"]), repo, census, work_dir=tmp_path / "c0", timeout=1, pyright=hang)
    assert (result.status, result.category) == ("error", "infra")
    assert "timed out" in result.log_tail and result.missing == THIRD_PARTY
    assert result.duration_s < 30
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


# -- judged away from the host: the recorded import map and its replay interpreter (probes/mirror.py) --

def record_import_map(python: Path, repo: Path, census, out_dir: Path) -> bytes:
    """What the engine does on a remote host or in a container: run the kit's importmap.py there."""
    from resenv.probes.kit import script_source

    out_dir.mkdir(parents=True, exist_ok=True)
    script, listing, archive = out_dir / "importmap.py", out_dir / "census.txt", out_dir / "map.tar.gz"
    script.write_bytes(script_source("importmap.py"))
    listing.write_text("\n".join(census.files))
    subprocess.run([str(python), "-I", "-B", str(script), str(archive), str(repo), str(listing)], check=True,
                   capture_output=True)
    return archive.read_bytes()


@pytest.mark.parametrize("env", ["full", "no_tomli", "no_six"])
async def test_a_recorded_import_map_judges_exactly_like_the_interpreter_itself(tmp_path, venvs, env):
    from resenv.probes.mirror import build_mirror

    repo = make_repo(tmp_path / "repo")
    census = census_of(repo)
    direct = await judge(venvs[env], repo, tmp_path / "direct", census)
    mirror = build_mirror(record_import_map(venvs[env], repo, census, tmp_path / "host"), tmp_path / "mirror")
    assert mirror.repo.is_relative_to(tmp_path / "mirror") and (mirror.repo / "main.py").read_text() == (
        repo / "main.py").read_text(), "census files keep their content"
    assert (mirror.repo / "mypkg" / "sub.py").exists()
    replayed = await run_c0(str(mirror.python), mirror.repo, census, work_dir=tmp_path / "replayed", timeout=300)
    assert (replayed.status, replayed.missing, replayed.missing_source) == (
        direct.status, direct.missing, direct.missing_source), replayed.log_tail
    assert replayed.python_version == direct.python_version


async def test_an_import_map_that_could_not_be_recorded_scores_all_missing_with_the_hosts_error(tmp_path):
    from resenv.probes.mirror import failed_mirror

    repo = make_repo(tmp_path / "repo")
    mirror = failed_mirror(tmp_path / "mirror", str(repo), "bash: /env/bin/python: No such file or directory")
    result = await run_c0(str(mirror.python), mirror.repo, census_of(repo), work_dir=tmp_path / "c0", timeout=60)
    assert result.status == "fail" and result.category == "entrypoint_not_found"
    assert result.missing == THIRD_PARTY and "No such file or directory" in result.log_tail


def test_an_import_map_with_a_link_out_of_the_mirror_is_refused(tmp_path):
    import io
    import tarfile

    from resenv.probes.mirror import build_mirror

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        facts = json.dumps({"version": "3.11", "version_info": [3, 11, 0, "final", 0], "path": [],
                            "prefix": "/", "repo": "/r"}).encode()
        info = tarfile.TarInfo("importmap.json")
        info.size = len(facts)
        tar.addfile(info, io.BytesIO(facts))
        link = tarfile.TarInfo("root/r/evil")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
    with pytest.raises(tarfile.TarError):
        build_mirror(buffer.getvalue(), tmp_path / "mirror")
    assert not (tmp_path / "mirror" / "root" / "r" / "evil").exists()
