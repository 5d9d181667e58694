"""C0 for environments that live on another machine or in a container: judge a recorded import map.

pyright needs node and resenv's pinned pyright; a GPU host or an agent's container has neither, and
installing them there would change the very environment being judged. So the host only records its
import map (``probes/kit/importmap.py``: the interpreter's answers and the skeleton of its search
paths), and the engine's machine rebuilds that skeleton under a local *mirror* root and runs the
same :func:`resenv.probes.c0.run_c0` against it. The interpreter pyright queries there is a *replay
interpreter*: a tiny shell script that answers pyright's three questions (``sys.version``,
``sys.version_info``, the search paths and prefix) from the record, with every path moved under the
mirror. When the record could not be taken (the reported interpreter is missing or broken), the
replay interpreter fails with the host's own error, so C0 judges it exactly as it would locally.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import posixpath
import shlex
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAP_MEMBER = "importmap.json"
ROOT_MEMBER = "root"


@dataclass(frozen=True)
class Mirror:
    """Where C0 looks instead of the host: the replay interpreter and the repo under the mirror."""

    python: Path
    repo: Path
    notes: tuple[str, ...] = ()


def under(root: Path, host_path: str) -> Path:
    """`host_path` (absolute on the host) as it lies under the mirror `root`; its ``..`` components are
    resolved first (at the host's root they stay there), so a recorded search path such as
    ``/../../x`` cannot point pyright at the engine machine's own folders."""
    return root / posixpath.normpath("/" + host_path).lstrip("/")


def _replay_script(answers: Path) -> str:
    """pyright's version query and path query share a prelude, so version_info is matched first."""
    def cat(name: str) -> str:
        return f"cat {shlex.quote(str(answers / name))}"
    return "\n".join([
        "#!/bin/sh",
        "# resenv C0 replay interpreter: answers pyright from the import map recorded on the job's host",
        'case "$*" in',
        f"  *version_info*) {cat('version_info.json')} ;;",
        f"  *orig_sys_path*) {cat('search_paths.json')} ;;",
        f"  *sys.version*) {cat('version.txt')} ;;",
        '  *) echo "resenv replay interpreter: unexpected call: $*" >&2; exit 2 ;;',
        "esac",
        "",
    ])


def write_replay(answers: Path, version: str, version_info: list[Any], paths: list[str], prefix: str) -> Path:
    """A replay interpreter in `answers` (created) that tells pyright `version`, `version_info`, the
    search `paths` and `prefix`, and nothing else: its path."""
    answers.mkdir(parents=True, exist_ok=True)
    (answers / "version.txt").write_text(version + "\n")
    (answers / "version_info.json").write_text(json.dumps(version_info))
    (answers / "search_paths.json").write_text(json.dumps({"path": paths, "prefix": prefix}))
    return _write_interpreter(answers / "python", _replay_script(answers))


def _failing_script(error: str) -> str:
    return "#!/bin/sh\ncat >&2 <<'RESENV_EOF'\n" + error.rstrip("\n") + "\nRESENV_EOF\nexit 1\n"


def _write_interpreter(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def failed_mirror(dest: Path, repo: str, error: str) -> Mirror:
    """The map could not be recorded: a replay interpreter that fails with `error`, and the repo path."""
    if dest.exists():
        shutil.rmtree(dest)
    python = _write_interpreter(dest / "answers" / "python", _failing_script(error))
    return Mirror(python=python, repo=under(dest / ROOT_MEMBER, repo))


def facts_problem(facts: Any) -> str | None:
    """Why the recorded facts are unusable (each must have the type importmap.py writes), or None.
    They are the reported interpreter's answer, so any JSON may come back."""
    if not isinstance(facts, dict):
        return f"its facts are not a JSON object (got {type(facts).__name__})"
    wanted = {"version": str, "version_info": list, "path": list, "prefix": str, "repo": str}
    for key, kind in wanted.items():
        if not isinstance(facts.get(key), kind):
            return f"its facts' {key} is not a {'list' if kind is list else 'string'}"
    if not all(isinstance(path, str) for path in facts["path"]):
        return "its facts' path holds something that is not a string"
    if not all(isinstance(part, (int, str)) and not isinstance(part, bool) for part in facts["version_info"]):
        return "its facts' version_info holds something that is not a number or a string"
    if not (facts.get("entries") is None or (isinstance(facts["entries"], int) and not isinstance(facts["entries"], bool))):
        return "its facts' entries is not a number"
    if not isinstance(facts.get("truncated", False), bool):
        return "its facts' truncated is not true or false"
    return None


class ArchiveRefused(tarfile.TarError):
    """The import map breaks a rule of `build_mirror` (a cap, a path, a member type): nothing of it is used."""


MAX_EXPANDED_BYTES = 2 * 2**30
"""The whole archive, decompressed (headers included). A legitimate map of the kit's most entries
(``MAX_ENTRIES``, 1.5 million) with long paths is about 1.5 GB; a gzip bomb stops here at the latest."""
MAX_CONTENT_BYTES = 256 * 2**20
"""Bytes of file content over all members: census files, ``py.typed``, ``__init__.pyi`` stubs."""
MAX_FACTS_BYTES = 16 * 2**20
MAX_MEMBERS = 2_000_000
MAX_HEADER_BYTES = 2**20
"""Data of one pax or GNU long-name header (tarfile reads it whole into memory)."""
_LONG_HEADERS = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                 tarfile.GNUTYPE_LONGLINK)


class _CappedReader:
    """A file object that refuses to hand out more than `limit` bytes in all."""

    def __init__(self, raw: io.BufferedIOBase, limit: int) -> None:
        self.raw, self.limit, self.count = raw, limit, 0

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.count + 1
        data = self.raw.read(room if size is None or size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self.limit:
            raise ArchiveRefused(f"the import map expands to more than {self.limit:,} bytes")
        return data


class _CappedInfo(tarfile.TarInfo):
    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type in _LONG_HEADERS and self.size > MAX_HEADER_BYTES:
            raise ArchiveRefused(f"a {self.size:,}-byte extended header")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _member_path(dest: Path, name: str) -> Path:
    """Where a member goes: its name must be ``importmap.json`` or relative under ``root/``, with no
    empty, ``.`` or ``..`` component; anything else is refused (never rewritten)."""
    parts = name.split("/")
    if ("\x00" in name or name.startswith("/") or any(part in ("", ".", "..") for part in parts)
            or (parts[0] != ROOT_MEMBER and name != MAP_MEMBER)):
        raise ArchiveRefused(f"the import map has a member outside its layout: {name[:200]!r}")
    return dest.joinpath(*parts)


def _extract(archive: bytes, dest: Path) -> bytes:
    """Extract the ``root/`` members into `dest` and return the facts' bytes, under every cap.

    Only directories and regular files are accepted (the kit writes nothing else): a symlink, a hard
    link, a device, a FIFO or a sparse file refuses the whole map, as does a path that is absolute or
    has ``..``, so nothing can land outside `dest` or point out of it. The archive is read as a stream
    (never whole, decompressed), and the caps hold before the bytes they cap are read: the content of
    the members (`MAX_CONTENT_BYTES`, from their headers), the facts (`MAX_FACTS_BYTES`), the number of
    members, each extended header (`MAX_HEADER_BYTES`) and the decompressed stream
    (`MAX_EXPANDED_BYTES`)."""
    facts: bytes | None = None
    members = content = 0
    with gzip.GzipFile(fileobj=io.BytesIO(archive)) as unzipped:
        stream = _CappedReader(unzipped, MAX_EXPANDED_BYTES)
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_CappedInfo) as tar:  # type: ignore[call-overload]
            while (member := tar.next()) is not None:
                tar.members = []  # a stream: nothing refers back to earlier members
                members += 1
                if members > MAX_MEMBERS:
                    raise ArchiveRefused(f"the import map has more than {MAX_MEMBERS:,} members")
                target = _member_path(dest, member.name)
                if member.isdir() and member.name != MAP_MEMBER:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isreg() or member.issparse():
                    raise ArchiveRefused(f"the import map's member {member.name[:200]!r} is not a regular file"
                                         " or directory (links, devices and the like are refused)")
                content += member.size
                if content > MAX_CONTENT_BYTES:
                    raise ArchiveRefused(f"the import map's files hold more than {MAX_CONTENT_BYTES:,} bytes")
                source = tar.extractfile(member)
                assert source is not None
                if member.name == MAP_MEMBER:
                    if member.size > MAX_FACTS_BYTES:
                        raise ArchiveRefused(f"the import map's facts are {member.size:,} bytes")
                    facts = source.read(member.size)  # (read(n) sets n bytes aside first)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                with open(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 16)
    if facts is None:
        raise KeyError(f"filename {MAP_MEMBER!r} not found")
    return facts


def build_mirror(archive: bytes, dest: Path) -> Mirror:
    """Unpack a recorded import map under `dest` (replacing what was there) and write its replay
    interpreter. The archive comes from the agent's environment, so it is untrusted: it is extracted
    by `_extract`'s rules (caps on every size, nothing but directories and regular files, nothing
    outside `dest`; a breach is `ArchiveRefused`, a `tarfile.TarError`), and a map without its facts
    is refused with ValueError."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        data = _extract(archive, dest)
    except (OSError, EOFError, zlib.error) as error:  # not gzip, cut short, a member in the way
        raise tarfile.ReadError(f"the import map cannot be read: {type(error).__name__}: {error}") from error
    if not data:
        raise ValueError("the import map has no facts")
    try:
        facts = json.loads(data)
    except RecursionError:
        raise ValueError("the import map's facts are nested too deeply") from None
    if (problem := facts_problem(facts)) is not None:
        raise ValueError(f"the import map is malformed: {problem}")
    root = dest / ROOT_MEMBER
    root.mkdir(exist_ok=True)
    paths, prefix, repo = facts["path"], facts["prefix"], facts["repo"]
    python = write_replay(dest / "answers", facts["version"], facts["version_info"],
                          [str(under(root, p)) for p in paths], str(under(root, prefix)))
    notes = [f"import map recorded on the host: {facts.get('entries', '?')} entries"]
    if facts.get("truncated"):
        notes.append("the host's import map was cut at its entry limit: imports beyond it count as missing")
    return Mirror(python=python, repo=under(root, repo), notes=tuple(notes))
