"""What the bubblewrap command line binds: the work dir, declared paths, and nothing above the work dir."""

from __future__ import annotations

from pathlib import Path

from resenv.engine.run.lifecycle import command_files
from resenv.engine.sandbox.isolation import Isolation, env_paths


def binds(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


def test_the_work_dir_is_bound_read_write_and_a_folder_above_it_never(tmp_path: Path) -> None:
    work = tmp_path / "data" / "run" / "jobs" / "j" / "work"
    work.mkdir(parents=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    env = {"PIP_FIND_LINKS": str(wheels), "LEAK": str(tmp_path / "data"), "HOME": str(work / "home"),
           "PATH": f"/usr/bin:{tmp_path}"}
    caches, named = env_paths(env, work)
    argv = Isolation(network="none").argv(["true"], workdir=work, cwd=work, read_only=named, writable=caches)
    assert str(work) in binds(argv, "--bind")
    assert str(wheels) in binds(argv, "--ro-bind")
    assert str(tmp_path / "data") not in binds(argv, "--ro-bind") + binds(argv, "--bind")
    assert str(tmp_path) not in binds(argv, "--ro-bind")  # PATH never names a folder to show
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv
    assert argv[-1] == "true"


def test_cache_variables_are_writable_and_other_paths_read_only(tmp_path: Path) -> None:
    work = tmp_path / "work"
    writable, readable = env_paths({"PIP_CACHE_DIR": str(tmp_path / "pip"), "SSL_CERT_FILE": "/etc/ssl/x",
                                    "CODE": "x" * 5000, "REL": "relative/path"}, work)
    assert writable == [tmp_path / "pip"]
    assert all(str(path).startswith("/etc") for path in readable)


def test_a_configured_command_shows_its_own_files_and_survives_long_words(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text("")
    work = tmp_path / "work"
    found = command_files(["sh", "-c", f"python3 -c \"{'x' * 600}\" {script} {work}/repo db={tmp_path}"], work)
    assert found == [script]


def test_an_npm_cli_shows_its_whole_node_modules_folder(tmp_path: Path) -> None:
    package = tmp_path / "agents" / "node_modules" / "@x" / "cli"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "cli.js").write_text("")
    link = tmp_path / "agents" / "node_modules" / ".bin" / "cli"
    link.parent.mkdir()
    link.symlink_to("../@x/cli/bin/cli.js")
    found = command_files([str(link)], tmp_path / "work")
    assert tmp_path / "agents" / "node_modules" in found and package / "bin" / "cli.js" in found


def test_a_bubblewrap_that_cannot_make_namespaces_is_one_clear_line(tmp_path: Path) -> None:
    import pytest

    from resenv.engine.sandbox.isolation import IsolationUnavailable, check_available

    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(IsolationUnavailable, match="No permissions to create new namespace.*unsafe-process"):
        check_available(str(broken))


def test_folders_kept_in_memory_are_tmpfs_mounted_over_the_work_dir(tmp_path: Path) -> None:
    work = tmp_path / "job" / "work"
    state = work / "home" / ".codex"
    argv = Isolation().argv(["true"], workdir=work, cwd=work, in_memory=[state])
    bind = argv.index("--bind", argv.index(str(work)) - 1)
    tmpfs = argv.index(str(state))
    assert argv[tmpfs - 1] == "--tmpfs" and argv[tmpfs - 3:tmpfs - 1] == ["--perms", "01777"]
    assert bind < tmpfs < argv.index("--chdir")  # mounted over the bound work dir, not under it
