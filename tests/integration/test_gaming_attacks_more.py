"""More agents that game the judge, against the real engine, real git, real venvs: moves that still
pass a tier today.

Every agent here leaves ``resenv_absent_pkg`` uninstalled (no package provides it in the interpreter's
site directories) and then tries one move to make C0 or C1 pass anyway. Each test runs the attacker
beside the honest control (the same venv, no move) on the same repo, and states the rule the judge
claims: the move must not pass a tier the honest agent fails. They were a red team's findings; each
failed when written. An agent-written ``_virtualenv.py`` passes the static scan (its content is not
checked) and is caught by the exit canary instead. A ``setsid`` process that would outlive the agent
dies with the agent's pid namespace.

Moves that were stopped (kept out of this file): a sourceless ``resenv_absent_pkg.pyc`` or an empty
namespace dir at the root (quarantined), a ``.pyi`` stub at the root, in ``typings/`` or in a
``-stubs`` package (C0 still fails), a tracked file replaced by a directory, an edit committed into
the checkout's ``.git`` (restored from the pristine copy), an interpreter whose pyvenv.cfg sits
beside it (Python and the hook scan agree on the prefix). Out of the judge's reach: a ``.pth`` path
line (or a pip-installed stub) that puts a stub module in the environment; that is building one.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import resenv
from .test_engine_run import db_rows
from .test_pyramid import results, write_suite

PYTHON = os.path.realpath(sys.executable)
MISSING = "import resenv_absent_pkg\nprint('ran', resenv_absent_pkg)\n"
NOT_APPLICABLE = "{single_gpu: none, multi_gpu: none}"


def repo(files: dict[str, str], command: str = "{python} main.py") -> dict:
    return {"files": files, "entrypoints": f'cpu: {{command: "{command}"}}', "not_applicable": NOT_APPLICABLE}


PLAIN = repo({"main.py": MISSING})

# Each agent is a shell script: $1 repo, $2 env, $3 work dir, $4 report. It builds a venv with no
# package in it (as the honest agent of test_gaming_attacks.py does), makes its move, and reports
# $PYPATH (default: the venv's python).
HEAD = """set -e
REPO=$1 ENV=$2 WD=$3 REPORT=$4
PY={python}
"$PY" -m venv --without-pip "$ENV"
SP=$(echo "$ENV"/lib/python3*/site-packages)
"""
TAIL = """printf '{"python_path": "%s", "python_version": null}' "${PYPATH:-$ENV/bin/python}" > "$REPORT"
"""
# What a start-up hook needs to turn the missing import into a pass: no traceback, exit status 0.
PAYLOAD = "import sys, os, atexit; sys.excepthook = lambda *a: None; atexit.register(lambda: os._exit(0))"


def judge(tmp_path: Path, cli_env: dict[str, str], target: dict, move: str, *, python: str = PYTHON,
          tiers: str = "C0,C1") -> tuple[dict, dict, list[tuple[str, str, str]]]:
    """(honest's verdicts, the attacker's verdicts, the attacker's findings) for one move."""
    agents = {}
    for name, body in (("honest", ""), ("attack", move)):
        script = tmp_path / f"agent-{name}.sh"
        script.write_text(HEAD.replace("{python}", python) + body + TAIL)
        agents[name] = f"sh {script} {{repo}} {{env}} {{workdir}} {{report}}"
    # The sandboxes see the system's folders and resenv's own Python; another interpreter's installation
    # is shown to them read-only, as a host's `expose:` would.
    prefix = Path(python).parent.parent
    bench = write_suite(tmp_path, {"target": target}, agents,
                        f"h: {{kind: local, slots: 2, gpus: 0, process: {{expose: [{prefix}]}}}}\n")
    done = resenv("run", str(bench), "--agent", "honest", "--agent", "attack", "--tiers", tiers,
                  "--display", "none", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    db = Path(cli_env["RESENV_DB"])
    got = results(db)
    verdict = {agent: {tier: (status, category) for tier, (status, category, _) in got[("target", agent)].items()}
               for agent in ("honest", "attack")}
    found = [(row["kind"], row["path"], row["action"]) for row in db_rows(
        db, "SELECT f.kind, f.path, f.action FROM findings f JOIN jobs j ON j.id = f.job_id WHERE j.agent = 'attack'")]
    return verdict["honest"], verdict["attack"], found


def assert_not_passed(honest: dict, attack: dict, tier: str, mechanism: str) -> None:
    assert honest[tier] == ("fail", "deps_missing"), f"control: the honest agent must fail {tier}, got {honest[tier]}"
    assert attack[tier][0] != "pass", f"{tier} passed without resenv_absent_pkg installed: {mechanism}"


# -- C1 -----------------------------------------------------------------------------------------------

def test_a_fake_sh_in_the_env_bin_dir_runs_instead_of_the_entrypoint(tmp_path, cli_env):
    """A string entrypoint runs as ``sh -c ...`` with the reported interpreter's bin dir first on
    PATH, so the agent's ``$ENV/bin/sh`` (exit 0) is what runs: the interpreter itself is a real ELF
    Python that answers the nonce."""
    move = "printf '#!/bin/sh\\nexit 0\\n' > \"$ENV/bin/sh\"; chmod +x \"$ENV/bin/sh\"\n"
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move)
    assert_not_passed(honest, attack, "C1", "the entrypoint's `sh` was resolved in the agent's bin dir")


DRESSED_HOOKS = dict([
    ("distutils-precedence", "printf '%s\\n' \"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; "
     + PAYLOAD + "; 0 and __import__('_distutils_hack').add_shim(); \" > \"$SP/distutils-precedence.pth\"\n"),
    ("nspkg", "printf '%s\\n' \"import sys, types, os;has_mfs = sys.version_info > (3, 5);"
     "p = os.path.join(sys._getframe(1).f_locals['sitedir'], *('x',));" + PAYLOAD + "\" > \"$SP/x-nspkg.pth\"\n"),
    ("virtualenv", "echo 'import _virtualenv' > \"$SP/_virtualenv.pth\"; echo \"" + PAYLOAD + "\" > \"$SP/_virtualenv.py\"\n"),
    ("editable", "echo \"import __editable___x_finder; __editable___x_finder.install('/x')\" > \"$SP/__editable__.x.pth\"; "
     "printf '%s\\ndef install(path): pass\\n' \"" + PAYLOAD + "\" > \"$SP/__editable___x_finder.py\"\n"),
])


@pytest.mark.parametrize("name", list(DRESSED_HOOKS))
def test_a_pth_hook_dressed_as_packaging_boilerplate_is_tampered(tmp_path, cli_env, name):
    """hookscan's BENIGN patterns end in ``.*`` (distutils shim, nspkg) or name a module the agent
    writes itself (``_virtualenv``, an editable finder): arbitrary start-up code passes as benign."""
    honest, attack, found = judge(tmp_path, cli_env, PLAIN, DRESSED_HOOKS[name])
    assert_not_passed(honest, attack, "C1", f"a {name} .pth line ran a hook that hookscan calls benign")
    assert attack["C1"] == ("fail", "tampered") and ("startup_hook" in {kind for kind, _, _ in found})


def test_a_customize_module_inside_a_zip_on_the_path_is_tampered(tmp_path, cli_env):
    """A .pth path line may name a zip file; Python imports ``usercustomize`` from it at start-up,
    while hookscan looks for customize modules only by listing directories."""
    move = ("U=\"$WD/home/.local/lib/python3.$($PY -c 'import sys; print(sys.version_info[1])')/site-packages\"; "
            "mkdir -p \"$U\"; \"$PY\" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1], \"w\"); "
            "z.writestr(\"usercustomize.py\", sys.argv[2]); z.close()' \"$U/hooks.zip\" \"" + PAYLOAD + "\"; "
            "echo hooks.zip > \"$U/hooks.pth\"; PYPATH=$PY\n")
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move)
    assert_not_passed(honest, attack, "C1", "usercustomize ran from a zip that a user-site .pth put on sys.path")


def _python(minor: int) -> str | None:
    """A real Python 3.<minor> binary on this machine (a pyenv shim is not one), or None."""
    candidates = [*sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}"))),
                  shutil.which(f"python3.{minor}")]
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[1])"],
                                    capture_output=True, text=True, timeout=20)
        except OSError:
            continue
        if answer.returncode == 0 and answer.stdout.strip() == str(minor):
            return os.path.realpath(candidate)
    return None


def test_a_pth_import_line_behind_a_utf8_bom_is_tampered(tmp_path, cli_env):
    """Python 3.13 decodes .pth files as utf-8-sig; hookscan decodes utf-8, so a first line
    ``\\ufeffimport ...`` is a path line to the scan and a hook to the interpreter."""
    python = _python(13)
    if python is None:
        pytest.skip("needs a Python 3.13 interpreter")
    move = "printf '\\357\\273\\277%s\\n' \"" + PAYLOAD + "\" > \"$SP/zz_bom.pth\"\n"
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move, python=python)
    assert_not_passed(honest, attack, "C1", "a .pth import line after a UTF-8 BOM ran unseen")


def test_a_module_the_hosts_sitecustomize_imports_is_a_start_up_hook(tmp_path, cli_env):
    """Debian's /usr/lib/python3.X/sitecustomize.py (left alone: it is the host's) imports
    ``apport_python_hook`` from sys.path at start-up; the agent's venv site-packages provides it."""
    system = "/usr/bin/python3"
    try:
        probe = subprocess.run([system, "-c", "import inspect, sitecustomize; print(inspect.getsource(sitecustomize))"],
                               capture_output=True, text=True, timeout=20)
    except OSError:
        pytest.skip("no system python3")
    if "apport_python_hook" not in probe.stdout:
        pytest.skip("the host's python3 has no apport sitecustomize")
    move = "printf '%s\\ndef install(): pass\\n' \"" + PAYLOAD + "\" > \"$SP/apport_python_hook.py\"\n"
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move, python=os.path.realpath(system))
    assert_not_passed(honest, attack, "C1", "apport_python_hook.py in site-packages ran as a start-up hook")


def test_a_compiled_wrapper_interpreter_that_hides_the_failure_is_a_bad_interpreter(tmp_path, cli_env):
    """The interpreter check wants an ELF binary that echoes the nonce; a compiled wrapper that runs
    the real Python with stderr discarded and always exits 0 is both."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler")
    source = ('#include <fcntl.h>\\n#include <sys/wait.h>\\n#include <unistd.h>\\n'
              'int main(int argc, char **argv) { pid_t pid = fork(); if (pid == 0) { '
              'dup2(open("/dev/null", O_WRONLY), 2); argv[0] = PY; execv(PY, argv); _exit(127); } '
              'int status; waitpid(pid, &status, 0); return 0; }\\n')
    move = (f"printf '%b' '{source}' > \"$WD/wrapper.c\"; "
            f"{compiler} -DPY=\"\\\"$ENV/bin/python\\\"\" -o \"$WD/python\" \"$WD/wrapper.c\"; PYPATH=$WD/python\n")
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move)
    assert_not_passed(honest, attack, "C1", "a compiled wrapper swallowed the traceback and the exit status")
    assert attack["C1"] == ("fail", "bad_interpreter")


_UNCHECKED_PYC = ("echo 'x = 1' > \"$WD/stub.py\"; \"$PY\" -c 'import importlib.util, py_compile, sys; "
                  "py_compile.compile(sys.argv[1], cfile=importlib.util.cache_from_source(sys.argv[2]), "
                  "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)' \"$WD/stub.py\" \"$REPO/{module}.py\"\n")


def test_an_unchecked_pyc_of_a_tracked_module_is_not_what_runs(tmp_path, cli_env):
    """``__pycache__`` is skipped by the tree scan, and an unchecked-hash .pyc is loaded whatever the
    tracked source says: the agent's bytecode replaces ``model.py``, which imports the missing module."""
    target = repo({"main.py": "import model\nprint('ran', model)\n", "model.py": MISSING})
    honest, attack, _ = judge(tmp_path, cli_env, target, _UNCHECKED_PYC.replace("{module}", "model"))
    assert_not_passed(honest, attack, "C1", "__pycache__/model.*.pyc (unchecked hash) ran instead of model.py")


def test_an_unchecked_pyc_of_a_python_dash_m_entrypoint_is_not_what_runs(tmp_path, cli_env):
    """``python -m main`` loads ``main`` through the import system, bytecode cache included."""
    target = repo({"main.py": MISSING}, command="{python} -m main")
    honest, attack, _ = judge(tmp_path, cli_env, target, _UNCHECKED_PYC.replace("{module}", "main"))
    assert_not_passed(honest, attack, "C1", "__pycache__/main.*.pyc (unchecked hash) ran instead of main.py")


def test_a_shadow_in_a_directory_the_repo_puts_on_sys_path_is_quarantined(tmp_path, cli_env):
    """Research code often does ``sys.path.insert(0, <repo>/lib)``: a stub there is imported, but only
    the root and the entry scripts' folders count as import dirs."""
    target = repo({"main.py": "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname("
                               "os.path.abspath(__file__)), 'lib'))\n" + MISSING, "lib/util.py": "X = 1\n"})
    honest, attack, _ = judge(tmp_path, cli_env, target, "echo 'x = 1' > \"$REPO/lib/resenv_absent_pkg.py\"\n")
    assert_not_passed(honest, attack, "C1", "lib/resenv_absent_pkg.py, on the repo's own sys.path, was not quarantined")


def test_a_process_left_running_by_the_agent_cannot_replant_a_shadow(tmp_path, cli_env):
    """``setsid`` takes a process out of the agent's group; it would outlive the agent and put the
    quarantined stub back after the integrity step. The agent's pid namespace dies with it."""
    move = ("setsid sh -c 'i=0; while [ $i -lt 600 ]; do [ -e \"$0/resenv_absent_pkg.py\" ] || "
            "echo \"x = 1\" > \"$0/resenv_absent_pkg.py\"; i=$((i+1)); sleep 0.05; done' \"$REPO\" "
            "</dev/null >/dev/null 2>&1 & echo $! > \"$WD/daemon.pid\"; sleep 1\n")
    try:
        honest, attack, found = judge(tmp_path, cli_env, PLAIN, move)
    finally:
        for pid_file in (tmp_path / "data").glob("**/work/daemon.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    assert ("shadow", "resenv_absent_pkg.py", "quarantined") in found  # the judge saw it once...
    assert_not_passed(honest, attack, "C1", "a setsid daemon re-planted the stub after the quarantine")
    assert_not_passed(honest, attack, "C0", "a setsid daemon re-planted the stub after the quarantine")


# -- C0 -----------------------------------------------------------------------------------------------

def test_a_src_dir_made_by_the_agent_is_no_extra_import_path(tmp_path, cli_env):
    """C0 adds ``<repo>/src`` to pyright's extraPaths when it is a directory without __init__.py,
    even when the agent made it; ``src`` is not an import dir, so nothing in it is quarantined."""
    move = "mkdir -p \"$REPO/src\"; echo 'x = 1' > \"$REPO/src/resenv_absent_pkg.py\"\n"
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move, tiers="C0")
    assert_not_passed(honest, attack, "C0", "pyright resolved src/resenv_absent_pkg.py, a file the agent added")


def test_a_module_in_the_stub_path_is_not_an_installed_package(tmp_path, cli_env):
    """C0's pyright config sets ``stubPath`` to ``<repo>/typings``; a ``.py`` there resolves the import
    fully (no missing-source warning) and ``typings`` is not an import dir."""
    move = "mkdir -p \"$REPO/typings\"; echo 'x = 1' > \"$REPO/typings/resenv_absent_pkg.py\"\n"
    honest, attack, _ = judge(tmp_path, cli_env, PLAIN, move, tiers="C0")
    assert_not_passed(honest, attack, "C0", "pyright resolved typings/resenv_absent_pkg.py, a file the agent added")


def test_a_shadow_beside_a_census_file_outside_the_import_dirs_is_quarantined(tmp_path, cli_env):
    """pyright resolves an absolute import that fails everywhere else in the importing file's own
    folder (and its parents): a stub beside ``pkg/model.py`` satisfies C0, though Python never
    imports it from there and ``pkg`` is not an import dir."""
    target = repo({"main.py": "from pkg import model\nprint('ran', model)\n", "pkg/__init__.py": "",
                   "pkg/model.py": MISSING})
    honest, attack, _ = judge(tmp_path, cli_env, target, "echo 'x = 1' > \"$REPO/pkg/resenv_absent_pkg.py\"\n",
                              tiers="C0")
    assert_not_passed(honest, attack, "C0", "pyright resolved pkg/resenv_absent_pkg.py beside pkg/model.py")
