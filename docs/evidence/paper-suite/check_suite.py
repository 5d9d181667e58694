"""Check the `paper` suite of benchmark.yaml against read-only git copies of its 44 repositories.

For every repo of the suite, given a directory of bare git mirrors (``<owner>+<name>/repo``, as the
development machine keeps them), this script

(a) checks that every file, directory and ``-m`` module an entrypoint command names exists in the
    repo's git tree at its pinned commit (or, where the mirror lacks that commit, at the mirror's
    newest commit, marked as such: that is NOT a verification of the pinned commit);
(b) computes resenv's own C0 import census (``resenv.probes.census``) at the pinned commit, the way
    the engine does (``files_at_commit`` on the bare repository), and cross-checks it against the
    same census over a ``git archive`` export of that commit; it prints the paper-compatible total
    (stdlib + repo + third-party modules) and the third-party-only total beside the paper's total.

Usage (the project's venv; nothing is written into the mirrors)::

    .venv/bin/python docs/evidence/paper-suite/check_suite.py --mirror /work/.mirror \\
        --csv ../shared/paper_repos.csv [--census-out suites/paper/census.json] [--repo ID ...]

It exits 1 when a named file or module is missing from a tree it could read. Its output is kept in
``docs/evidence/paper-suite/check-output.txt``: CI has no network to the code hosts, so that file
is the evidence that each entrypoint was checked against its repository.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TextIO

from resenv.engine.spec import TEMPLATE_FIELDS, TIERS, Benchmark, Entrypoint, GitSource, RepoTask, load_benchmark
from resenv.probes.census import STDLIB, Census, files_at_commit, files_in_dir, import_census

ROOT = Path(__file__).resolve().parents[3]

# torchrun options that take no value (every other ``--option`` takes one, unless written ``--o=v``).
TORCHRUN_FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                            "--run_path"})
# pytest options that take a value.
PYTEST_VALUE_OPTIONS = frozenset({"-k", "-m", "-p", "-c", "--rootdir", "--maxfail", "--timeout"})
# A value looks like a path into the repo when it has a slash or one of these suffixes.
PATH_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".json", ".jpg", ".jpeg", ".png", ".wav", ".mp3", ".flac",
                 ".tsv", ".csv", ".txt", ".toml", ".pth", ".pt", ".ckpt", ".safetensors", ".h5", ".mp4")
# An option whose name matches this names something the command writes, not something it reads.
OUTPUT_OPTION = re.compile(r"out|save|result|dump|log_dir|logdir|work[-_]dir", re.IGNORECASE)
SHELL_OPERATORS = frozenset({"&&", "||", ";", "&", "|"})

# Repositories renamed on the code host: their git copy is kept under the former name (the pinned
# commit is in it, which is what makes it the same repository).
MIRROR_ALIASES: dict[str, str] = {
    "FunAudioLLM/FunMusic": "FunAudioLLM/InspireMusic",
    "huggingface/finetrainers": "a-r-r-o-w/finetrainers",
}
# Values an entrypoint names that are deliberately not in the repo's tree, with why. Keys are
# (repo id, value as written). Everything else a command names must exist in the tree.
NOT_IN_TREE: dict[tuple[str, str], str] = {
    ("Olympus", "ckpts/Olympus"): "asset to pin: hf Yuanze/Olympus (assets.md)",
    ("chitu", "ckpts/Qwen2-7B-Instruct"): "asset to pin: hf Qwen/Qwen2-7B-Instruct (assets.md)",
    ("FunMusic", "pretrained_models/InspireMusic-Base"): "asset to pin: hf FunAudioLLM/InspireMusic-Base (assets.md)",
    ("FunMusic", "exp/inspiremusic"): "written by the command (-r, its result directory)",
    ("FunMusic", "exp/inspiremusic-c4"): "written by the command (-r, its result directory)",
}


@dataclass
class Ref:
    """One thing an entrypoint command names: a file/dir or a module, relative to the repo root."""

    kind: str        # "file" | "dir" | "module" | "code" | "output" | "external"
    value: str       # as resolved against the command's working directory (posix, repo-relative)
    written: str     # as written in the command
    status: str = ""  # "ok", "MISSING", "asset", "not in tree", "external", "output"
    detail: str = ""
    cwd: str = ""     # the command's working directory, relative to the repo root


@dataclass
class Tree:
    """The file paths of one commit of a bare repository (directories derived from them)."""

    commit: str
    label: str                       # "pinned commit" or "mirror HEAD <sha> (<date>), NOT the pinned commit"
    files: frozenset[str]
    dirs: frozenset[str] = field(default_factory=frozenset)

    def has_file(self, path: str) -> bool:
        return path in self.files

    def has_dir(self, path: str) -> bool:
        return path in self.dirs or path in ("", ".")


# ---------------------------------------------------------------------------------------------------
# Git


def git_bytes(git_dir: Path, *args: str) -> bytes:
    """Run a read-only git command on `git_dir` and return its stdout (raises on failure)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
           "LANG": "C.UTF-8", "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, env=env, timeout=600,
                          check=True)
    return done.stdout


def git(git_dir: Path, *args: str) -> str:
    """`git_bytes` decoded as UTF-8."""
    return git_bytes(git_dir, *args).decode("utf-8", errors="replace")


def mirror_git_dir(mirror: Path, slug: str) -> Path | None:
    """The bare git directory of `slug` ("owner/name") under `mirror`, or None when there is none."""
    base = mirror / MIRROR_ALIASES.get(slug, slug).replace("/", "+")
    for candidate in (base / "repo" / ".git", base / "repo", base):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def has_commit(git_dir: Path, commit: str) -> bool:
    """Whether the copy holds `commit` (a snapshot may be older than the pin, or on another history)."""
    try:
        git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}")
        return True
    except subprocess.CalledProcessError:
        return False


def read_tree(git_dir: Path, commit: str, label: str) -> Tree:
    """Every blob path of `commit` (symlinks included: they exist in a checkout too)."""
    listing = git_bytes(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit)
    files: set[str] = set()
    for entry in listing.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        if path and meta.split()[1:2] == [b"blob"]:
            files.add(path.decode("utf-8", errors="replace"))
    dirs = {str(PurePosixPath(p).parent) for p in files}
    for d in list(dirs):
        dirs.update(str(parent) for parent in PurePosixPath(d).parents)
    dirs.discard(".")
    return Tree(commit=commit, label=label, files=frozenset(files), dirs=frozenset(dirs))


def archive_census(git_dir: Path, commit: str, tree: Tree) -> Census:
    """The census of a ``git archive`` export of `commit` (the cross-check of `files_at_commit`).

    Only the files the census reads are exported (``.py`` and packaging files): the copies here
    may lack some large blobs (media, data), which would make a whole-tree archive fail.
    """
    suffixes = {"*.py": ".py", "pyproject.toml": "pyproject.toml", "setup.cfg": "setup.cfg"}
    # git archive refuses a pathspec that matches nothing
    pathspecs = [f":(glob)**/{glob}" for glob, suffix in suffixes.items()
                 if any(path.endswith(suffix) for path in tree.files)]
    if not pathspecs:
        return import_census({})
    with tempfile.TemporaryDirectory(prefix="resenv-paper-") as tmp:
        data = git_bytes(git_dir, "archive", "--format=tar", commit, "--", *pathspecs)
        out = Path(tmp) / "tree"
        out.mkdir()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(out, filter="tar")
        return import_census(files_in_dir(out))


# ---------------------------------------------------------------------------------------------------
# Commands -> references


def render_for_check(entrypoint: Entrypoint) -> str:
    """The entrypoint's shell command with placeholders filled by recognisable stand-ins."""
    values = {name: f"/resenv/{name}" for name in TEMPLATE_FIELDS} | {"python": "PYTHON", "ngpus": "2",
                                                                      "gpus": "0,1"}
    argv = entrypoint.argv(values)
    return argv[2] if argv[:2] in (["sh", "-c"], ["/bin/sh", "-c"]) else shlex.join(argv)


def segments(command: str) -> list[list[str]]:
    """Split a shell command into simple commands (lists of words) at ``&&``, ``;``, ``&``, ``|``."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    out: list[list[str]] = [[]]
    for token in lexer:
        if token in SHELL_OPERATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [seg for seg in out if seg]


def join(cwd: str, path: str) -> str:
    """`path` relative to the repo root, given the command's working directory `cwd`."""
    joined = os.path.normpath(os.path.join(cwd, path)).replace(os.sep, "/")
    return "" if joined == "." else joined


def looks_like_path(value: str) -> bool:
    """A relative path into the repo (not an option, URL or absolute path)."""
    if not value or value.startswith("-") or "://" in value or value.startswith("/"):
        return False
    return "/" in value or value.lower().endswith(PATH_SUFFIXES)


def scan_args(args: Sequence[str], cwd: str) -> list[Ref]:
    """Paths among a program's arguments: inputs to check, or outputs (after --out/--save-like options)."""
    refs: list[Ref] = []
    option: str | None = None
    config_dir: str | None = None
    for arg in args:
        name, value = (arg.split("=", 1) if arg.startswith("-") and "=" in arg else (None, arg))
        if arg.startswith("-") and name is None:
            option = arg
            continue
        opt = name or option
        option = None
        if opt in ("--config-dir", "--config_dir"):
            config_dir = value
        if opt in ("--config-name", "--config_name") and config_dir is not None:
            value = f"{config_dir.rstrip('/')}/{value}"
        elif "=" in value and not value.startswith("-") and name is None:
            _, value = value.split("=", 1)  # hydra-style key=value override
        if not looks_like_path(value):
            continue
        kind = "output" if opt and OUTPUT_OPTION.search(opt) else "file"
        refs.append(Ref(kind=kind, value=join(cwd, value), written=value))
    return refs


def python_refs(args: Sequence[str], cwd: str) -> list[Ref]:
    """References of ``PYTHON <args>``: a script, ``-m module`` or ``-c code``, then the program's args.

    ``-m torch.distributed.run`` and ``-m pytest`` belong to the environment: their own arguments are
    parsed for what they run. Any other ``-m`` module must be the repo's."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-c":
            return [Ref(kind="code", value=args[i + 1] if i + 1 < len(args) else "", written="-c", cwd=cwd)]
        if arg == "-m":
            module = args[i + 1]
            rest = list(args[i + 2:])
            if module == "torch.distributed.run":
                return [Ref(kind="external", value=module, written=module)] + torchrun_refs(rest, cwd)
            if module == "pytest":
                return [Ref(kind="external", value=module, written=module)] + pytest_refs(rest, cwd)
            return [Ref(kind="module", value=module, written=module, cwd=cwd)] + scan_args(rest, cwd)
        if arg in ("-X", "-W"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return [Ref(kind="file", value=join(cwd, arg), written=arg)] + scan_args(args[i + 1:], cwd)
    return []


def torchrun_refs(args: Sequence[str], cwd: str) -> list[Ref]:
    """References of ``torch.distributed.run [options] (script | -m module | --no-python prog) args``."""
    i = 0
    module_mode = no_python = False
    while i < len(args):
        arg = args[i]
        if arg in ("-m", "--module"):
            module_mode = True
            i += 1
        elif arg in ("--no-python", "--no_python"):
            no_python = True
            i += 1
        elif arg in TORCHRUN_FLAGS or (arg.startswith("-") and "=" in arg):
            i += 1
        elif arg.startswith("-"):
            i += 2
        else:
            break
    rest = list(args[i:])
    if not rest:
        return []
    if no_python:
        return command_refs(rest, cwd)[1]
    if module_mode:
        return python_refs(["-m", *rest], cwd)
    return python_refs(rest, cwd)


def pytest_refs(args: Sequence[str], cwd: str) -> list[Ref]:
    """Test files and directories given to pytest (node ids ``file::test`` are cut at ``::``)."""
    refs: list[Ref] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in PYTEST_VALUE_OPTIONS:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        path = arg.split("::", 1)[0]
        refs.append(Ref(kind="file", value=join(cwd, path), written=path))
    return refs


def command_refs(words: Sequence[str], cwd: str) -> tuple[str, list[Ref]]:
    """(new working directory, references) of one simple command."""
    words = list(words)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)  # VAR=value prefixes
    if not words:
        return cwd, []
    program, args = words[0], words[1:]
    if program.startswith("$("):
        return cwd, [Ref(kind="external", value=" ".join(words[:2]), written=program)]
    if program == "cd":
        target = join(cwd, args[0]) if args else ""
        return target, [Ref(kind="dir", value=target, written=args[0] if args else "")]
    if program == "PYTHON":
        return cwd, python_refs(args, cwd)
    if program in ("bash", "sh"):
        positional = [a for a in args if not a.startswith("-")]
        if not positional:
            return cwd, []
        script = positional[0]
        return cwd, [Ref(kind="file", value=join(cwd, script), written=script)] + scan_args(
            args[args.index(script) + 1:], cwd)
    return cwd, [Ref(kind="external", value=program, written=program)]


def entrypoint_refs(entrypoint: Entrypoint) -> list[Ref]:
    """Everything one entrypoint names, in order."""
    cwd = ""
    refs: list[Ref] = []
    for words in segments(render_for_check(entrypoint)):
        cwd, found = command_refs(words, cwd)
        refs.extend(found)
    return refs


# ---------------------------------------------------------------------------------------------------
# Checking references against a tree


def module_paths(module: str, roots: Iterable[str]) -> list[str]:
    """Candidate files that make `module` importable (or runnable with -m) from each root."""
    rel = module.replace(".", "/")
    out = []
    for root in roots:
        base = f"{root}/{rel}" if root else rel
        out += [f"{base}.py", f"{base}/__main__.py", f"{base}/__init__.py"]
    return out


def asset_dests(repo: RepoTask) -> list[str]:
    """Where the repo's declared assets are linked into the checkout."""
    return [asset.dest.strip("/") for asset in repo.assets if getattr(asset, "dest", None)]


def check_ref(ref: Ref, tree: Tree, repo: RepoTask, produced: set[str]) -> Ref:
    """Fill in `ref.status` / `ref.detail` against `tree`."""
    if ref.kind == "external":
        ref.status, ref.detail = "external", "provided by the environment, not the repo"
    elif ref.kind == "output":
        produced.add(ref.value)
        ref.status, ref.detail = "output", "written by the command"
    elif ref.kind == "code":
        ref.status, ref.detail = code_status(ref.value, tree, ref.cwd)
    elif ref.kind == "module":
        roots = ["", "src"] if not ref.cwd else [ref.cwd, join(ref.cwd, "src"), "", "src"]
        hits = [p for p in module_paths(ref.value, roots) if tree.has_file(p)]
        if hits:
            ref.status, ref.detail = "ok", hits[0]
        else:
            ref.status, ref.detail = "MISSING", "no module file under the repo root or src/"
    else:
        path = ref.value
        dests = asset_dests(repo)
        not_in_tree = NOT_IN_TREE.get((repo.id, ref.written))
        if ref.kind == "dir" and tree.has_dir(path) or ref.kind == "file" and (tree.has_file(path) or tree.has_dir(path)):
            ref.status = "ok"
        elif any(path == d or path.startswith(d + "/") for d in dests):
            ref.status, ref.detail = "asset", "a declared asset's destination"
        elif any(path == p or path.startswith(p + "/") for p in produced):
            ref.status, ref.detail = "output", "written by an earlier command"
        elif not_in_tree:
            ref.status, ref.detail = "not in tree", not_in_tree
        else:
            ref.status, ref.detail = "MISSING", "not in the tree"
    return ref


def code_status(code: str, tree: Tree, cwd: str) -> tuple[str, str]:
    """``-c`` code: it must import at least one module that the repo's tree provides."""
    try:
        parsed = ast.parse(code)
    except SyntaxError as exc:
        return "MISSING", f"inline code does not parse: {exc}"
    names: set[str] = set()
    for node in ast.walk(parsed):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    roots = [cwd, "", "src"]
    repo = sorted(n for n in names if any(tree.has_file(p) for p in module_paths(n, roots))
                  or any(tree.has_dir(join(root, n)) for root in roots))
    other = sorted(n for n in names - set(repo) if n not in STDLIB)
    if not repo:
        return "MISSING", f"inline code imports no module of the repo (imports: {', '.join(sorted(names)) or 'none'})"
    return "ok", f"imports the repo's {', '.join(repo)}" + (f"; third-party {', '.join(other)}" if other else "")


# ---------------------------------------------------------------------------------------------------
# The report


@dataclass
class RepoResult:
    repo: RepoTask
    slug: str
    tree: Tree | None
    census: Census | None
    archive_agrees: bool | None
    refs: dict[str, list[Ref]]
    note: str = ""

    @property
    def missing(self) -> list[tuple[str, Ref]]:
        return [(tier, r) for tier, refs in self.refs.items() for r in refs if r.status == "MISSING"]

    @property
    def exact(self) -> bool:
        return self.tree is not None and self.tree.label.startswith("pinned commit")


def check_repo(repo: RepoTask, mirror: Path, *, archive: bool) -> RepoResult:
    """Check one repo of the suite against its mirror."""
    assert isinstance(repo.source, GitSource)
    slug = repo.source.git.removeprefix("https://github.com/")
    commit = repo.source.commit
    git_dir = mirror_git_dir(mirror, slug)
    if git_dir is None:
        return RepoResult(repo, slug, None, None, None, {}, note="no git copy of this repository could be had")
    if has_commit(git_dir, commit):
        counted, label = commit, "pinned commit"
        if slug in MIRROR_ALIASES:
            label += f" (copy stored under the former name {MIRROR_ALIASES[slug]})"
    else:
        counted = git(git_dir, "rev-parse", "HEAD").strip()
        date = git(git_dir, "log", "-1", "--format=%cs", counted).strip()
        label = f"mirror HEAD {counted[:12]} ({date}), NOT the pinned commit (absent from the copy)"
    tree = read_tree(git_dir, counted, label)
    census = import_census(files_at_commit(git_dir, counted))
    agrees = None
    note = ""
    if archive:
        other = archive_census(git_dir, counted, tree)
        agrees = [(m.name, m.kind) for m in other.modules] == [(m.name, m.kind) for m in census.modules]
        only = sorted(set(census.files) ^ set(other.files))
        if only:  # files_in_dir skips cache dirs (.ipynb_checkpoints, ...) that files_at_commit reads
            note = f"files read by only one of the two readers: {', '.join(only)}"
    refs: dict[str, list[Ref]] = {}
    for tier in TIERS:
        entrypoint = repo.tiers()[tier]
        if isinstance(entrypoint, Entrypoint):
            produced: set[str] = set()
            refs[tier] = [check_ref(r, tree, repo, produced) for r in entrypoint_refs(entrypoint)]
    return RepoResult(repo, slug, tree, census, agrees, refs, note=note)


def print_repo(result: RepoResult, paper_total: int | None, out: TextIO) -> None:
    """One repo's section of the report: the tree read, each entrypoint's references, the census."""
    repo = result.repo
    assert isinstance(repo.source, GitSource)
    print(f"## {result.slug} @ {repo.source.commit} (id {repo.id})", file=out)
    if result.tree is None:
        print(f"  tree: none ({result.note}); nothing checked", file=out)
    else:
        print(f"  tree: {result.tree.label}; {len(result.tree.files)} files", file=out)
    for tier in TIERS:
        target = repo.tiers()[tier]
        if isinstance(target, str):
            print(f"  {tier}: not applicable: {target}", file=out)
            continue
        print(f"  {tier}: {render_for_check(target)}", file=out)
        for ref in result.refs.get(tier, []):
            shown = ref.value if ref.kind != "code" else "-c <code>"
            print(f"    {ref.status or 'unchecked':<11} {ref.kind:<8} {shown}"
                  + (f"  ({ref.detail})" if ref.detail else ""), file=out)
    for asset in repo.assets:
        print(f"  asset: {asset.label()}", file=out)
    census = result.census
    if census is not None:
        agree = {True: "same modules", False: "DIFFERS", None: "not run"}[result.archive_agrees]
        delta = "" if paper_total is None else f"; paper {paper_total}, delta {census.total - paper_total:+d}"
        print(f"  census: paper-compatible {census.total} (stdlib {census.stdlib}, repo {census.repo}, "
              f"third-party {census.third_party}){delta}; {len(census.files)} .py files, "
              f"{len(census.unparsable)} unparsable, {len(census.skipped)} skipped; git-archive cross-check {agree}",
              file=out)
        if result.note:
            print(f"  note: {result.note}", file=out)
        print(f"  third-party: {' '.join(census.names('third_party'))}", file=out)
    print(file=out)


def census_record(result: RepoResult, paper_total: int | None) -> dict[str, object]:
    """One entry of suites/paper/census.json."""
    repo = result.repo
    assert isinstance(repo.source, GitSource)
    census = result.census if result.exact else None
    record: dict[str, object] = {
        "id": repo.id, "slug": result.slug, "commit": repo.source.commit, "paper_total": paper_total,
        "counted": census is not None,
    }
    if census is None:
        why = ("no git copy of the repository could be had" if result.tree is None
               else "the pinned commit is not in the available git copy (its newest commit is older or on "
                    "another history)")
        record["why_not_counted"] = why
        return record
    record |= {
        "paper_compatible_total": census.total, "stdlib": census.stdlib, "repo": census.repo,
        "third_party_total": census.third_party, "py_files": len(census.files),
        "unparsable_files": len(census.unparsable), "skipped_files": len(census.skipped),
        "modules": {kind: census.names(kind) for kind in ("stdlib", "repo", "third_party")},
    }
    return record


def census_document(records: list[dict[str, object]], totals: Mapping[str, int]) -> str:
    """suites/paper/census.json: a header, the totals over the counted repos, one record per repo."""
    counted = [r for r in records if r["counted"]]
    document = {
        "suite": "paper",
        "generated_by": "docs/evidence/paper-suite/check_suite.py (resenv.probes.census at each pinned commit)",
        "python": platform.python_version(),
        "totals": {
            "repos": len(records),
            "counted_repos": len(counted),
            "paper_compatible_total": sum(int(r["paper_compatible_total"]) for r in counted),  # type: ignore[call-overload]
            "third_party_total": sum(int(r["third_party_total"]) for r in counted),  # type: ignore[call-overload]
            "paper_total_of_counted_repos": sum(int(r["paper_total"] or 0) for r in counted),  # type: ignore[call-overload]
            "paper_total": sum(totals.values()),
        },
        "repos": records,
    }
    return json.dumps(document, indent=1) + "\n"


def paper_totals(csv_path: Path | None) -> dict[str, int]:
    """The paper's C0 import total per repo URL, from its published table (empty without it)."""
    if csv_path is None or not csv_path.exists():
        return {}
    with csv_path.open() as handle:
        return {row["url"]: int(row["paper_c0_import_total"]) for row in csv.DictReader(handle)}


def main(argv: Sequence[str] | None = None) -> int:
    """Check every repo of the suite, print the report, optionally write the census; 1 if anything is missing."""
    parser = argparse.ArgumentParser(description="Check the paper suite's entrypoints and census against git copies.")
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"), help="dir of <owner>+<name>/ git copies")
    parser.add_argument("--benchmark", type=Path, default=ROOT / "benchmark.yaml")
    parser.add_argument("--csv", type=Path, default=ROOT.parent / "shared" / "paper_repos.csv",
                        help="the paper's table (for its per-repo C0 totals)")
    parser.add_argument("--census-out", type=Path, default=None, help="write the census as JSON here")
    parser.add_argument("--repo", action="append", default=[], help="only these repo ids")
    parser.add_argument("--no-archive", action="store_true", help="skip the git-archive cross-check")
    args = parser.parse_args(argv)
    if args.census_out and args.repo:
        parser.error("--census-out needs the whole suite (drop --repo)")

    bench: Benchmark = load_benchmark(args.benchmark)
    totals = paper_totals(args.csv)
    out = sys.stdout
    print(f"# check_suite.py over {args.benchmark.name}'s paper suite; git copies from {args.mirror}; "
          f"census by resenv.probes.census under Python {platform.python_version()}", file=out)
    print("# status: ok = in the tree; external = provided by the environment; output = written by the command;"
          " asset = a declared asset's destination; not in tree = listed in NOT_IN_TREE with why; MISSING = error",
          file=out)
    print(file=out)
    results: list[RepoResult] = []
    records = []
    for repo in bench.suite("paper").repos:
        if args.repo and repo.id not in args.repo:
            continue
        result = check_repo(repo, args.mirror, archive=not args.no_archive)
        paper_total = totals.get(repo.source.git)
        print_repo(result, paper_total, out)
        out.flush()
        results.append(result)
        records.append(census_record(result, paper_total))

    summarize(results, totals, out)
    if args.census_out:
        args.census_out.parent.mkdir(parents=True, exist_ok=True)
        args.census_out.write_text(census_document(records, totals))
    return 1 if any(r.missing for r in results) else 0


def summarize(results: list[RepoResult], totals: Mapping[str, int], out: TextIO) -> None:
    """Counts over all repos: entrypoints per kind of tree, missing references, census totals."""
    entrypoints = {"pinned": 0, "head": 0, "none": 0}
    for result in results:
        n = sum(isinstance(t, Entrypoint) for t in result.repo.tiers().values())
        key = "none" if result.tree is None else ("pinned" if result.exact else "head")
        entrypoints[key] += n
    missing = [(r.repo.id, tier, ref.value) for r in results for tier, ref in r.missing]
    exact = [r for r in results if r.exact and r.census is not None]
    ours = sum(r.census.total for r in exact if r.census)
    third = sum(r.census.third_party for r in exact if r.census)
    paper_same = sum(totals.get(r.repo.source.git, 0) for r in exact)
    print("# Summary", file=out)
    print(f"repos: {len(results)}; pinned commit read: {len(exact)}; "
          f"mirror HEAD only: {sum(r.tree is not None and not r.exact for r in results)}; "
          f"no copy: {sum(r.tree is None for r in results)}", file=out)
    print(f"entrypoints checked at the pinned commit: {entrypoints['pinned']}; at a mirror HEAD only: "
          f"{entrypoints['head']}; not checkable (no copy): {entrypoints['none']}", file=out)
    print(f"missing references: {len(missing)}", file=out)
    for repo_id, tier, value in missing:
        print(f"  MISSING {repo_id} {tier}: {value}", file=out)
    print(f"census over the {len(exact)} repos read at their pinned commit: paper-compatible {ours}, "
          f"third-party {third}; the paper's total for the same repos {paper_same}; "
          f"the paper's total for all 44: {sum(totals.values())}", file=out)
    disagree = [r.repo.id for r in results if r.archive_agrees is False]
    print(f"git-archive cross-check disagreements: {', '.join(disagree) or 'none'}", file=out)


if __name__ == "__main__":
    sys.exit(main())
