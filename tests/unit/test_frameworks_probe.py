"""The frameworks probe (probes/kit/frameworks.py) observes EVERY framework of the interpreter, run for
real here over stand-in torch / jax / tensorflow packages; and every kit script stays stdlib-only
Python 3.6 syntax."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resenv.probes.kit import SCRIPTS, script_source

FAKE_TORCH = '''
__version__ = "2.3.1+cpu"
class version:
    cuda = None
class _nccl:
    @staticmethod
    def version():
        return (2, 20, 5)
class cuda:
    nccl = _nccl
    @staticmethod
    def is_available():
        return False
    @staticmethod
    def device_count():
        return 0
    @staticmethod
    def get_arch_list():
        return []
'''
FAKE_JAX = '''
__version__ = "0.4.30"
class _Device:
    platform = "gpu"
    device_kind = "NVIDIA H200"
def devices():
    return [_Device()]
'''
FAKE_JAX_CUDA = '''
def cuda_runtime_get_version():
    return 12030
'''


def run_probe(path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path))
    script = path / "frameworks.py"
    script.write_bytes(script_source("frameworks.py"))
    out = subprocess.run([sys.executable, "-B", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def package(root: Path, name: str, init: str, **modules: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(init)
    for module, text in modules.items():
        (root / name / f"{module}.py").write_text(text)


def test_every_framework_is_observed_not_only_the_first(tmp_path: Path) -> None:
    package(tmp_path, "torch", FAKE_TORCH)
    package(tmp_path, "jax", FAKE_JAX)
    (tmp_path / "jax" / "_src" / "lib").mkdir(parents=True)
    (tmp_path / "jax" / "_src" / "__init__.py").write_text("")
    (tmp_path / "jax" / "_src" / "lib" / "__init__.py").write_text("from . import cuda_versions\n")
    (tmp_path / "jax" / "_src" / "lib" / "cuda_versions.py").write_text(FAKE_JAX_CUDA)
    found = run_probe(tmp_path)["frameworks"]
    assert set(found) == {"torch", "jax", "tensorflow"}
    torch, jax, tf = found["torch"], found["jax"], found["tensorflow"]
    assert (torch["installed"], torch["importable"], torch["version"], torch["cuda_build"]) == (True, True, "2.3.1+cpu", None)
    assert (torch["cuda_available"], torch["device_count"], torch["error"]) == (False, 0, None)
    assert (jax["importable"], jax["version"], jax["cuda_build"]) == (True, "0.4.30", "12.3")
    assert (jax["cuda_available"], jax["device_count"], jax["devices"]) == (True, 1, ["NVIDIA H200"])
    assert (tf["installed"], tf["importable"], tf["version"]) == (False, False, None)
    assert tf["error"].startswith("ModuleNotFoundError")


def test_a_broken_or_crashing_framework_does_not_hide_the_others(tmp_path: Path) -> None:
    package(tmp_path, "torch", "print('noise on stdout')\nraise OSError('libcudart.so.12: cannot open shared object file')\n")
    package(tmp_path, "jax", "import os\nos._exit(3)\n")
    package(tmp_path, "tensorflow", "__version__ = '2.16.1'\n", sysconfig="def get_build_info():\n    return {'cuda_version': '12.3'}\n")
    (tmp_path / "tensorflow" / "__init__.py").write_text(
        "__version__ = '2.16.1'\nfrom . import sysconfig\nclass config:\n"
        "    @staticmethod\n    def list_physical_devices(kind):\n        raise RuntimeError('CUDA driver too old')\n")
    found = run_probe(tmp_path)["frameworks"]
    torch, jax, tf = found["torch"], found["jax"], found["tensorflow"]
    assert (torch["installed"], torch["importable"]) == (True, False)
    assert torch["error"] == "OSError: libcudart.so.12: cannot open shared object file"
    assert (jax["installed"], jax["importable"]) == (True, False) and "exit status 3" in jax["error"]
    # measured up to the failure: the build is known, what the failing call would have said is not
    assert (tf["importable"], tf["version"], tf["cuda_build"], tf["cuda_available"]) == (True, "2.16.1", "12.3", None)
    assert tf["error"] == "RuntimeError: CUDA driver too old"


@pytest.mark.parametrize("name", SCRIPTS)
def test_kit_scripts_are_stdlib_only_python_3_6(name: str) -> None:
    source = script_source(name).decode()
    tree = ast.parse(source, feature_version=(3, 6))
    assert "from __future__ import annotations" not in source  # 3.7+
    stdlib = set(sys.stdlib_module_names)
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        for module in names:
            top = module.split(".")[0]
            # the frameworks are what the probe measures; the metadata backport is optional
            assert top in stdlib or top in {"torch", "jax", "jaxlib", "tensorflow", "importlib_metadata"}, (name, module)
