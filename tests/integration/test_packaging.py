"""The built wheel installs the resenv namespace (engine, probes, tui) and its console script."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

from ..conftest import REPO_ROOT


def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO_ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheel = next(dist.glob("resenv-*.whl"))
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = target / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    out = subprocess.run([str(target / "bin" / "resenv"), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for command in ("run", "runs", "show", "validate", "control"):
        assert command in out.stdout
    where = subprocess.run(
        [str(python), "-c", "import resenv.engine.cli.main, resenv.engine.sandbox.process, resenv.probes, resenv.tui;"
         " print(resenv.engine.cli.main.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(target), "imported from the source tree, not the wheel"
    top_level = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('engine'), u.find_spec('tui'))"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert top_level.stdout.strip() == "None None", "generic top-level packages must not be installed"
    # every package of the source tree is in the wheel (a new subpackage must be listed in pyproject)
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for init in sorted(p for top in ("engine", "probes", "tui") for p in (REPO_ROOT / top).rglob("__init__.py")):
        member = "resenv/" + init.relative_to(REPO_ROOT).as_posix()
        assert member in names, f"{init.relative_to(REPO_ROOT)} is not packaged"
