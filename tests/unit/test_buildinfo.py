"""The build-configuration reader: which modules a repo declares as compiled, read from its files at the
pinned commit (setup.py, pyproject.toml, CMakeLists.txt, meson.build, Cargo.toml), never executed."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from resenv.probes.buildinfo import CompiledModule, compiled_modules, declared_match, module_names, wanted
from resenv.probes.census import files_at_commit, import_census


def tree(files: dict[str, str]) -> dict[str, bytes]:
    """{path: content} as files_at_commit returns it, each text dedented."""
    return {name: textwrap.dedent(text).encode() for name, text in files.items()}


def names(files: dict[str, bytes]) -> set[str]:
    return set(module_names(files))


# --- setup.py ---------------------------------------------------------------------------------


SETUP_PY = """\
    import pathlib
    pathlib.Path("EXECUTED").write_text("setup.py ran")  # must never happen
    from setuptools import Extension, setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
    from pybind11.setup_helpers import Pybind11Extension
    from setuptools_rust import RustExtension
    from Cython.Build import cythonize

    FAST = "pkg._const_named"

    def get_extensions():
        return [CUDAExtension(name="pkg_cuda", sources=["k.cu"]), CppExtension("ops.nms_cpp", ["nms.cpp"])]

    setup(
        name="pkg",
        ext_modules=[Extension("pkg._fast", ["pkg/_fast.c"]), Extension(FAST, ["c.c"]),
                     Pybind11Extension("pkg.pyb", ["pyb.cpp"]), *get_extensions()]
                    + cythonize("pkg/speedup.pyx") + cythonize(["src/mod/*.pyx"])
                    + cythonize(Extension("pkg.*", ["pkg/*.pyx"])),
        rust_extensions=[RustExtension("pkg._rs", "Cargo.toml")],
        cmdclass={"build_ext": BuildExtension},
    )
"""


def test_setup_py_extensions_of_every_kind_without_executing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = tree({"setup.py": SETUP_PY, "pkg/__init__.py": "", "pkg/speedup.pyx": "", "pkg/other.pyx": "",
                 "src/mod/a.pyx": "", "src/mod/b.pyx": ""})
    assert names(files) == {"pkg._fast", "pkg._const_named", "pkg_cuda", "ops.nms_cpp", "pkg.pyb", "pkg._rs",
                            "pkg.speedup", "pkg.other", "a", "b"}
    assert not (tmp_path / "EXECUTED").exists()
    found = {m.name: m for m in compiled_modules(files)}
    assert found["pkg._fast"] == CompiledModule("pkg._fast", "setup.py:16", "Extension")
    assert found["a"] == CompiledModule("a", "setup.py:18", "cythonize")  # src/mod is no package


def test_setup_py_in_a_subdirectory_is_read_relative_to_itself():
    # research repos often build their CUDA ops from a setup.py of their own, deep in the tree
    files = tree({"lib/pointnet2/setup.py": """\
        from setuptools import setup
        from torch.utils.cpp_extension import CUDAExtension
        setup(name="pointnet2", ext_modules=[CUDAExtension("pointnet2_cuda", ["src/a.cu"])])
    """, "ops/setup.py": """\
        from Cython.Build import cythonize
        setup(ext_modules=cythonize("nms/cpu_nms.pyx"))
    """, "ops/nms/__init__.py": "", "ops/nms/cpu_nms.pyx": ""})
    assert names(files) == {"pointnet2_cuda", "nms.cpu_nms"}
    assert {m.declared_in for m in compiled_modules(files)} == {"lib/pointnet2/setup.py:3", "ops/setup.py:2"}


def test_unreadable_setup_py_and_non_literal_names_are_skipped():
    files = tree({"setup.py": "setup(ext_modules=[Extension(name_for('x'), ['x.c'])]\n",  # unbalanced
                 "tools/setup.py": "setup(ext_modules=[Extension(f'pkg.{n}', ['x.c']) for n in NAMES])\n"})
    assert names(files) == set()


# --- pyproject.toml and Cargo.toml -----------------------------------------------------------


def test_pyproject_setuptools_ext_modules_and_maturin():
    files = tree({"pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=74.1"]
        build-backend = "setuptools.build_meta"
        [tool.setuptools]
        ext-modules = [{name = "pkg.spam", sources = ["spam.c"]}, {name = "pkg.eggs", sources = ["eggs.c"]}]
    """, "rust/pyproject.toml": """\
        [build-system]
        build-backend = "maturin"
        [tool.maturin]
        module-name = "fancy._rust"
    """})
    assert names(files) == {"pkg.spam", "pkg.eggs", "fancy._rust"}


def test_maturin_without_module_name_uses_the_cargo_lib_name():
    files = tree({"pyproject.toml": """\
        [build-system]
        build-backend = "maturin"
    """, "Cargo.toml": """\
        [package]
        name = "my-crate"
        [lib]
        name = "my_fast_lib"
    """, "other/pyproject.toml": """\
        [build-system]
        build-backend = "maturin"
        [tool.maturin]
        manifest-path = "rs/Cargo.toml"
    """, "other/rs/Cargo.toml": """\
        [package]
        name = "rusty-thing"
    """})
    assert names(files) == {"my_fast_lib", "rusty_thing"}


# --- CMake and meson --------------------------------------------------------------------------


CMAKE = """\
    cmake_minimum_required(VERSION 3.18)
    project(projmod LANGUAGES CXX)
    find_package(pybind11 CONFIG REQUIRED)
    # pybind11_add_module(commented_out src/x.cpp)
    pybind11_add_module(_core MODULE src/main.cpp)
    PYBIND11_ADD_MODULE(shouty src/s.cpp)
    nanobind_add_module(
      nb_ext   # a comment inside the call
      NB_STATIC src/nb.cpp)
    python_add_library(_lib MODULE WITH_SOABI src/lib.c)
    Python_add_library(${SKBUILD_PROJECT_NAME} MODULE src/proj.c)
    Python3_add_library(static_helper STATIC src/helper.c)
    add_library(plain_static STATIC src/x.c)
    add_library(loadable MODULE src/y.c)
    set(EXT_NAME "from_var")
    pybind11_add_module(${EXT_NAME} src/v.cpp)
    pybind11_add_module(${PROJECT_NAME} src/p.cpp)
    pybind11_add_module(${NOT_SET_ANYWHERE} src/u.cpp)
    message(STATUS "pybind11_add_module(in_a_string x.cpp)")
"""


def test_cmake_targets_of_pybind11_nanobind_python_and_module_libraries():
    files = tree({"pyproject.toml": """\
        [build-system]
        build-backend = "scikit_build_core.build"
        [project]
        name = "my-proj"
    """, "CMakeLists.txt": CMAKE})
    assert names(files) == {"_core", "shouty", "nb_ext", "_lib", "my_proj", "loadable", "from_var", "projmod"}
    via = {m.name: m.via for m in compiled_modules(files)}
    assert via["_core"] == "pybind11_add_module" and via["loadable"] == "add_library MODULE"
    assert {m.name: m.declared_in for m in compiled_modules(files)}["_core"] == "CMakeLists.txt:5"


def test_cmake_target_anywhere_in_the_tree():
    files = tree({"csrc/ops/CMakeLists.txt": "pybind11_add_module(deep_ops ops.cpp)\n"})
    assert names(files) == {"deep_ops"}


def test_meson_extension_modules_with_subdir():
    files = tree({"meson.build": """\
        project('pkg', 'c')
        py = import('python').find_installation(pure: false)
        # py.extension_module('commented', 'c.c')
        py.extension_module('_speed', 'speed.c', install: true, subdir: 'pkg/sub')
        py3.extension_module(
          'other',
          ['other.c'],
          install: true,
        )
        python.extension_module(name_from_var, 'v.c')
    """})
    assert names(files) == {"pkg.sub._speed", "other"}


# --- matching -------------------------------------------------------------------------------


def test_declared_match_by_whole_name_or_last_component():
    declared = {"pkg._fast", "fastops"}
    assert declared_match("pkg._fast", declared) == "pkg._fast"
    assert declared_match("fastops", declared) == "fastops"
    assert declared_match("pkg.fastops", declared) == "fastops"  # a CMake target built inside pkg
    assert declared_match("pkg", declared) is None
    assert declared_match("pkg.fast", declared) is None
    assert declared_match("_fast", declared) is None  # only the failing module's last component is matched
    assert declared_match("anything", set()) is None


# --- the pinned commit ------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_files_at_commit_carries_the_build_files_and_the_census_ignores_them(tmp_path):
    work = tmp_path / "work"
    (work / "csrc").mkdir(parents=True)
    (work / "main.py").write_text("import fastops\n")
    (work / "CMakeLists.txt").write_text("add_subdirectory(csrc)\n")
    (work / "csrc" / "CMakeLists.txt").write_text("pybind11_add_module(fastops ops.cpp)\n")
    (work / "csrc" / "ops.cpp").write_text("// not a build file\n")
    (work / "meson.build").write_text("py.extension_module('mesonmod', 'm.c')\n")
    (work / "README.md").write_text("# hi\n")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "one")
    first = _git(work, "rev-parse", "HEAD")
    (work / "csrc" / "CMakeLists.txt").write_text("# the agent's edit\n")
    _git(work, "commit", "-qam", "two")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)

    files = files_at_commit(bare, first)
    assert sorted(files) == ["CMakeLists.txt", "csrc/CMakeLists.txt", "main.py", "meson.build"]
    assert names(files) == {"fastops", "mesonmod"}
    census = import_census(files)
    assert census.files == ["main.py"] and census.names() == ["fastops"]
    only_build = files_at_commit(bare, first, select=wanted)
    assert sorted(only_build) == ["CMakeLists.txt", "csrc/CMakeLists.txt", "meson.build"]
    assert names(dict(files_at_commit(bare, "HEAD"))) == {"mesonmod"}
