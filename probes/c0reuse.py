"""Reuse of an earlier C0 verdict when nothing pyright reads has changed (a tier retry, a rescore).

Every agent is an adversary, so the reuse key is computed here, by the engine, from what pyright
actually reads, never from anything the agent wrote about itself (no mtime, no size, no inode, no
record it could forge):

- the interpreter's answers. pyright asks the interpreter three questions (``sys.version``,
  ``sys.version_info``, its search paths and prefix); an agent's interpreter is any executable and
  may answer differently each time. So :func:`record_answers` asks them once, the questions pyright
  asks in our own words, and pyright is then given a *replay interpreter* that repeats those recorded
  answers (:func:`resenv.probes.mirror.write_replay`): what pyright is told is exactly what is hashed;
- the content of every file pyright reads under every root it resolves from (each search path, the
  directories its ``.pth`` files add, the repo, the config's extra paths): pyright's import resolver reads only directory listings and the
  text of ``.py`` / ``.pyi`` / ``.pth`` files and ``py.typed`` markers; every other file (a native
  module, data) it sees by its name and kind only. :func:`tree_digest` hashes every name and kind, and
  the bytes of every file of those kinds, following symlinks as pyright does (a directory reached twice
  is named by its first path). An edit that restores the mtime, a package added or removed, a
  ``.pth`` line changed: each changes the digest;
- the config pyright runs with (its include list comes from the census of the pinned commit), the
  census itself, the pyright version and command, and the source of the probe code and the rules
  version (a rescore under changed rules never reuses an old verdict).

Only verdicts of a pyright that answered (``pass`` / ``fail``) are kept; an error or a timeout is
always judged again. The key is taken before pyright runs and nothing of the agent runs in between
(probes run one after another once the agent stopped).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .capture import run_capped
from .rules import RULES_VERSION

READ_SUFFIXES = (".py", ".pyi", ".pth")
READ_NAMES = ("py.typed",)
SKIP_DIRS = (".git", "__pycache__")  # neither holds an importable module of a census
ANSWER_BYTES = 4 * 2**20
_PROBE_SOURCES = ("c0.py", "c0reuse.py", "mirror.py", "localroots.py", "census.py")

# What pyright asks an interpreter, asked in our own words: the search path it would report (empty
# entries dropped; the working directory kept if listed, yet never imported from while answering, so
# a `json.py` in the repo cannot answer for it), its prefix, and its version. A replay interpreter
# (probes/mirror.py) tells pyright's questions apart by `version_info`, then `orig_sys_path`: these
# use those names the same way (only the version query names `version_info`), so it answers them too.
_ASK_SAFELY = ("import os, sys; here = os.path.normcase(os.path.normpath(os.getcwd())); "
               "orig_sys_path = [entry for entry in sys.path if entry]; "
               "sys.path[:] = [entry for entry in orig_sys_path if os.path.normcase(os.path.normpath(entry)) != here]; "
               "import json; ")
PATH_QUERY = _ASK_SAFELY + "json.dump({'path': orig_sys_path, 'prefix': sys.prefix}, sys.stdout)"
VERSION_QUERY = _ASK_SAFELY + "json.dump(list(sys.version_info), sys.stdout)"


@dataclass(frozen=True)
class Answers:
    """What the interpreter told us, once: pyright is told the same through a replay interpreter."""

    version: str
    version_info: list[Any]
    paths: list[str]
    prefix: str


@dataclass(frozen=True)
class ReuseStore:
    """Where verdicts are kept (one JSON file per key) and the label a new one is recorded under."""

    directory: Path
    label: str  # e.g. "attempt 3": a reused verdict's evidence says `reused_from: attempt 3`

    def load(self, key: str) -> dict[str, Any] | None:
        """The kept entry for `key` ({"label", "result"}), or None (absent or unreadable)."""
        try:
            entry = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and isinstance(entry.get("result"), dict) else None

    def save(self, key: str, result: Mapping[str, Any]) -> None:
        """Keep `result` under `key`, written whole or not at all."""
        self.directory.mkdir(parents=True, exist_ok=True)
        temp = self.directory / f".{key}.tmp"
        temp.write_text(json.dumps({"label": self.label, "result": dict(result)}))
        temp.replace(self.directory / f"{key}.json")


async def record_answers(python: Path, version: str, *, env: Mapping[str, str], cwd: Path,
                         timeout: float) -> Answers | None:
    """Ask `python` pyright's questions (the version with ``-I``, the paths without, as pyright does);
    None if an answer is not what pyright would accept: C0 then runs without reuse."""
    async def ask(args: list[str]) -> Any:
        run = await run_capped([str(python), *args], env=env, cwd=cwd, timeout=timeout, stop_after=ANSWER_BYTES)
        if run.overflow or run.returncode != 0:
            return None
        try:
            return json.loads(run.stdout.value())
        except ValueError:
            return None

    info = await ask(["-I", "-c", VERSION_QUERY])
    found = await ask(["-c", PATH_QUERY])
    if (not isinstance(info, list) or len(info) < 5 or not isinstance(found, dict)
            or not isinstance(found.get("path"), list) or not all(isinstance(p, str) for p in found["path"])
            or not isinstance(found.get("prefix"), str)):
        return None
    return Answers(version=version, version_info=info, paths=found["path"], prefix=found["prefix"])


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(roots: list[Path]) -> str:
    """One hash of every name and kind under `roots` (in order) and of the bytes of every file pyright
    reads (:data:`READ_SUFFIXES`, :data:`READ_NAMES`). Symlinks are followed; a directory met again
    (a link cycle, two links to one target) is recorded by its first path and not walked twice.
    Special files (FIFOs, devices) are named, never opened."""
    digest = hashlib.sha256()
    seen: dict[tuple[int, int], str] = {}

    def line(*parts: str) -> None:
        digest.update(("\x00".join(parts) + "\n").encode("utf-8", "surrogateescape"))

    def walk(path: str) -> None:
        try:
            info = os.stat(path)
        except OSError:
            line("absent", path)
            return
        if stat.S_ISDIR(info.st_mode):
            first = seen.get((info.st_dev, info.st_ino))
            if first is not None:
                line("again", path, first)
                return
            seen[(info.st_dev, info.st_ino)] = path
            line("dir", path)
            try:
                names = sorted(os.listdir(path))
            except OSError as error:
                line("unreadable", path, type(error).__name__)
                return
            for name in names:
                if name not in SKIP_DIRS:
                    walk(os.path.join(path, name))
        elif stat.S_ISREG(info.st_mode):
            name = os.path.basename(path)
            if name.endswith(READ_SUFFIXES) or name in READ_NAMES:
                try:
                    line("file", path, _file_digest(path))
                except OSError as error:
                    line("unreadable", path, type(error).__name__)
            else:
                line("name", path)
        else:
            line("special", path, str(stat.S_IFMT(info.st_mode)))

    for root in roots:
        line("root", str(root))
        walk(os.path.abspath(root))
    return digest.hexdigest()


def pth_targets(paths: list[str]) -> list[Path]:
    """The directories the ``.pth`` files of the search `paths` add (an editable install's source,
    anywhere on disk): pyright resolves from them too, so the key walks them as roots. A line that is
    a comment or an ``import`` adds nothing, as for Python and pyright."""
    found: list[Path] = []
    for directory in paths:
        try:
            names = sorted(name for name in os.listdir(directory) if name.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(directory, name).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for text in lines:
                text = text.strip()
                if text and not text.startswith(("#", "import ", "import\t")):
                    found.append(Path(directory, text))  # an absolute line stays as it is
    return found


def probe_code_digest() -> str:
    """The source of the probe code that judges C0, and the rules version."""
    digest = hashlib.sha256(RULES_VERSION.encode())
    here = Path(__file__).parent
    for name in _PROBE_SOURCES:
        digest.update(name.encode() + b"\x00" + (here / name).read_bytes())
    return digest.hexdigest()


def _placed(config: Path) -> dict[str, Any]:
    """The config with its work-dir-relative paths made absolute: each attempt has its own work dir,
    and the same settings written in another one must give the same key."""
    settings = json.loads(config.read_text())
    base = config.parent
    for name in ("include", "exclude"):
        settings[name] = [p if p.startswith("**") else os.path.normpath(base / p) for p in settings[name]]
    return settings


def reuse_key(*, answers: Answers, roots: list[Path], config: Path, census: Mapping[str, Any],
              command: list[str], pyright_version: str) -> str:
    """The key of a C0 verdict: everything pyright reads or is told (see the module's docstring).
    `command` is pyright's, whose work-dir paths (the replay interpreter, the config) are replaced
    by what they hold."""
    work_dir = str(config.parent)
    parts = {
        "probe": probe_code_digest(),
        "pyright": [pyright_version, [arg.replace(work_dir, "<work>") for arg in command]],
        "answers": [answers.version, answers.version_info, answers.paths, answers.prefix],
        "config": _placed(config),
        "census": census,
        "tree": tree_digest(roots),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
