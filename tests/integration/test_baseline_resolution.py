"""The baseline never trades a declared pin for a guessed import, and says exactly what it verified.

Real pip, real venvs, and a local package source of tiny wheels written here (no index, no network):
`pina` 1.0 and 2.0, and `guessme`, which needs `pina<2`. A repo declaring `pina>=2` that also imports
`guessme` is the shape in which a second, unconstrained pip call used to downgrade the declared pin
and exit 0 while the agent reported that every step succeeded."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

from tests.integration.test_baseline_agent import check_events, make_repo, run_agent


def make_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: one package `name` whose `__version__` is `version`."""
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\n",
        f"{name}-{version}.dist-info/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: resenv-tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def local_source(tmp_path: Path) -> dict[str, str]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "pina", "1.0")
    make_wheel(wheels, "pina", "2.0")
    make_wheel(wheels, "guessme", "1.0", requires=("pina<2",))
    make_wheel(wheels, "fitsin", "1.0", requires=("pina>=1",))
    return {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}


def installed(python: str, name: str) -> str | None:
    done = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def test_a_guessed_import_never_downgrades_a_declared_pin(tmp_path):
    repo = make_repo(tmp_path, {
        "requirements.txt": "pina>=2\n",
        "main.py": "import pina\nimport guessme  # undeclared: guessed from the import\nimport fitsin\n",
    })
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=local_source(tmp_path), forward=False)
    check_events(events)
    report = json.loads(report_path.read_text())
    python = report["python_path"]
    assert installed(python, "pina") == "2.0", "the declared pin held"
    assert installed(python, "guessme") is None
    assert installed(python, "fitsin") == "1.0", "a guess that fits is still added"
    baseline = report["baseline"]
    assert [(c["package"], c["for_import"], c["category"]) for c in baseline["conflicts"]] == [
        ("guessme", "guessme", "deps_missing")]
    assert "pina" in baseline["conflicts"][0]["reason"]
    assert baseline["imports_missing"] == ["guessme"]
    assert baseline["pip_check"]["ok"] is True
    assert "every step succeeded" not in report["notes"] and "imports still missing: guessme" in report["notes"]
    assert done.returncode == 1
    done_message = next(e for e in events if e["type"] == "message" and e["step"] == "done")
    assert "guessme" in done_message["text"] and "succeeded" not in done_message["text"]


def test_declared_requirements_that_cannot_fit_are_reported_not_forced(tmp_path):
    repo = make_repo(tmp_path, {"requirements.txt": "pina>=2\nguessme\n", "main.py": "import pina, guessme\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=local_source(tmp_path), forward=False)
    check_events(events)
    report = json.loads(report_path.read_text())
    assert done.returncode == 1
    assert installed(report["python_path"], "pina") == "2.0"
    failures = report["baseline"]["failures"]
    assert any(f["step"] == "install:declared" and f["category"] == "deps_missing"
               and "guessme cannot be installed with the other declared requirements" in f["message"]
               and "pina" in f["message"] for f in failures)
    installs = [e["step"] for e in events if e["type"] == "tool_call" and e["step"].startswith("install")]
    assert installs == ["install:declared", "install:declared"], "the rest resolved together, not one at a time"
    assert report["baseline"]["imports_missing"] == ["guessme"]
    assert report["baseline"]["pip_check"]["ok"] is True
    assert "every step succeeded" not in report["notes"]


def test_everything_verified_is_said_and_only_then(tmp_path):
    repo = make_repo(tmp_path, {"requirements.txt": "pina>=2\n", "main.py": "import pina\nimport fitsin\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=local_source(tmp_path), forward=False)
    report = json.loads(report_path.read_text())
    assert done.returncode == 0, done.stdout[-3000:]
    assert report["baseline"]["conflicts"] == [] and report["baseline"]["imports_missing"] == []
    assert report["baseline"]["guessed"] == {"fitsin": "fitsin"}
    assert report["notes"].count("every step succeeded and every scanned import resolves") == 1
    assert "pip check: passed" in report["notes"] and "entrypoints were not run" in report["notes"]


def test_a_failed_import_in_verify_is_categorised_by_the_classifier(tmp_path):
    repo = make_repo(tmp_path, {"requirements.txt": "pina>=2\n",
                                "mypkg/__init__.py": "import pina\nfrom mypkg import gone  # a module it lacks\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=local_source(tmp_path), forward=False)
    failures = json.loads(report_path.read_text())["baseline"]["failures"]
    verify = [f for f in failures if f["step"] == "verify"]
    assert verify and verify[0]["category"] == "runtime", "a repo's own broken import is its bug, not a missing dep"
    repo2 = make_repo(tmp_path / "two", {"mypkg/__init__.py": "import pina\n"})
    # pina is on the local source but neither declared nor guessable here: remove it from the source
    source = local_source(tmp_path / "two")
    for wheel in Path(source["PIP_FIND_LINKS"]).glob("pina-*"):
        wheel.unlink()
    done, events, report_path = run_agent(repo2, "--budget-s", "600", env_extra=source, forward=False)
    failures = json.loads(report_path.read_text())["baseline"]["failures"]
    assert [f["category"] for f in failures if f["step"] == "verify"] == ["deps_missing"]


def test_torchaudio_is_matched_to_the_resolved_torch(tmp_path):
    """Newer torchaudio releases no longer pin torch in their metadata, so one resolution pairs
    torch 2.3 with the newest torchaudio: pip check passes and the import dies on an undefined symbol."""
    source = local_source(tmp_path)
    wheels = Path(source["PIP_FIND_LINKS"])
    make_wheel(wheels, "torch", "2.3.0")
    make_wheel(wheels, "torch", "2.5.0")
    make_wheel(wheels, "torchaudio", "2.3.0", requires=("torch==2.3.0",))
    make_wheel(wheels, "torchaudio", "2.11.0")  # no torch requirement at all
    repo = make_repo(tmp_path, {"requirements.txt": "torch<=2.3\ntorchaudio\n", "main.py": "import torch, torchaudio\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    python = report["python_path"]
    assert installed(python, "torch") == "2.3.0" and installed(python, "torchaudio") == "2.3.0"
    assert done.returncode == 0, done.stdout[-3000:]
    assert any(e["type"] == "tool_call" and e["step"] == "install:companions" for e in events)


def test_a_companion_release_the_repo_pins_is_left_and_reported(tmp_path):
    source = local_source(tmp_path)
    wheels = Path(source["PIP_FIND_LINKS"])
    make_wheel(wheels, "torch", "2.3.0")
    make_wheel(wheels, "torchaudio", "2.11.0")
    repo = make_repo(tmp_path, {"requirements.txt": "torch==2.3.0\ntorchaudio==2.11.0\n", "main.py": "import torch\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    assert installed(report["python_path"], "torchaudio") == "2.11.0", "a declared pin is never replaced"
    assert done.returncode == 1
    assert any("torchaudio==2.3.* (to match torch) could not be installed with the repo's own torchaudio==2.11.0"
               in f["message"] for f in report["baseline"]["failures"])


def test_a_companion_range_the_repo_declares_still_gets_the_matching_release(tmp_path):
    source = local_source(tmp_path)
    wheels = Path(source["PIP_FIND_LINKS"])
    make_wheel(wheels, "torch", "2.3.0")
    make_wheel(wheels, "torchaudio", "2.3.0", requires=("torch==2.3.0",))
    make_wheel(wheels, "torchaudio", "2.11.0")
    repo = make_repo(tmp_path, {"requirements.txt": "torch<=2.3\ntorchaudio>=2.0.0\n", "main.py": "import torchaudio\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    assert installed(report["python_path"], "torchaudio") == "2.3.0"
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_declared_requirement_needing_an_unbuildable_release_goes_and_the_rest_resolve(tmp_path):
    """faster-whisper==0.10.1 needs av==10.*, which has no wheel for this Python and cannot be built
    without FFmpeg's headers: the declared requirement that needs it is dropped, and the rest (the repo
    itself among them) still resolve together."""
    source = local_source(tmp_path)
    wheels = Path(source["PIP_FIND_LINKS"])
    make_unbuildable_sdist(wheels, "cudaext", "1.0")
    make_wheel(wheels, "usesext", "1.0", requires=("cudaext==1.*",))
    repo = make_repo(tmp_path, {"requirements.txt": "usesext==1.0\npina>=2\n", "main.py": "import pina\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    assert installed(report["python_path"], "pina") == "2.0"
    installs = [e for e in events if e["type"] == "tool_call" and e["step"].startswith("install")]
    assert [e["step"] for e in installs] == ["install:declared"] * 3, "never one at a time"
    [failure] = report["baseline"]["failures"]
    assert failure["category"] == "native_extension" and "usesext==1.0" in failure["message"]
    assert any("usesext (it needs cudaext)" in e.get("text", "") for e in events if e["type"] == "message")


def make_unbuildable_sdist(directory: Path, name: str, version: str) -> Path:
    """An sdist whose in-tree build backend fails as a CUDA extension's does without torch: at
    "getting requirements to build wheel", before anything is built."""
    import io
    import tarfile

    root = f"{name}-{version}"
    files = {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "failing_backend"\nbackend-path = ["."]\n',
        f"{root}/failing_backend.py": "def get_requires_for_build_wheel(config_settings=None):\n"
                                      "    raise ModuleNotFoundError(\"No module named 'torch'\")\n",
    }
    path = directory / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_an_unbuildable_requirement_is_dropped_and_the_rest_resolved_together(tmp_path):
    source = local_source(tmp_path)
    make_unbuildable_sdist(Path(source["PIP_FIND_LINKS"]), "cudaext", "1.0")
    repo = make_repo(tmp_path, {"requirements.txt": "pina>=2\ncudaext\nfitsin\n",
                                "main.py": "import pina, fitsin\ntry:\n    import cudaext\nexcept ImportError:\n    pass\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    python = report["python_path"]
    assert installed(python, "pina") == "2.0" and installed(python, "fitsin") == "1.0"
    installs = [e["command"] for e in events if e["type"] == "tool_call" and e["step"].startswith("install")]
    assert len(installs) == 3, "wheels only, then without it: each in one call, never one at a time"
    assert "--only-binary=cudaext" in installs[1] and "cudaext" in installs[1]
    assert "cudaext" not in installs[2] and {"pina>=2", "fitsin"} <= set(installs[2])
    assert [(f["step"], f["category"]) for f in report["baseline"]["failures"]] == [("install:declared", "native_extension")]
    assert "cudaext could not be built here and has no release with a wheel" in report["baseline"]["failures"][0]["message"]
    assert done.returncode == 1


def test_a_dependency_that_cannot_be_built_is_taken_as_a_wheel(tmp_path):
    """A transitive sdist whose build fails here (PyAV without FFmpeg's headers, say) while an older
    release has a wheel: the resolution is done again asking for wheels only, not given up."""
    source = local_source(tmp_path)
    wheels = Path(source["PIP_FIND_LINKS"])
    make_wheel(wheels, "cudaext", "1.0")
    make_unbuildable_sdist(wheels, "cudaext", "2.0")
    make_wheel(wheels, "usesext", "1.0", requires=("cudaext",))
    repo = make_repo(tmp_path, {"requirements.txt": "usesext\n", "main.py": "import usesext, cudaext\n"})
    done, events, report_path = run_agent(repo, "--budget-s", "600", env_extra=source, forward=False)
    report = json.loads(report_path.read_text())
    assert installed(report["python_path"], "cudaext") == "1.0" and installed(report["python_path"], "usesext") == "1.0"
    assert done.returncode == 0, done.stdout[-3000:]
    assert any(e["type"] == "message" and "release that has a wheel" in e["text"] for e in events)
